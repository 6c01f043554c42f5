package triple

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/stormgate/stormgate/internal/testkit"
	"github.com/stormgate/stormgate/proxy"
	"github.com/stormgate/stormgate/proxy/h2"
	"github.com/stormgate/stormgate/proxy/proxytest"
)

// TestHandoverAcrossExecTriple is TestHandoverAcrossExec with Triple consumers (issue 27 item 5): grpc-go
// clients call a grpc-go provider through a child Server with unique bodies and keys, the child
// freezes (quiescing HTTP/2 first), execs itself and restores. Every call gets exactly its own answer,
// none fails, no consumer connection closes (each client dials once), the provider runs no call twice,
// and calls that arrived during the quiesce crossed the exec waiting (the snapshot carried them).
func TestHandoverAcrossExecTriple(t *testing.T) {
	prov := startGRPCProvider(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	child := testkit.StartHandoverChild(t, prov.Addr().String())
	next := child.Next
	addr := next("listening ")

	const consumers = 24
	var dials atomic.Int64
	ccs := make([]*grpc.ClientConn, consumers)
	for i := range ccs {
		cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.ForceCodec(testkit.RawCodec{})),
			grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
				dials.Add(1)
				return (&net.Dialer{}).DialContext(ctx, "tcp", a)
			}))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		ccs[i] = cc
	}
	load := startTripleLoad(t, ctx, ccs)
	waitFor(t, 20*time.Second, "calls before the handover", func() bool { return load.calls.Load() >= 4*consumers })
	// A call the quiesce must wait for (300 ms at the provider), under way when the freeze begins: the
	// other consumers' next calls arrive meanwhile and wait. Without it the quiesce could find no call
	// on a provider stream, end at once, and carry none waiting (1 run in 75).
	holder := make(chan h2Outcome, 1)
	go func() {
		hctx := metadata.AppendToOutgoingContext(ctx, "x-key", "quiesce-holder", "x-sleep-ms", "300")
		holder <- h2UnaryCall(hctx, ccs[0], []byte("quiesce-holder"))
	}()
	waitFor(t, 10*time.Second, "the quiesce's call at the provider", func() bool {
		_, ok := prov.keys.Load("quiesce-holder")
		return ok
	})
	if err := child.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	frozen := next("frozen ")
	took := next("restored ")
	before := load.calls.Load()
	waitFor(t, 20*time.Second, "calls after the handover", func() bool { return load.calls.Load() > before+4*consumers })
	load.finish(t)
	if o := <-holder; !o.ok {
		t.Errorf("the call under way at the freeze: %s", o.detail)
	}
	t.Logf("%d calls; snapshot: %s; handover %s", load.calls.Load(), frozen, took)
	if n := dials.Load(); n != consumers {
		t.Errorf("the consumers dialled %d times; want %d (one connection each, never closed)", n, consumers)
	}
	if n := prov.runTwice.Load(); n != 0 {
		t.Errorf("the provider ran %d calls twice", n)
	}
	var h2s, waiting int
	if _, err := fmt.Sscanf(frozen, "sessions=%d h2=%d waiting=%d", new(int), &h2s, &waiting); err != nil {
		t.Fatalf("child's frozen line %q: %v", frozen, err)
	}
	if h2s != consumers || waiting == 0 {
		t.Errorf("the snapshot carried %d HTTP/2 consumers and %d waiting calls; want %d and some", h2s, waiting, consumers)
	}
}

// tripleLoad is unary calls in a loop on each client connection, each with a unique key and body, each
// answer checked against its own body, until finish.
type tripleLoad struct {
	calls, failed atomic.Int64
	stop          chan struct{}
	wg            sync.WaitGroup
}

