package triple

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stormgate/stormgate/internal/testkit"
	"github.com/stormgate/stormgate/proxy"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// TestH2IntegrityStreamsSlowProvider is DESIGN §8a for HTTP/2 with streams (issue 26's acceptance 2,
// beyond TestH2IntegrityProviderKilled's unary calls): 64 consumers, each a grpc-go client connection,
// make unary calls (unique bodies of 1 B to 256 KiB) and bidirectional streams (1 to 6 messages of 1 B to
// 64 KiB each, sent while the echoes are read) through Stormgate to a grpc-go provider. The windows are
// small on every hop: 64 KiB per stream and per connection at the consumers and the provider (grpc-go's
// smallest; it then turns its window estimation off), 16 KiB per stream announced by Stormgate. One call
// in four goes to a handler that waits 2 ms before reading each message, so the provider's windows fill
// and Stormgate must hold a consumer's bytes or push back; one in eight is cancelled by its consumer at a
// random moment; the provider's connections are reset twice mid-run.
//
// Every call that is not cancelled ends with exactly its own bytes and status OK, or UNAVAILABLE after a
// prefix of them (a stream: each echo is compared with the message it answers, in order): never another
// call's bytes, never another status, never a hang. grpc-go checks the windows on both ends (a peer that
// exceeds one gets FLOW_CONTROL_ERROR and its connection ends), so a window exceeded or a malformed frame
// toward the provider shows as a provider connection the test did not kill: the provider accepts only
// the pool's connections, once per kill. No call runs twice at the provider (each call's x-key is
// recorded when its handler starts). At the end no stream is left open or waiting, and every byte kept is
// released.
func TestH2IntegrityStreamsSlowProvider(t *testing.T) {
	const win = 64 << 10
	prov := startGRPCProvider(t, grpc.InitialWindowSize(win), grpc.InitialConnWindowSize(win))
	srv, addr := newH2Server(t, prov.Addr().String(), proxy.ProtoTriple, func(c *proxy.Config) {
		c.HTTP2.InitialWindowSize = 16 << 10
	})
	const consumers, calls, kills = 64, 24, 2
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	var ok, unavailable, cut, cancelled, streams, done atomic.Int64
	// killsBegun counts the kills started, killsSettled those after which the pool reconnected: a call
	// during which no kill was under way must succeed.
	var killsBegun, killsSettled atomic.Int64
	errs := make(chan string, consumers*calls)
	var wg sync.WaitGroup
	for i := range consumers {
		wg.Go(func() {
			cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithDefaultCallOptions(grpc.ForceCodec(testkit.RawCodec{})),
				grpc.WithInitialWindowSize(win), grpc.WithInitialConnWindowSize(win))
			if err != nil {
				errs <- err.Error()
				return
			}
			defer cc.Close()
			for j := range calls {
				key := fmt.Sprintf("%d/%d", i, j)
				settledAtStart := killsSettled.Load()
				cctx, ccancel := context.WithCancel(ctx)
				cancelCall := (i+j)%8 == 3
				if cancelCall {
					time.AfterFunc(time.Duration(rand.N(3000))*time.Microsecond, ccancel)
				}
				md := []string{"x-key", key}
				if (i+j)%4 == 1 {
					md = append(md, "x-recv-delay-ms", "2")
				}
				cctx = metadata.AppendToOutgoingContext(cctx, md...)
				var o h2Outcome
				if (i+j)%3 == 0 {
					streams.Add(1)
					o = h2StreamCall(cctx, cc, key, 1+(i+j)%6)
				} else {
					o = h2UnaryCall(cctx, cc, integrityMsg(key, 0, 1<<((i*calls+j)%19)))
				}
				ccancel()
				killed := killsBegun.Load() > settledAtStart
				switch {
				case o.ok:
					ok.Add(1)
				case o.unavailable && killed:
					unavailable.Add(1)
				case o.cut && killed:
					cut.Add(1)
				case cancelCall && o.cancelled:
					cancelled.Add(1)
				case killed:
					errs <- fmt.Sprintf("call %s, during a kill: %s", key, o.detail)
				default:
					errs <- fmt.Sprintf("call %s, no kill under way: %s", key, o.detail)
				}
				done.Add(1)
			}
		})
	}
	for k := 1; k <= kills; k++ {
		at := int64(consumers * calls * k / (kills + 2))
		waitFor(t, 60*time.Second, "calls to progress", func() bool { return done.Load() >= at })
		killsBegun.Add(1)
		t.Logf("resetting the provider's %d connections after %d calls", prov.kill(), done.Load())
		conns := int64(envOf(srv).Config().UpstreamConns * (k + 1))
		waitFor(t, 30*time.Second, "the pool to reconnect", func() bool { return prov.accepted.Load() >= conns })
		killsSettled.Add(1)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	t.Logf("%d calls (%d streams): %d answered whole, %d UNAVAILABLE, %d cut mid-message (INTERNAL), %d cancelled by their consumer; the provider accepted %d connections",
		consumers*calls, streams.Load(), ok.Load(), unavailable.Load(), cut.Load(), cancelled.Load(), prov.accepted.Load())
	if ok.Load() < consumers*calls/2 {
		t.Errorf("only %d of %d calls answered whole", ok.Load(), consumers*calls)
	}
	if n := prov.runTwice.Load(); n != 0 {
		t.Errorf("%d calls ran twice at the provider", n)
	}
	// Only the kills end provider connections: one that ended otherwise (a window exceeded, a malformed
	// frame: grpc-go closes the connection) would have been replaced by one more.
	if got, most := prov.accepted.Load(), int64(envOf(srv).Config().UpstreamConns*(kills+1)); got > most {
		t.Errorf("the provider accepted %d connections; the pool's %d connections and %d kills account for %d",
			got, envOf(srv).Config().UpstreamConns, kills, most)
	}
	waitFor(t, 10*time.Second, "no stream left at the provider or waiting", func() bool { return h2StreamsLeft(srv) == 0 })
	waitFor(t, 10*time.Second, "every kept byte released", func() bool { return envOf(srv).Budget().InUse() == 0 })
}