func startTripleLoad(t *testing.T, ctx context.Context, ccs []*grpc.ClientConn) *tripleLoad {
	l := &tripleLoad{stop: make(chan struct{})}
	var firstFailure sync.Once
	for i, cc := range ccs {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for k := 0; ; k++ {
				select {
				case <-l.stop:
					return
				default:
				}
				key := fmt.Sprintf("c%d-%d", i, k)
				msg := integrityMsg(key, k, 1+(i*131+k*17)%3000)
				// x-sleep-ms keeps calls on provider streams when a quiesce begins: it waits for them,
				// while the calls their consumers make next wait for a stream.
				// One consumer in eight has slower calls, so that the others' next calls arrive during a
				// quiesce.
				sleep := "3"
				if i%8 == 0 {
					sleep = "25"
				}
				cctx := metadata.AppendToOutgoingContext(ctx, "x-key", key, "x-sleep-ms", sleep)
				if o := h2UnaryCall(cctx, cc, msg); !o.ok {
					l.failed.Add(1)
					firstFailure.Do(func() { t.Errorf("call %s: %s", key, o.detail) })
					return
				}
				l.calls.Add(1)
			}
		}()
	}
	return l
}

// finish stops the load and checks that no call failed.
func (l *tripleLoad) finish(t *testing.T) {
	t.Helper()
	close(l.stop)
	l.wg.Wait()
	if n := l.failed.Load(); n != 0 {
		t.Errorf("%d calls failed", n)
	}
}

// TestH2FreezeThaw: a freeze with Triple consumers calling, then a thaw (what a failed exec does), three
// times: every call gets its own answer, and the calls that waited through the freeze are sent after it.
func TestH2FreezeThaw(t *testing.T) {
	prov := startGRPCProvider(t)
	srv, addr := newH2Server(t, prov.Addr().String(), proxy.ProtoTriple)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ccs := make([]*grpc.ClientConn, 16)
	for i := range ccs {
		ccs[i] = testkit.GRPCClient(t, addr)
	}
	load := startTripleLoad(t, ctx, ccs)
	for round := range 3 {
		before := load.calls.Load()
		waitFor(t, 20*time.Second, "calls before the freeze", func() bool { return load.calls.Load() >= before+32 })
		sn, err := srv.Freeze(ctx)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		t.Logf("round %d: %s", round, proxytest.SnapshotSummary(sn))
		for _, st := range sn.Sessions {
			if st.Proto != proxy.SnapH2 || st.H2 == nil {
				t.Fatalf("round %d: a consumer crossed as %q, not as HTTP/2", round, st.Proto)
			}
		}
		srv.Thaw()
		before = load.calls.Load()
		waitFor(t, 20*time.Second, "calls after the thaw", func() bool { return load.calls.Load() >= before+32 })
	}
	load.finish(t)
	if n := prov.runTwice.Load(); n != 0 {
		t.Errorf("the provider ran %d calls twice", n)
	}
}

// TestH2FreezeRefusedWhileStreaming: a stream open on a provider stream keeps HTTP/2 from coming to rest;
// Freeze fails within its budget saying so, and everything serves as before: the stream goes on, and a
// unary call made meanwhile is answered.
func TestH2FreezeRefusedWhileStreaming(t *testing.T) {
	ctx, _, srv, cc, st := echoStreamThrough(t)
	unary := make(chan h2Outcome, 1)
	go func() {
		for !h2Of(srv).quiescing.Load() && ctx.Err() == nil {
			time.Sleep(time.Millisecond)
		}
		unary <- h2UnaryCall(ctx, cc, []byte("during the quiesce"))
	}()
	start := time.Now()
	_, err := srv.Freeze(ctx)
	if err == nil || !strings.Contains(err.Error(), "1 HTTP/2 calls on provider streams") {
		t.Fatalf("Freeze with a stream open: %v; want a refusal naming the stream", err)
	}
	if d := time.Since(start); d < h2QuiesceBudget {
		t.Errorf("Freeze gave up after %v, before its budget %v", d, h2QuiesceBudget)
	}
	if o := <-unary; !o.ok {
		t.Errorf("the unary call made during the quiesce: %s", o.detail)
	}
	streamEcho(t, st, "after")
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var got []byte
	if err := st.RecvMsg(&got); err == nil {
		t.Fatalf("stream: an echo after CloseSend: %q", got)
	}
}

// TestH2FreezeEndsOpenCalls: with FreezeOptions.EndOpenCalls (sidecar upgrade --end-streams), the calls
// still on provider streams when the quiesce's budget is up are ended instead of failing the freeze: a
// bidirectional stream and a unary call that runs 10 s each get grpc-status 14 with a message naming the
// upgrade, their consumer's connection is in the snapshot (handed over, never closed), and after the thaw
// it makes calls again. Without the option the same freeze fails (TestH2FreezeRefusedWhileStreaming).
func TestH2FreezeEndsOpenCalls(t *testing.T) {
	ctx, prov, srv, cc, st := echoStreamThrough(t)
	slow := make(chan error, 1)
	go func() {
		_, err := echo(ctx, cc, []byte("slow"), "x-sleep-ms", "10000")
		slow <- err
	}()
	waitFor(t, 10*time.Second, "the stream and the slow call at the provider", func() bool { return prov.active.Load() == 2 })
	start := time.Now()
	sn, err := srv.FreezeWith(ctx, proxy.FreezeOptions{EndOpenCalls: true})
	if err != nil {
		t.Fatalf("Freeze ending open calls: %v", err)
	}
	took := time.Since(start)
	n := len(sn.Sessions)
	srv.Thaw()
	if n != 1 {
		t.Errorf("the snapshot has %d consumer connections; want the one whose calls were ended", n)
	}
	if took < h2QuiesceBudget || took > 2*h2QuiesceBudget {
		t.Errorf("Freeze took %v; want the budget (%v) and a little more", took, h2QuiesceBudget)
	}
	wantEnded := func(what string, err error) {
		t.Helper()
		if s := status.Convert(err); s.Code() != codes.Unavailable || !strings.Contains(s.Message(), "--end-streams") {
			t.Errorf("%s: %v; want UNAVAILABLE naming the upgrade", what, err)
		}
	}
	var got []byte
	wantEnded("the stream", st.RecvMsg(&got))
	wantEnded("the slow unary call", <-slow)
	if o := h2UnaryCall(ctx, cc, []byte("after the thaw")); !o.ok {
		t.Errorf("a call after the thaw: %s", o.detail)
	}
	if c := srv.Stats().Closed; c[proxy.ClosePeer.String()]+c[proxy.CloseH2Error.String()] != 0 {
		t.Errorf("consumer connections closed: %v", c)
	}
	waitFor(t, 10*time.Second, "the provider's stream reset", func() bool { return prov.cancelled.Load() >= 1 })
}

// echoStreamThrough starts the test gRPC provider and a Server in front of it, and a consumer whose
// bidirectional stream to the provider's echo, through the Server, is open and has echoed "before". The
// stream's context, which the test may use too, ends after 30 s or with the test.
func echoStreamThrough(t *testing.T) (context.Context, *grpcProvider, *proxy.Server, *grpc.ClientConn, grpc.ClientStream) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	prov := startGRPCProvider(t)
	srv, addr := newH2Server(t, prov.Addr().String(), proxy.ProtoTriple)
	cc := testkit.GRPCClient(t, addr)
	st, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, "/stormgate.Test/Echo")
	if err != nil {
		t.Fatal(err)
	}
	streamEcho(t, st, "before")
	return ctx, prov, srv, cc, st
}

// streamEcho sends msg on st, a stream to the test provider's echo, and wants it back.
func streamEcho(t *testing.T, st grpc.ClientStream, msg string) {
	t.Helper()
	b, got := []byte(msg), []byte(nil)
	if err := st.SendMsg(&b); err != nil {
		t.Fatal(err)
	}
	if err := st.RecvMsg(&got); err != nil || string(got) != msg {
		t.Fatalf("stream echo %q: %q %v", msg, got, err)
	}
}