// integrityMsg is message k of the call named key, n bytes: the name and index first (unique from the
// first bytes on, when n allows), then bytes that depend on both.
func integrityMsg(key string, k, n int) []byte {
	b := make([]byte, n)
	seed := crc32.ChecksumIEEE(fmt.Appendf(nil, "%s#%d", key, k))
	for i := range b {
		seed = seed*1664525 + 1013904223
		b[i] = byte(seed >> 24)
	}
	copy(b, fmt.Sprintf("%s#%d:", key, k))
	return b
}

// h2UnaryCall is one unary echo of msg, classified.
func h2UnaryCall(ctx context.Context, cc *grpc.ClientConn, msg []byte) h2Outcome {
	var resp []byte
	err := cc.Invoke(ctx, "/stormgate.Test/Echo", &msg, &resp)
	switch {
	case err == nil && bytes.Equal(resp, msg):
		return h2Outcome{ok: true}
	case err == nil:
		return h2Outcome{detail: fmt.Sprintf("status OK with %d bytes that are not its own %d (%.20q)", len(resp), len(msg), resp)}
	}
	return grpcOutcome(ctx, err, fmt.Sprintf("unary, %d bytes", len(msg)))
}

// h2StreamCall is a bidirectional stream of n messages, written while the echoes are read; each echo is
// checked against the message it answers.
func h2StreamCall(ctx context.Context, cc *grpc.ClientConn, key string, n int) h2Outcome {
	st, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, "/stormgate.Test/Echo")
	if err != nil {
		return grpcOutcome(ctx, err, "opening the stream")
	}
	msgs := make([][]byte, n)
	for k := range msgs {
		msgs[k] = integrityMsg(key, k, 1<<((len(key)*7+k*5)%17))
	}
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for k := range msgs {
			if st.SendMsg(&msgs[k]) != nil {
				return // the stream ended: RecvMsg says how
			}
		}
		_ = st.CloseSend()
	}()
	defer func() { <-sent }()
	for k := 0; ; k++ {
		var got []byte
		err := st.RecvMsg(&got)
		switch {
		case errors.Is(err, io.EOF) && k == n:
			return h2Outcome{ok: true}
		case errors.Is(err, io.EOF):
			return h2Outcome{detail: fmt.Sprintf("stream ended with status OK after %d of %d echoes", k, n)}
		case err != nil:
			return grpcOutcome(ctx, err, fmt.Sprintf("stream, after %d of %d echoes", k, n))
		case k >= n:
			return h2Outcome{detail: fmt.Sprintf("stream: echo %d of %d sent", k+1, n)}
		case !bytes.Equal(got, msgs[k]):
			return h2Outcome{detail: fmt.Sprintf("stream: echo %d is %d bytes that are not its message's %d (%.20q)", k, len(got), len(msgs[k]), got)}
		}
	}
}