// A call carried over by a handover starts at once when a provider connection can take it. The
// restored pool dials as it is rebuilt, so its connections can be up before the consumers' waiting calls
// are put back: nothing else would start them until some other stream ended (make test's upgrade run
// had Triple calls waiting up to 0.8 s: p99 633 ms against 15 ms with one upgrade). The provider answers
// only once the test has looked: a call answered before it could be looked at ended the test with the
// pool's lock held (a nil call, 1 run in 12 on 005549c, and the run then hung until the 15 min timeout).
func TestH2AdoptedCallStartsAtOnce(t *testing.T) {
	release := make(chan struct{})
	prov := startScriptedH2(t, func(pc *scriptedConn, id uint32, n int, body []byte) {
		go func() { <-release; pc.answer(id, body) }()
	})
	srv, _ := resendServer(t, prov, proxy.Options{})
	// A consumer connection at rest, as a handover carries it: the handshake done, SETTINGS acked.
	conn := restedServerConn(t, srv)
	state, err := conn.Export()
	if err != nil {
		t.Fatal(err)
	}
	state.LastPeer, state.PeerOpen = 1, 1
	state.Streams = []h2.StreamSnapshot{{ID: 1, State: h2.StateHalfClosedRemote, Send: 65535, Recv: h2.RecvState{Avail: 65535}}}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	msg := grpcFrame([]byte("carried over"))
	head := echoHead()
	err = srv.RestoreConsumer(fds[0], &proxy.SessionSnapshot{Proto: proxy.SnapH2, H2: &proxy.H2SessionSnapshot{Conn: state, Calls: []proxy.H2CallSnapshot{{Stream: 1, Head: head,
		In: msg, InEnd: true, Kept: &proxy.H2KeptSnapshot{Head: head, Body: msg, Complete: true}}}}})
	if err != nil {
		t.Fatal(err)
	}
	h := sessionsOf(srv)[0]
	c := h.call(1)
	poolOf(srv).mu.Lock()
	started, waiting := c != nil && c.up != nil, c != nil && c.waiting
	poolOf(srv).mu.Unlock()
	close(release)
	if !started || waiting {
		t.Fatalf("the carried call: on a provider stream %v, waiting %v; want it started at once", started, waiting)
	}
	waitFor(t, 10*time.Second, "the provider's answer", func() bool { return h.call(1) == nil })
}

// TestH2FreezeClosesRestless: a consumer that never acknowledges Stormgate's SETTINGS cannot be handed
// over (its header blocks may use a table the restored decoder would not have). Freeze does not wait the
// whole budget for it, nor fail: once the calls are done it gives it h2RestGrace, then closes it with
// GOAWAY SETTINGS_TIMEOUT, and hands the rest over. The gRPC consumers beside it notice nothing.
func TestH2FreezeClosesRestless(t *testing.T) {
	prov := startGRPCProvider(t)
	srv, addr := newH2Server(t, prov.Addr().String(), proxy.ProtoTriple)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ccs := []*grpc.ClientConn{testkit.GRPCClient(t, addr), testkit.GRPCClient(t, addr), testkit.GRPCClient(t, addr)}
	load := startTripleLoad(t, ctx, ccs)
	_, fr := dialH2(t, addr) // its SETTINGS, and never an ACK of Stormgate's
	waitFor(t, 10*time.Second, "Stormgate's SETTINGS", func() bool {
		f, err := fr.ReadFrame()
		sf, ok := f.(*http2.SettingsFrame)
		return err == nil && ok && !sf.IsAck()
	})
	waitFor(t, 10*time.Second, "calls", func() bool { return load.calls.Load() >= 30 })
	start := time.Now()
	sn, err := srv.Freeze(ctx)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	n := len(sn.Sessions)
	srv.Thaw()
	if n != len(ccs) {
		t.Errorf("the snapshot has %d consumers; want the %d gRPC ones, not the one that never acked", n, len(ccs))
	}
	if took < h2RestGrace || took > h2QuiesceBudget {
		t.Errorf("Freeze took %v; want the grace (%v), not the budget (%v)", took, h2RestGrace, h2QuiesceBudget)
	}
	var ga *http2.GoAwayFrame
	for ga == nil {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("the restless consumer: %v before a GOAWAY", err)
		}
		ga, _ = f.(*http2.GoAwayFrame)
	}
	if ga.ErrCode != http2.ErrCodeSettingsTimeout {
		t.Errorf("GOAWAY %v; want SETTINGS_TIMEOUT", ga.ErrCode)
	}
	before := load.calls.Load()
	waitFor(t, 10*time.Second, "calls after the thaw", func() bool { return load.calls.Load() >= before+30 })
	load.finish(t)
}

// TestH2WaitingConnBack: which of a restored waiting call's bytes had their connection window handed back
// is read off the connection's windows (what it still holds), so that neither this build's snapshots
// (handed back on receipt: nothing held) nor an older build's (nothing handed back: all of In held) hand
// a byte back twice or lose one. A request sent again is never the consumer's to hand back.
func TestH2WaitingConnBack(t *testing.T) {
	calls := []proxy.H2CallSnapshot{{In: make([]byte, 300)}, {In: make([]byte, 500), Resending: true}, {In: make([]byte, 200)}}
	for _, tc := range []struct {
		name string
		held int64
		want int64
	}{
		{"this build: handed back on receipt", 0, 500},
		{"an older build: nothing handed back", 500, 0},
		{"part", 120, 380},
		{"more held than kept (never at rest)", 900, 0},
	} {
		if got := waitingConnBack(calls, tc.held); got != tc.want {
			t.Errorf("%s: waitingConnBack(held %d) = %d, want %d", tc.name, tc.held, got, tc.want)
		}
	}
}

// TestH2AdoptedCallHandsBackOnce: a waiting call carried over with request DATA gets its consumer's
// connection window back exactly once, whichever build wrote the snapshot: at rest and after the call,
// the restored connection holds none of it, and announces no more than its window.
func TestH2AdoptedCallHandsBackOnce(t *testing.T) {
	for _, older := range []bool{false, true} {
		t.Run(map[bool]string{false: "this build", true: "older build"}[older], func(t *testing.T) {
			prov := startScriptedH2(t, func(pc *scriptedConn, id uint32, n int, body []byte) { pc.answer(id, body) })
			srv, _ := resendServer(t, prov, proxy.Options{})
			msg := grpcFrame([]byte("carried over, its window handed back once"))
			// The consumer's side as the old image left it: the handshake done, stream 1 open with msg
			// received (its stream window shut by it), and the connection's share of msg handed back
			// (this build) or not (an older build).
			conn := restedServerConn(t, srv)
			state, err := conn.Export()
			if err != nil {
				t.Fatal(err)
			}
			if older {
				state.ConnRecv.Avail -= int64(len(msg))
			}
			state.LastPeer, state.PeerOpen = 1, 1
			win := int64(state.Local.InitialWindowSize)
			state.Streams = []h2.StreamSnapshot{{ID: 1, State: h2.StateOpen, Send: 65535,
				Recv: h2.RecvState{Avail: win - int64(len(msg))}}}
			fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(fds[0])
			defer unix.Close(fds[1])
			head := echoHead()
			err = srv.RestoreConsumer(fds[0], &proxy.SessionSnapshot{Proto: proxy.SnapH2, H2: &proxy.H2SessionSnapshot{Conn: state, Calls: []proxy.H2CallSnapshot{{Stream: 1, Head: head,
				In: msg}}}})
			if err != nil {
				t.Fatal(err)
			}
			hs := sessionsOf(srv)[0]
			// The consumer ends its request; the call's bytes went to the provider, which answers.
			hs.hp.data(hs.call(1), nil, true)
			waitFor(t, 10*time.Second, "the provider's answer", func() bool { return hs.call(1) == nil })
			hs.mu.Lock()
			defer hs.mu.Unlock()
			h := hs.conn.ConnHeld()
			hs.conn.ClearOutput()
			st, err := hs.conn.Export()
			if err != nil {
				t.Fatal(err)
			}
			if got := st.ConnRecv.Avail + st.ConnRecv.Unacked; h != 0 || got != int64(st.ConnWin) {
				t.Fatalf("after the call: the connection holds %d bytes and its window is %d (avail %d + unacked %d), "+
					"want 0 and the announced %d", h, got, st.ConnRecv.Avail, st.ConnRecv.Unacked, st.ConnWin)
			}
		})
	}
}

// restedServerConn is a consumer connection's h2.Conn at rest, as a handover carries it: the client
// preface and SETTINGS read, its SETTINGS acknowledged, nothing owed.
func restedServerConn(t *testing.T, srv *proxy.Server) *h2.Conn {
	t.Helper()
	conn := h2.NewConn(h2ConnConfig(envOf(srv).Config(), h2.RoleServer))
	in := append([]byte(h2.ClientPreface), h2.AppendSettings(nil)...)
	in = h2.AppendSettingsAck(in)
	for len(in) > 0 {
		n, _, err := conn.Read(envOf(srv).Now(), in)
		if err != nil || n == 0 {
			t.Fatalf("handshake: %d %v", n, err)
		}
		in = in[n:]
	}
	conn.ClearOutput()
	return conn
}