// grpcOutcome classifies a call's error: UNAVAILABLE (the provider lost, Stormgate's grpc-status 14), the
// answer cut inside a gRPC message (grpc-go reports INTERNAL "unexpected EOF" whatever status the trailers
// carry), or CANCELED after its own context was cancelled; anything else is a failure with what.
func grpcOutcome(ctx context.Context, err error, what string) h2Outcome {
	switch st := status.Convert(err); st.Code() {
	case codes.Unavailable:
		return h2Outcome{unavailable: true, detail: err.Error()}
	case codes.Internal:
		if st.Message() == "unexpected EOF" {
			return h2Outcome{cut: true, detail: what + ": " + err.Error()}
		}
	case codes.Canceled:
		if ctx.Err() != nil {
			return h2Outcome{cancelled: true}
		}
	}
	return h2Outcome{detail: fmt.Sprintf("%s: %v", what, err)}
}

// TestH2IdleSessionKeepsLittle: once its calls are answered, an HTTP/2 consumer's session keeps at most
// a few KiB of buffers, however large its requests and answers were. Found by the Triple soak: 10,000
// consumers exchanging bodies of up to 256 KiB left Stormgate with 818 MiB live after a forced GC with
// the load paused, 500 MiB of it partial-frame buffers that had grown to a whole read (new input was
// appended to a partial frame whole) and 187 MiB frame scratch kept up to 64 KiB per session.
func TestH2IdleSessionKeepsLittle(t *testing.T) {
	prov := startGRPCProvider(t)
	srv, addr := newH2Server(t, prov.Addr().String(), proxy.ProtoTriple)
	cc := testkit.GRPCClient(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 4 {
				msg := integrityMsg(fmt.Sprintf("keep %d/%d", i, j), 0, 256<<10-i*1000)
				if o := h2UnaryCall(ctx, cc, msg); !o.ok {
					t.Errorf("call %d/%d: %s", i, j, o.detail)
				}
			}
		})
	}
	wg.Wait()
	hs := sessionsOf(srv)
	// h.in is the netpoll handler's: read once the connection is closed and its session gone (netpoll
	// runs the close callback after the handler, and the protocol's session set's lock orders that
	// before this).
	cc.Close()
	waitFor(t, 10*time.Second, "the session to close", func() bool { return len(sessionsOf(srv)) == 0 })
	var in, out, pend int
	for _, h := range hs {
		h.mu.Lock()
		out, pend = max(out, cap(h.out)), max(pend, cap(h.pend))
		h.mu.Unlock()
		in = max(in, cap(h.in))
	}
	if len(hs) == 0 {
		t.Fatal("no HTTP/2 session found")
	}
	if in > h2BufKeep || out > h2BufKeep || pend > h2BufKeep {
		t.Errorf("an idle session keeps %d B of partial-frame buffer, %d B of frame scratch, %d B of pending answers; want at most %d each",
			in, out, pend, h2BufKeep)
	}
}
