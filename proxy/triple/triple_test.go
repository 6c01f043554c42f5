package triple

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap/zaptest"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/stormgate/stormgate/internal/testkit"
	"github.com/stormgate/stormgate/peer"
	"github.com/stormgate/stormgate/proxy"
	"github.com/stormgate/stormgate/proxy/dubbo"
	"github.com/stormgate/stormgate/proxy/h2"
	"github.com/stormgate/stormgate/proxy/proxytest"
)

// HTTP/2 through Stormgate (issue 26, first slice): real grpc-go and x/net peers on both sides, real
// sockets.

// killableListener counts the provider's connections and can end them all (a provider connection
// killed mid-run) while the listener keeps accepting.
type killableListener struct {
	net.Listener
	mu       sync.Mutex
	conns    []net.Conn
	accepted atomic.Int64
}

func (l *killableListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
	}
	return c, err
}

// kill resets every connection accepted so far (RST: SO_LINGER 0), as a provider that dies does.
func (l *killableListener) kill() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(l.conns)
	for _, c := range l.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}
	l.conns = nil
	return n
}

// grpcProvider is a grpc-go server that echoes each request message (after x-sleep-ms), or answers the
// status named by an x-status header; it keeps the most calls it ran at once. A call's x-key header is
// recorded when its handler starts, and a key seen twice counted (a call run twice); x-recv-delay-ms
// makes it wait that long before reading each message (a provider that reads slowly); x-hold makes it
// wait, before reading anything, until the test calls release (a provider that reads nothing yet).
type grpcProvider struct {
	*killableListener
	srv               *grpc.Server
	held              chan struct{} // closed by release
	releaseOnce       sync.Once
	active, maxActive atomic.Int64
	keys              sync.Map // x-key -> struct{}
	runTwice          atomic.Int64
	cancelled         atomic.Int64 // handlers that ended with their stream reset or cancelled
}

func startGRPCProvider(t testing.TB, opts ...grpc.ServerOption) *grpcProvider {
	t.Helper()
	return startGRPCProviderAt(t, "127.0.0.1:0", opts...)
}

// startGRPCProviderAt is startGRPCProvider on a given address (a provider restarted on its port).
func startGRPCProviderAt(t testing.TB, addr string, opts ...grpc.ServerOption) *grpcProvider {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	gp := &grpcProvider{killableListener: &killableListener{Listener: ln}, held: make(chan struct{})}
	kl := gp.killableListener
	opts = append(opts, grpc.ForceServerCodec(testkit.RawCodec{}), grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
		n := gp.active.Add(1)
		defer gp.active.Add(-1)
		defer func() {
			if ss.Context().Err() != nil {
				gp.cancelled.Add(1)
			}
		}()
		for m := gp.maxActive.Load(); n > m && !gp.maxActive.CompareAndSwap(m, n); m = gp.maxActive.Load() {
		}
		md, _ := metadata.FromIncomingContext(ss.Context())
		if v := md.Get("x-key"); len(v) > 0 {
			if _, seen := gp.keys.LoadOrStore(v[0], struct{}{}); seen {
				gp.runTwice.Add(1)
			}
		}
		var recvDelay time.Duration
		if v := md.Get("x-recv-delay-ms"); len(v) > 0 {
			ms, _ := strconv.Atoi(v[0])
			recvDelay = time.Duration(ms) * time.Millisecond
		}
		if v := md.Get("x-sleep-ms"); len(v) > 0 {
			ms, _ := strconv.Atoi(v[0])
			time.Sleep(time.Duration(ms) * time.Millisecond)
		}
		if len(md.Get("x-hold")) > 0 {
			select {
			case <-gp.held:
			case <-ss.Context().Done():
				return ss.Context().Err()
			}
		}
		if v := md.Get("x-status"); len(v) > 0 {
			code, _ := strconv.Atoi(v[0])
			return status.Error(codes.Code(code), "asked for "+v[0])
		}
		if v := md.Get("x-answer-bytes"); len(v) > 0 {
			var msg []byte
			if err := ss.RecvMsg(&msg); err != nil {
				return err
			}
			n, _ := strconv.Atoi(v[0])
			answer := bytes.Repeat([]byte{'a'}, n)
			return ss.SendMsg(&answer)
		}
		for {
			var msg []byte
			time.Sleep(recvDelay)
			if err := ss.RecvMsg(&msg); err == io.EOF {
				return nil
			} else if err != nil {
				return err
			}
			if err := ss.SendMsg(&msg); err != nil {
				return err
			}
		}
	}))
	gp.srv = grpc.NewServer(opts...)
	go func() { _ = gp.srv.Serve(kl) }()
	t.Cleanup(gp.srv.Stop)
	t.Cleanup(gp.release)
	return gp
}

// release lets every call held by x-hold, and every later one, go on.
func (gp *grpcProvider) release() { gp.releaseOnce.Do(func() { close(gp.held) }) }

// servers maps each Server the tests started (startH2Server) to its HTTP/2 protocol, and the registry
// of its metrics: the tests reach HTTP/2's state through the protocol, and the core's through what the
// protocol sees (its Env, its pools' Provider) and the metrics, as any protocol would.
var servers sync.Map // *proxy.Server -> served

type served struct {
	x   *h2Protocol
	reg prometheus.Gatherer // nil: the test passed a Registerer that is not one
}

// h2Of is srv's HTTP/2 protocol.
func h2Of(srv *proxy.Server) *h2Protocol {
	v, ok := servers.Load(srv)
	if !ok {
		panic("triple: a Server the tests did not start (startH2Server)")
	}
	return v.(served).x
}

// poolOf is the HTTP/2 side of srv's pool (the tests' one provider; nil when it has none yet).
func poolOf(srv *proxy.Server) *h2Pool {
	var hp *h2Pool
	h2Of(srv).pools.each(func(p *h2Pool) { hp = p })
	return hp
}

// envOf is the Env srv handed its protocol: its budget, wheel, clock and settings.
func envOf(srv *proxy.Server) proxy.Env { return h2Of(srv).env }

// sessionsOf are srv's HTTP/2 consumer connections.
func sessionsOf(srv *proxy.Server) []*h2Session {
	var hs []*h2Session
	h2Of(srv).sessions.each(func(h *h2Session) { hs = append(hs, h) })
	return hs
}

// metric is the sum of the series of the metric family name whose labels include every "name=value"
// of labels, as srv's registry exports them.
func metric(t testing.TB, srv *proxy.Server, name string, labels ...string) float64 {
	t.Helper()
	v, _ := servers.Load(srv)
	reg := v.(served).reg
	if reg == nil {
		t.Fatal("the Server's Registerer is not a Gatherer")
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for _, l := range labels {
				k, want, _ := strings.Cut(l, "=")
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == k && lp.GetValue() == want {
						found = true
					}
				}
				if !found {
					continue series
				}
			}
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			}
		}
	}
	return sum
}

// newH2Server starts a Server for a provider at upstream speaking protos, and a listener.
func newH2Server(t testing.TB, upstream string, protos proxy.Protocols, mods ...func(*proxy.Config)) (*proxy.Server, string) {
	t.Helper()
	return newH2ServerWith(t, upstream, protos, proxy.Options{}, mods...)
}

// newH2ServerWith is newH2Server with the Server's Options (a clock, a registry, a logger: the test's
// when nil).
func newH2ServerWith(t testing.TB, upstream string, protos proxy.Protocols, opts proxy.Options, mods ...func(*proxy.Config)) (*proxy.Server, string) {
	t.Helper()
	srv, addr := startH2Server(t, upstream, protos, opts, mods...)
	cfg := srv.Config()
	waitFor(t, 20*time.Second, "provider connections", func() bool {
		return srv.Stats().UpstreamConns == int64(cfg.UpstreamConns*(btoi(protos.Dubbo())+btoi(protos.Triple())))
	})
	return srv, addr
}

// startH2Server is newH2ServerWith without waiting for the provider: one that is away (nothing listens
// at upstream yet) leaves every request held.
func startH2Server(t testing.TB, upstream string, protos proxy.Protocols, opts proxy.Options, mods ...func(*proxy.Config)) (*proxy.Server, string) {
	t.Helper()
	cfg := proxytest.Config(upstream)
	cfg.Protocols = protos
	cfg.UpstreamConns = 2
	for _, m := range mods {
		m(&cfg)
	}
	opts.Codec = dubbo.Codec{}
	if opts.Logger == nil {
		opts.Logger = zaptest.NewLogger(t).Named("proxy")
	}
	if opts.Registerer == nil {
		opts.Registerer = prometheus.NewRegistry()
	}
	var x *h2Protocol
	opts.Protocol = func(env proxy.Env) proxy.Protocol { x = newH2Protocol(env); return x }
	srv, err := proxy.New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	reg, _ := opts.Registerer.(prometheus.Gatherer)
	servers.Store(srv, served{x: x, reg: reg})
	ctx, cancel := context.WithCancel(context.Background())
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	addr := proxytest.ServeLoopback(t, srv)
	t.Cleanup(func() { srv.Close(); cancel(); servers.Delete(srv) })
	return srv, addr
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func echo(ctx context.Context, cc *grpc.ClientConn, msg []byte, md ...string) ([]byte, error) {
	var resp []byte
	if len(md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
	}
	err := cc.Invoke(ctx, "/stormgate.Test/Echo", &msg, &resp)
	return resp, err
}

// TestH2UnaryThroughStormgate: a grpc-go client through Stormgate to a grpc-go server (upstream.protocol
// triple): messages from 0 B to 1 MiB across every flow-control window, 50 concurrent calls on one
// consumer connection, 20 consumer connections, and statuses passed through; the provider sees
// upstream.connections connections, not one per consumer.
func TestH2UnaryThroughStormgate(t *testing.T) {
	prov := startGRPCProvider(t)
	srv, addr := newH2Server(t, prov.Addr().String(), proxy.ProtoTriple)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cc := testkit.GRPCClient(t, addr)
	for i, size := range []int{0, 1, 100, 16 << 10, 65535, 65536, 200 << 10, 1 << 20} {
		msg := bytes.Repeat([]byte{byte('a' + i)}, size)
		for j := range 3 {
			resp, err := echo(ctx, cc, msg, "x-req", fmt.Sprint(i, j))
			if err != nil || !bytes.Equal(resp, msg) {
				t.Fatalf("size %d: %d bytes back, %v", size, len(resp), err)
			}
		}
	}
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			msg := fmt.Appendf(nil, "concurrent-%d-%s", i, bytes.Repeat([]byte{'x'}, i*997))
			if resp, err := echo(ctx, cc, msg); err != nil || !bytes.Equal(resp, msg) {
				t.Errorf("concurrent %d: %d bytes, %v", i, len(resp), err)
			}
		})
	}
	for i := range 20 {
		wg.Go(func() {
			c := testkit.GRPCClient(t, addr)
			msg := fmt.Appendf(nil, "consumer-%d", i)
			if resp, err := echo(ctx, c, msg); err != nil || !bytes.Equal(resp, msg) {
				t.Errorf("consumer %d: %q, %v", i, resp, err)
			}
		})
	}
	wg.Wait()
	_, err := echo(ctx, cc, []byte("x"), "x-status", "9")
	if st := status.Convert(err); st.Code() != codes.FailedPrecondition || st.Message() != "asked for 9" {
		t.Errorf("the provider's status: %v", err)
	}
	if n := prov.accepted.Load(); n != 2 {
		t.Errorf("the provider accepted %d connections, want upstream.connections = 2", n)
	}
	if st := srv.Stats(); st.Closed["http2_error"] != 0 {
		t.Errorf("consumers closed for HTTP/2 errors: %v", st.Closed)
	}
}

// TestH2ProviderStreamLimit: the provider's SETTINGS_MAX_CONCURRENT_STREAMS is respected: 40 concurrent
// calls against a provider allowing 3 streams per connection (2 connections) all succeed, the excess
// waiting in Stormgate, and the provider never runs more than 6 at once.
func TestH2ProviderStreamLimit(t *testing.T) {
	prov := startGRPCProvider(t, grpc.MaxConcurrentStreams(3))
	_, addr := newH2Server(t, prov.Addr().String(), proxy.ProtoTriple)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			msg := fmt.Appendf(nil, "limited-%d", i)
			if resp, err := echo(ctx, testkit.GRPCClient(t, addr), msg, "x-sleep-ms", "20"); err != nil || !bytes.Equal(resp, msg) {
				t.Errorf("call %d: %q %v", i, resp, err)
			}
		})
	}
	wg.Wait()
	if m := prov.maxActive.Load(); m > 6 || m < 2 {
		t.Errorf("the provider ran %d calls at once, want 2..6 (3 streams on each of 2 connections)", m)
	}
	t.Logf("the provider ran at most %d calls at once", prov.maxActive.Load())
}

// TestH2StalledConsumerSharesNoWindow (issue 26 item 4, the part this slice covers): a consumer that
// announces a zero stream window and opens 40 streams for 256 KiB answers never reads a byte of them;
// Stormgate keeps what the provider sent for them (at most a stream window each) but hands the shared
// provider connections' windows back at once, so another consumer's 256 KiB answers still arrive.
// (Without that, 20 stalled streams per connection hold 20 x 64 KiB of its 1 MiB window: it stalls.)
func TestH2StalledConsumerSharesNoWindow(t *testing.T) {
	prov := startGRPCProvider(t)
	srv, addr := newH2Server(t, prov.Addr().String(), proxy.ProtoTriple)
	nc, _ := stallingConsumer(t, addr, 40)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cc := testkit.GRPCClient(t, addr)
	for i := range 4 {
		resp, err := echo(ctx, cc, []byte("beside"), "x-answer-bytes", "262144")
		if err != nil || len(resp) != 262144 {
			t.Fatalf("call %d beside the stalled consumer: %d bytes, %v", i, len(resp), err)
		}
	}
	waitFor(t, 10*time.Second, "the stalled streams' bytes charged to limits.max_buffered_bytes (40 x 32 KiB at least)",
		func() bool { return envOf(srv).Budget().InUse() >= 40*(32<<10) })
	nc.Close()
	waitFor(t, 10*time.Second, "the stalled consumer's bytes released", func() bool { return envOf(srv).Budget().InUse() == 0 })
}

// TestH2StalledConsumerBound: past limits.max_queued_bytes_per_connection of answers it does not read, a
// consumer is closed as a slow reader (as a Dubbo consumer is), and its bytes are released.
func TestH2StalledConsumerBound(t *testing.T) {
	prov := startGRPCProvider(t)
	srv, addr := newH2Server(t, prov.Addr().String(), proxy.ProtoTriple, func(c *proxy.Config) { c.MaxQueuedBytesPerConn = 256 << 10 })
	_, fr := stall(t, addr, 10)
	for {
		if _, err := fr.ReadFrame(); err != nil {
			break // closed
		}
	}
	waitFor(t, 10*time.Second, "counted as slow_consumer", func() bool { return srv.Stats().Closed["slow_consumer"] == 1 })
	waitFor(t, 10*time.Second, "its bytes released", func() bool { return envOf(srv).Budget().InUse() == 0 })
}

// stallingConsumer connects a consumer that announces a zero stream window, opens n streams each asking
// for a 256 KiB answer, and has read their n answer heads; it never reads a byte of DATA.
func stallingConsumer(t *testing.T, addr string, n int) (net.Conn, *http2.Framer) {
	t.Helper()
	nc, fr := stall(t, addr, n)
	heads := 0
	for heads < n {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("after %d answer heads: %v", heads, err)
		}
		if _, ok := f.(*http2.HeadersFrame); ok {
			heads++
		}
	}
	return nc, fr
}

// stall connects a consumer with SETTINGS_INITIAL_WINDOW_SIZE 0 (h2Handshake) and opens n streams each
// asking for a 256 KiB answer.
func stall(t *testing.T, addr string, n int) (net.Conn, *http2.Framer) {
	t.Helper()
	nc, fr := h2Handshake(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	rawRequests(t, fr, n, []byte("stall"), h2.HeaderField{Name: "x-answer-bytes", Value: "262144"})
	return nc, fr
}

// dialH2 connects an h2c consumer to addr and sends the client preface and its SETTINGS (settings). The
// connection is closed when the test ends, and every read and write on it must be done within 20 s.
func dialH2(t *testing.T, addr string, settings ...http2.Setting) (net.Conn, *http2.Framer) {
	t.Helper()
	nc := dialWrite(t, addr, 20*time.Second, http2.ClientPreface)
	t.Cleanup(func() { nc.Close() })
	fr := http2.NewFramer(nc, bufio.NewReader(nc))
	if err := fr.WriteSettings(settings...); err != nil {
		t.Fatal(err)
	}
	return nc, fr
}

// dialWrite connects to addr, gives every read and write on the connection d from now, and writes in on
// it; the caller closes it.
func dialWrite(t *testing.T, addr string, d time.Duration, in string) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = nc.SetDeadline(time.Now().Add(d))
	if _, err := io.WriteString(nc, in); err != nil {
		nc.Close()
		t.Fatal(err)
	}
	return nc
}

// h2Handshake is dialH2 that returns once Stormgate's SETTINGS were acked and ours were.
func h2Handshake(t *testing.T, addr string, settings ...http2.Setting) (net.Conn, *http2.Framer) {
	t.Helper()
	nc, fr := dialH2(t, addr, settings...)
	for acked := false; !acked; { // Stormgate's SETTINGS, then its ACK of ours
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if sf, ok := f.(*http2.SettingsFrame); ok {
			if sf.IsAck() {
				acked = true
			} else if err := fr.WriteSettingsAck(); err != nil {
				t.Fatal(err)
			}
		}
	}
	return nc, fr
}

// rawRequests opens streams 1, 3, ... 2n-1 on a connection fresh from h2Handshake, each a whole gRPC call
// to /stormgate.Test/Echo carrying msg with the extra headers. The first block begins with the dynamic table
// size update Stormgate requires once its SETTINGS_HEADER_TABLE_SIZE 0 was acknowledged.
func rawRequests(t *testing.T, fr *http2.Framer, n int, msg []byte, extra ...h2.HeaderField) {
	t.Helper()
	fields := echoHead(extra...)
	first, later := firstBlock(fields), h2.AppendFields(nil, fields)
	for i := range n {
		block := later
		if i == 0 {
			block = first
		}
		id := uint32(2*i + 1)
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
		if err := fr.WriteData(id, true, grpcFrame(msg)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestH2DrainSendsGoAway: when Stormgate starts draining (Announce, as SIGTERM or POST /drain do), an HTTP/2
// consumer gets the graceful GOAWAY of RFC 9113 §6.8: NO_ERROR naming the largest stream id, and a PING. A
// stream it opens before it has seen them is served; once it answers the PING, the final GOAWAY names the last
// stream Stormgate will serve, so it opens its next calls elsewhere; the calls in flight get their answers. A
// consumer that connects during the drain gets the same; one that never answers the PING gets the final
// GOAWAY when the drain proper begins (Drain).
func TestH2DrainSendsGoAway(t *testing.T) {
	prov := startGRPCProvider(t)
	srv, addr := newH2Server(t, prov.Addr().String(), proxy.ProtoTriple)
	_, fr := h2Handshake(t, addr)
	rawRequests(t, fr, 1, []byte("in flight"), h2.HeaderField{Name: "x-sleep-ms", Value: "300"})
	waitFor(t, 10*time.Second, "the call at the provider", func() bool { return prov.active.Load() == 1 })
	srv.Announce()
	first, ping := drainGoAway(t, fr)
	if first.ErrCode != http2.ErrCodeNo || first.LastStreamID != 1<<31-1 {
		t.Errorf("first GOAWAY %v last stream %d, want NO_ERROR and 2^31-1", first.ErrCode, first.LastStreamID)
	}
	writeCall(t, fr, 3, false, []byte("on its way")) // opened before the consumer saw the GOAWAY
	if err := fr.WritePing(true, ping); err != nil {
		t.Fatal(err)
	}
	var final *http2.GoAwayFrame
	answers := map[uint32]string{}
	for len(answers) < 2 {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading (answers %v, final GOAWAY %v): %v", answers, final != nil, err)
		}
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			final = f
		case *http2.HeadersFrame:
			for _, hf := range decodeBlock(t, f.HeaderBlockFragment()) {
				if hf.Name == "grpc-status" {
					answers[f.StreamID] = hf.Value
				}
			}
		}
	}
	if answers[1] != "0" || answers[3] != "0" {
		t.Errorf("the calls in flight and on their way: grpc-status %v, want 0 for streams 1 and 3", answers)
	}
	if final == nil {
		if f, err := fr.ReadFrame(); err == nil {
			final, _ = f.(*http2.GoAwayFrame)
		}
	}
	if final == nil || final.ErrCode != http2.ErrCodeNo || final.LastStreamID != 3 {
		t.Errorf("final GOAWAY %+v, want NO_ERROR and 3", final)
	}

	// A consumer that connects while Stormgate drains gets the same, right after the handshake.
	_, fr2 := dialH2(t, addr)
	first, ping = drainGoAway(t, fr2)
	if err := fr2.WritePing(true, ping); err != nil {
		t.Fatal(err)
	}
	if g := nextGoAway(t, fr2); g.ErrCode != http2.ErrCodeNo || g.LastStreamID != 0 {
		t.Errorf("final GOAWAY %v last stream %d, want NO_ERROR and 0", g.ErrCode, g.LastStreamID)
	}
	// One that does not answer the PING gets the final GOAWAY when the drain proper begins.
	_, fr3 := dialH2(t, addr)
	drainGoAway(t, fr3)
	go func() { _ = srv.Drain(context.Background()) }()
	if g := nextGoAway(t, fr3); g.ErrCode != http2.ErrCodeNo || g.LastStreamID != 0 {
		t.Errorf("final GOAWAY at the drain %v last stream %d, want NO_ERROR and 0", g.ErrCode, g.LastStreamID)
	}
}

// drainGoAway reads a consumer connection's frames up to the drain's first GOAWAY and the PING after it.
func drainGoAway(t *testing.T, fr *http2.Framer) (*http2.GoAwayFrame, [8]byte) {
	t.Helper()
	g := nextGoAway(t, fr)
	g = &http2.GoAwayFrame{ErrCode: g.ErrCode, LastStreamID: g.LastStreamID} // the Framer reuses its frames
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("waiting for the PING after the first GOAWAY: %v", err)
		}
		if p, ok := f.(*http2.PingFrame); ok && !p.IsAck() {
			return g, p.Data
		}
	}
}

// nextGoAway reads a consumer connection's frames up to the next GOAWAY, answering Stormgate's SETTINGS.
func nextGoAway(t *testing.T, fr *http2.Framer) *http2.GoAwayFrame {
	t.Helper()
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("waiting for a GOAWAY: %v", err)
		}
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			return f
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		}
	}
}

// TestH2ConsumerSide drives Stormgate's consumer side with x/net's Framer: its SETTINGS (header table 0,
// no push), the ACK of ours, a PING answered with the same 8 bytes and never forwarded, a request in
// HEADERS + CONTINUATION, and a RST_STREAM that resets the provider's stream.
func TestH2ConsumerSide(t *testing.T) {
	prov := startGRPCProvider(t)
	srv, addr := newH2Server(t, prov.Addr().String(), proxy.ProtoTriple)
	_, fr := dialH2(t, addr)
	sf := firstSettings(t, fr)
	if v, ok := sf.Value(http2.SettingHeaderTableSize); !ok || v != 0 {
		t.Errorf("SETTINGS_HEADER_TABLE_SIZE %d (sent %v), want 0", v, ok)
	}
	if err := fr.WriteSettingsAck(); err != nil {
		t.Fatal(err)
	}
	ping := [8]byte{'s', 't', 'o', 'r', 'm', 0, 1, 2}
	if err := fr.WritePing(false, ping); err != nil {
		t.Fatal(err)
	}
	var gotAck, gotPing bool
	for !gotAck || !gotPing {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			gotAck = gotAck || f.IsAck()
		case *http2.PingFrame:
			if !f.IsAck() || f.Data != ping {
				t.Fatalf("PING answer %v % x", f.IsAck(), f.Data)
			}
			gotPing = true
		case *http2.WindowUpdateFrame:
		default:
			t.Fatalf("unexpected %v", f)
		}
	}
	if n := testutilCounter(h2Of(srv).m.pings); n != 1 {
		t.Errorf("stormgate_http2_pings_answered_total %v, want 1", n)
	}
	// A request whose head comes in HEADERS + CONTINUATION.
	block := firstBlock(echoHead(h2.HeaderField{Name: "x-pad", Value: string(bytes.Repeat([]byte{'p'}, 100))}))
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block[:20]}); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteContinuation(1, true, block[20:]); err != nil {
		t.Fatal(err)
	}
	msg := []byte("through HEADERS and CONTINUATION")
	if err := fr.WriteData(1, true, grpcFrame(msg)); err != nil {
		t.Fatal(err)
	}
	var body []byte
	var grpcStatus string
	for grpcStatus == "" {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		switch f := f.(type) {
		case *http2.DataFrame:
			body = append(body, f.Data()...)
		case *http2.HeadersFrame:
			for _, hf := range decodeBlock(t, f.HeaderBlockFragment()) {
				if hf.Name == "grpc-status" {
					grpcStatus = hf.Value
				}
			}
		}
	}
	if grpcStatus != "0" || !bytes.Equal(body, grpcFrame(msg)) {
		t.Fatalf("answer: status %q, body %q", grpcStatus, body)
	}
	// A stream the consumer resets: the provider's stream is reset too (nothing stays open there).
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: staticHead(), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteRSTStream(3, http2.ErrCodeCancel); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "no provider stream left open", func() bool { return h2StreamsLeft(srv) == 0 })
	if st := srv.Stats(); st.Closed["http2_error"] != 0 {
		t.Errorf("closed for HTTP/2 errors: %v", st.Closed)
	}
}

// grpcFrame is msg in gRPC's length-prefixed framing.
func grpcFrame(msg []byte) []byte {
	b := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	return append(b, msg...)
}

// staticHead is a gRPC request head for /stormgate.Test/Echo, stateless.
func staticHead() []byte { return h2.AppendFields(nil, echoHead()) }

// echoHead is the header list of a gRPC request to /stormgate.Test/Echo, with extra fields after it.
func echoHead(extra ...h2.HeaderField) []h2.HeaderField {
	return append([]h2.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
		{Name: ":path", Value: "/stormgate.Test/Echo"}, {Name: ":authority", Value: "x"},
		{Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"}}, extra...)
}

// firstBlock encodes a connection's first header block: it begins with the dynamic table size update
// Stormgate requires once its SETTINGS_HEADER_TABLE_SIZE 0 was acknowledged.
func firstBlock(fields []h2.HeaderField) []byte {
	var hb bytes.Buffer
	enc := hpackEncoder(&hb)
	for _, f := range fields {
		enc(f.Name, f.Value)
	}
	return hb.Bytes()
}

// TestH2FirstBytesDecide: one listener, both protocols (upstream.protocol both, with a provider that
// serves both on one port): a Dubbo consumer and a gRPC consumer side by side; an HTTP/1 request gets
// what it got before Triple. With triple alone a Dubbo consumer is closed (protocol_not_served); with
// dubbo alone an HTTP/2 client gets what it got before (bad_magic).
func TestH2FirstBytesDecide(t *testing.T) {
	grpcProv := startGRPCProvider(t)
	dubboProv, err := peer.NewProvider(peer.ProviderConfig{Addr: "127.0.0.1:0"}, zaptest.NewLogger(t).Named("provider"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go dubboProv.Serve(ctx)
	t.Cleanup(func() { dubboProv.Close() })
	both := startProtocolMux(t, dubboProv.Addr(), grpcProv.Addr().String())

	t.Run("both", func(t *testing.T) {
		srv, addr := newH2Server(t, both, proxy.ProtoDubbo|proxy.ProtoTriple)
		dc, err := peer.Dial(ctx, addr, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer dc.Close()
		cctx, ccancel := context.WithTimeout(ctx, 20*time.Second)
		defer ccancel()
		if r, err := dc.Call(cctx, 1, svc, "echo", "dubbo beside h2"); err != nil || r.Value != "dubbo beside h2" {
			t.Fatalf("Dubbo call: %+v %v", r, err)
		}
		if resp, err := echo(cctx, testkit.GRPCClient(t, addr), []byte("h2 beside dubbo")); err != nil || string(resp) != "h2 beside dubbo" {
			t.Fatalf("gRPC call: %q %v", resp, err)
		}
		if r, err := dc.Call(cctx, 2, svc, "echo", "again"); err != nil || r.Value != "again" {
			t.Fatalf("Dubbo call: %+v %v", r, err)
		}
		reply := exchange(t, addr, "POST / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n\r\n")
		if !bytes.HasPrefix(reply, []byte("HTTP/1.1 400 Bad Request\r\n")) {
			t.Errorf("an h2c Upgrade request got %q, want the 400 any HTTP/1 request gets", reply)
		}
		waitFor(t, 5*time.Second, "the HTTP/1 client counted", func() bool { return srv.Stats().Closed["bad_magic"] == 1 })
	})
	t.Run("triple_only", func(t *testing.T) {
		srv, addr := newH2Server(t, grpcProv.Addr().String(), proxy.ProtoTriple)
		dc, err := peer.Dial(ctx, addr, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer dc.Close()
		_ = dc.Send(dubboRequest(1, "refused"))
		select {
		case <-dc.Closed():
		case <-time.After(10 * time.Second):
			t.Fatal("a Dubbo consumer of a Triple-only provider was not closed")
		}
		waitFor(t, 5*time.Second, "counted", func() bool { return srv.Stats().Closed["protocol_not_served"] == 1 })
	})
	t.Run("dubbo_only", func(t *testing.T) {
		srv, addr := newH2Server(t, dubboProv.Addr(), proxy.ProtoDubbo)
		reply := exchange(t, addr, http2.ClientPreface)
		if len(reply) != 0 {
			t.Errorf("an HTTP/2 client of a Dubbo-only sidecar got %q, want nothing (as before Triple)", reply)
		}
		waitFor(t, 5*time.Second, "counted", func() bool { return srv.Stats().Closed["bad_magic"] == 1 })
	})
}

// exchange sends in on a new connection and returns everything read until the peer closes.
func exchange(t *testing.T, addr, in string) []byte {
	t.Helper()
	nc := dialWrite(t, addr, 10*time.Second, in)
	defer nc.Close()
	out, err := io.ReadAll(nc)
	if err != nil && !isReset(err) {
		t.Fatalf("reading: %v", err)
	}
	return out
}

func isReset(err error) bool { return errors.Is(err, syscall.ECONNRESET) }

// startProtocolMux is a provider port serving Dubbo and HTTP/2 at once (Dubbo 3's port unification):
// each connection goes to the Dubbo or the gRPC provider by its first byte.
func startProtocolMux(t *testing.T, dubboAddr, grpcAddr string) string {
	t.Helper()
	return startProtocolMuxAt(t, "127.0.0.1:0", dubboAddr, grpcAddr)
}

// startProtocolMuxAt is startProtocolMux listening at addr (a provider that comes back on its port).
func startProtocolMuxAt(t *testing.T, addr, dubboAddr, grpcAddr string) string {
	t.Helper()
	return serveAt(t, addr, func(c net.Conn) {
		go func() {
			defer c.Close()
			br := bufio.NewReader(c)
			first, err := br.Peek(1)
			if err != nil {
				return
			}
			to := dubboAddr
			if first[0] == 'P' {
				to = grpcAddr
			}
			up, err := net.Dial("tcp", to)
			if err != nil {
				return
			}
			defer up.Close()
			go func() { _, _ = io.Copy(up, br); up.(*net.TCPConn).CloseWrite() }()
			_, _ = io.Copy(c, up)
		}()
	}).Addr().String()
}

// serveLoopback listens on loopback and hands each accepted connection to handle, until the test ends.
func serveLoopback(t *testing.T, handle func(net.Conn)) net.Listener {
	t.Helper()
	return serveAt(t, "127.0.0.1:0", handle)
}

// serveAt is serveLoopback at addr.
func serveAt(t *testing.T, addr string, handle func(net.Conn)) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			handle(c)
		}
	}()
	return ln
}

// h2cTransport is an x/net HTTP/2 client over cleartext TCP with prior knowledge, one connection.
func h2cTransport(addr string) *http2.Transport {
	return &http2.Transport{
		AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, _ string, _ *tls.Config) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}
}

// h2Outcome is what a unary call through Stormgate got.
type h2Outcome struct {
	ok, unavailable, cancelled bool
	cut                        bool // a gRPC client saw the answer end inside a message
	detail                     string
}

// unaryH2 sends one gRPC unary call with x/net and checks the invariant of DESIGN §8a for HTTP/2: the
// answer is exactly the call's own bytes with grpc-status 0, or grpc-status 14 after at most a prefix of
// its own bytes. Anything else is reported in detail. hdr are more request headers, name then value.
func unaryH2(ctx context.Context, tr *http2.Transport, msg []byte, hdr ...string) h2Outcome {
	want := grpcFrame(msg)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://stormgate/stormgate.Test/Echo", bytes.NewReader(want))
	req.Header.Set("content-type", "application/grpc")
	req.Header.Set("te", "trailers")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	req.ContentLength = int64(len(want))
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return h2Outcome{cancelled: ctx.Err() != nil, detail: "round trip: " + err.Error()}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		own := bytes.HasPrefix(want, body)
		return h2Outcome{cancelled: ctx.Err() != nil && own,
			detail: fmt.Sprintf("body after %d bytes (own prefix %v): %v", len(body), own, err)}
	}
	st := resp.Trailer.Get("grpc-status")
	if st == "" {
		st = resp.Header.Get("grpc-status") // trailers-only
	}
	switch {
	case st == "0" && bytes.Equal(body, want):
		return h2Outcome{ok: true}
	case st == "14" && bytes.HasPrefix(want, body):
		return h2Outcome{unavailable: true, detail: resp.Trailer.Get("grpc-message") + resp.Header.Get("grpc-message")}
	}
	return h2Outcome{detail: fmt.Sprintf("grpc-status %q, %d bytes back of %d (own prefix %v)", st, len(body), len(want), bytes.HasPrefix(want, body))}
}

// TestH2IntegrityProviderKilled (DESIGN §8a for HTTP/2, the first slice of issue 26's acceptance 2): 64
// h2c consumers (x/net, one connection each) send unary calls with unique bodies from 1 B to 256 KiB
// through Stormgate to a grpc-go provider whose connections are killed (RST) twice mid-run; one call in
// eight is cancelled by its consumer at a random moment (RST_STREAM CANCEL). Every call that is not
// cancelled gets exactly its own bytes and grpc-status 0, or grpc-status 14 after at most a prefix of its
// own bytes: never another call's bytes, never a hang; a cancelled one may also end so, or in its
// cancellation. Calls go on succeeding after each kill (the pool reconnects). At the end no stream is
// left open at the provider or waiting in Stormgate, and every byte Stormgate kept is released.
func TestH2IntegrityProviderKilled(t *testing.T) {
	prov := startGRPCProvider(t)
	srv, addr := newH2Server(t, prov.Addr().String(), proxy.ProtoTriple)
	const consumers, calls = 64, 12
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	var ok, unavailable, cancelled, done atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan string, consumers*calls)
	for i := range consumers {
		wg.Go(func() {
			tr := h2cTransport(addr)
			defer tr.CloseIdleConnections()
			for j := range calls {
				size := 1 << ((i*calls + j) % 19) // 1 B .. 256 KiB
				msg := make([]byte, size)
				for k := range msg {
					msg[k] = byte(i*31 + j*7 + k)
				}
				copy(msg, fmt.Sprintf("%d/%d", i, j)) // unique from the first bytes on
				cctx, ccancel := context.WithCancel(ctx)
				cancelCall := (i+j)%8 == 3
				if cancelCall {
					time.AfterFunc(time.Duration(rand.N(2000))*time.Microsecond, ccancel)
				}
				o := unaryH2(cctx, tr, msg)
				ccancel()
				switch {
				case o.ok:
					ok.Add(1)
				case o.unavailable:
					unavailable.Add(1)
				case cancelCall && o.cancelled:
					cancelled.Add(1)
				default:
					errs <- fmt.Sprintf("consumer %d call %d (%d B): %s", i, j, size, o.detail)
				}
				done.Add(1)
			}
		})
	}
	for _, at := range []int64{consumers * calls / 4, consumers * calls / 2} {
		waitFor(t, 60*time.Second, "calls to progress", func() bool { return done.Load() >= at })
		t.Logf("killing the provider's %d connections after %d calls", prov.kill(), done.Load())
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	t.Logf("%d calls: %d answered, %d UNAVAILABLE, %d cancelled by their consumer; the provider accepted %d connections in all",
		consumers*calls, ok.Load(), unavailable.Load(), cancelled.Load(), prov.accepted.Load())
	if ok.Load() < consumers*calls/2 {
		t.Errorf("only %d of %d calls answered", ok.Load(), consumers*calls)
	}
	// After the run, calls succeed again: the pool reconnected.
	if o := unaryH2(ctx, h2cTransport(addr), []byte("after")); !o.ok {
		t.Errorf("a call after the kills: %s", o.detail)
	}
	waitFor(t, 10*time.Second, "no stream left at the provider or waiting", func() bool { return h2StreamsLeft(srv) == 0 })
	waitFor(t, 10*time.Second, "every kept byte released", func() bool { return envOf(srv).Budget().InUse() == 0 })
}

// h2StreamsLeft counts the calls of the first pool's HTTP/2 provider side that are not over: waiting for a
// stream, on a provider connection, or a stream still open there.
func h2StreamsLeft(srv *proxy.Server) int {
	hp := poolOf(srv)
	hp.mu.Lock()
	defer hp.mu.Unlock()
	n := hp.prov.Hold().CallsWaiting() + hp.prov.Hold().PausedCalls()
	for _, u := range hp.ups {
		n += u.calls.Len() + u.conn.OpenStreams()
	}
	return n
}

func testutilCounter(c prometheus.Counter) float64 { return testutil.ToFloat64(c) }

// hpackEncoder is x/net's encoder after the peer's SETTINGS_HEADER_TABLE_SIZE 0 was acknowledged: its
// first block begins with a dynamic table size update (RFC 7541 §4.2), as Stormgate requires.
func hpackEncoder(w io.Writer) func(name, value string) {
	enc := hpack.NewEncoder(w)
	enc.SetMaxDynamicTableSizeLimit(0)
	return func(name, value string) { _ = enc.WriteField(hpack.HeaderField{Name: name, Value: value}) }
}

// decodeBlock decodes one of Stormgate's header blocks, which need no table.
func decodeBlock(t *testing.T, block []byte) []hpack.HeaderField {
	t.Helper()
	fs, err := hpack.NewDecoder(0, nil).DecodeFull(block)
	if err != nil {
		t.Fatalf("Stormgate's header block does not decode without a table: %v", err)
	}
	return fs
}

func dubboRequest(id int64, arg string) []byte {
	return dubbo.AppendRequest(nil, id, true, svc, "echo", arg)
}

// faultRelay forwards TCP to a target, and makes the provider behind it fail the two ways a provider
// fails without closing anything:
//
//	freeze       every connection open so far becomes a black hole (bytes read and dropped both ways):
//	             a host that vanished without a FIN or RST; later connections are not frozen
//	stop, resume nothing more is read either way (bytes wait in the kernel's buffers) until resume: a
//	             process under SIGSTOP
type faultRelay struct {
	ln      net.Listener
	mu      sync.Mutex
	frozen  []*atomic.Bool
	stopped sync.RWMutex // write-locked while stopped: every copy waits for it around each read
}

func startFaultRelay(t *testing.T, target string) *faultRelay {
	t.Helper()
	r := &faultRelay{}
	r.ln = serveLoopback(t, func(c net.Conn) {
		up, err := net.Dial("tcp", target)
		if err != nil {
			c.Close()
			return
		}
		t.Cleanup(func() { c.Close(); up.Close() })
		f := new(atomic.Bool)
		r.mu.Lock()
		r.frozen = append(r.frozen, f)
		r.mu.Unlock()
		go r.pipe(up, c, f)
		go r.pipe(c, up, f)
	})
	return r
}

func (r *faultRelay) pipe(dst, src net.Conn, frozen *atomic.Bool) {
	buf := make([]byte, 32<<10)
	for {
		r.waitRunning()
		n, err := src.Read(buf)
		r.waitRunning() // bytes read just before a stop are passed on after it
		if n > 0 && !frozen.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err == io.EOF {
				_ = dst.(*net.TCPConn).CloseWrite()
			}
			return
		}
	}
}

func (r *faultRelay) waitRunning() {
	r.stopped.RLock()
	r.stopped.RUnlock()
}

func (r *faultRelay) freeze() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range r.frozen {
		f.Store(true)
	}
}

func (r *faultRelay) stop()   { r.stopped.Lock() }
func (r *faultRelay) resume() { r.stopped.Unlock() }

// TestH2ProviderLiveness: while a call waits on a provider connection that reads nothing, Stormgate PINGs
// it every keepalive.upstream_interval and declares it dead when a PING goes unanswered for
// upstream_max_missed intervals: a call sent to a provider that vanished (no FIN, no RST) gets
// grpc-status 14 saying so, and the slot's new connection serves the next call.
func TestH2ProviderLiveness(t *testing.T) {
	prov := startGRPCProvider(t)
	relay := startFaultRelay(t, prov.Addr().String())
	srv, addr := newH2Server(t, relay.ln.Addr().String(), proxy.ProtoTriple, func(c *proxy.Config) {
		c.UpstreamConns = 1
		c.UpstreamInterval = 100 * time.Millisecond
		c.UpstreamMaxMissed = 3
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cc := testkit.GRPCClient(t, addr)
	if _, err := echo(ctx, cc, []byte("warm")); err != nil {
		t.Fatal(err)
	}
	relay.freeze()
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		_, err := echo(ctx, cc, []byte("stuck"))
		done <- err
	}()
	select {
	case err := <-done:
		st := status.Convert(err)
		if st.Code() != codes.Unavailable || !bytes.Contains([]byte(st.Message()), []byte("no answer to a PING")) {
			t.Fatalf("the call on the vanished provider: %v", err)
		}
		t.Logf("UNAVAILABLE after %v: %s", time.Since(start).Round(time.Millisecond), st.Message())
	case <-time.After(15 * time.Second):
		t.Fatal("the call on the vanished provider was not ended")
	}
	if resp, err := echo(ctx, cc, []byte("after")); err != nil || string(resp) != "after" {
		t.Fatalf("a call on the new connection: %q %v", resp, err)
	}
	if n := metric(t, srv, "stormgate_upstream_heartbeats_sent_total"); n < 1 {
		t.Errorf("%v PINGs sent, want at least the one left unanswered", n)
	}
}

// TestH2PingsWithinGRPCPolicy: grpc-go's server (default keepalive enforcement) closes a connection whose
// client PINGs more than twice while it sends nothing ("too_many_pings"). A call that stays silent for ten
// upstream intervals still succeeds: Stormgate stops at maxQuietPings PINGs per silence.
func TestH2PingsWithinGRPCPolicy(t *testing.T) {
	prov := startGRPCProvider(t)
	srv, addr := newH2Server(t, prov.Addr().String(), proxy.ProtoTriple, func(c *proxy.Config) {
		c.UpstreamConns = 1
		c.UpstreamInterval = 100 * time.Millisecond
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if resp, err := echo(ctx, testkit.GRPCClient(t, addr), []byte("slow"), "x-sleep-ms", "1000"); err != nil || string(resp) != "slow" {
		t.Fatalf("a call silent for 10 intervals: %q %v", resp, err)
	}
	if n := metric(t, srv, "stormgate_upstream_heartbeats_sent_total"); n < 1 || n > maxQuietPings {
		t.Errorf("%v PINGs during the silence, want 1..%d", n, maxQuietPings)
	}
}

// TestH2IdleTimeoutSparesOpenStreams (1 s idle timeout, a call 3 s long): keepalive.downstream_idle_timeout
// closes an HTTP/2 consumer that sent
// nothing for that long, but not while one of its calls is open: a gRPC client sends nothing while it
// waits for a slow answer (it has no heartbeat of its own unless configured).
func TestH2IdleTimeoutSparesOpenStreams(t *testing.T) {
	prov := startGRPCProvider(t)
	srv, addr := newH2Server(t, prov.Addr().String(), proxy.ProtoTriple, func(c *proxy.Config) { c.DownstreamIdleTimeout = time.Second })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cc := testkit.GRPCClient(t, addr)
	if resp, err := echo(ctx, cc, []byte("slow"), "x-sleep-ms", "3000"); err != nil || string(resp) != "slow" {
		t.Fatalf("a call three idle timeouts long: %q %v", resp, err)
	}
	if n := srv.Stats().Closed["idle_timeout"]; n != 0 {
		t.Errorf("%d consumers closed as idle during the call", n)
	}
	waitFor(t, 10*time.Second, "the idle consumer closed after the call", func() bool { return srv.Stats().Closed["idle_timeout"] == 1 })
}

// TestH2ProviderGoAway: a provider that stops gracefully (grpc-go's GracefulStop: GOAWAY, then it waits for
// its streams) finishes the call it has; Stormgate opens no new stream on that connection, and the call made
// meanwhile waits for the provider's next incarnation on the same port instead of failing.
func TestH2ProviderGoAway(t *testing.T) {
	prov := startGRPCProvider(t)
	addr := prov.Addr().String()
	srv, saddr := newH2Server(t, addr, proxy.ProtoTriple, func(c *proxy.Config) { c.UpstreamConns = 1; c.HoldTimeout = 10 * time.Second })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cc := testkit.GRPCClient(t, saddr)
	slow := make(chan error, 1)
	go func() {
		resp, err := echo(ctx, cc, []byte("finishing"), "x-sleep-ms", "800")
		if err == nil && string(resp) != "finishing" {
			err = fmt.Errorf("answer %q", resp)
		}
		slow <- err
	}()
	waitFor(t, 10*time.Second, "the slow call at the provider", func() bool { return prov.active.Load() == 1 })
	stopped := make(chan struct{})
	go func() { prov.srv.GracefulStop(); close(stopped) }()
	hp := poolOf(srv)
	waitFor(t, 10*time.Second, "the GOAWAY seen", func() bool { return hp.readyConns() == 0 })
	next := make(chan error, 1)
	go func() {
		resp, err := echo(ctx, cc, []byte("next"))
		if err == nil && string(resp) != "next" {
			err = fmt.Errorf("answer %q", resp)
		}
		next <- err
	}()
	if err := <-slow; err != nil {
		t.Fatalf("the call the provider had when it stopped: %v", err)
	}
	<-stopped
	prov2 := startGRPCProviderAt(t, addr)
	if err := <-next; err != nil {
		t.Fatalf("the call made during the stop: %v", err)
	}
	if a, b := prov.accepted.Load(), prov2.accepted.Load(); a != 1 || b != 1 {
		t.Errorf("connections: %d to the old provider, %d to the new one; want 1 and 1", a, b)
	}
}

// TestH2RequestBytesBudgeted: request bytes waiting in Stormgate for a provider that does not read yet are
// charged to limits.max_buffered_bytes; past it a call ends with grpc-status 14 saying so, the others get
// their answers, and every byte is released at the end. (Answers are small here: answer bytes over the
// budget close their consumer as a slow reader, as for Dubbo, which TestH2StalledConsumerBound covers.)
func TestH2RequestBytesBudgeted(t *testing.T) {
	// The provider reads nothing until some call has been refused, and its windows are fixed at 64 KiB
	// (grpc-go's window estimate could otherwise grow them until it takes every byte itself): 6 requests
	// of 256 KiB then wait in Stormgate, which must refuse calls rather than hold more than 96 KiB.
	prov := startGRPCProvider(t, grpc.InitialWindowSize(64<<10), grpc.InitialConnWindowSize(64<<10))
	srv, addr := newH2Server(t, prov.Addr().String(), proxy.ProtoTriple, func(c *proxy.Config) { c.MaxBufferedBytes = 96 << 10 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var ok, over atomic.Int64
	for i := range 6 {
		wg.Go(func() {
			msg := bytes.Repeat([]byte{byte('A' + i)}, 256<<10)
			resp, err := echo(ctx, testkit.GRPCClient(t, addr), msg, "x-hold", "1", "x-answer-bytes", "10")
			st := status.Convert(err)
			switch {
			case err == nil && bytes.Equal(resp, []byte("aaaaaaaaaa")):
				ok.Add(1)
			case st.Code() == codes.Unavailable && strings.Contains(st.Message(), "limits.max_buffered_bytes"):
				over.Add(1)
			default:
				t.Errorf("call %d: %d bytes, %v", i, len(resp), err)
			}
		})
	}
	waitFor(t, 20*time.Second, "a call refused for the budget while the provider reads nothing", func() bool { return over.Load() > 0 })
	prov.release()
	wg.Wait()
	t.Logf("%d answered, %d refused for the budget", ok.Load(), over.Load())
	if ok.Load() == 0 {
		t.Errorf("no call was answered once the provider read")
	}
	waitFor(t, 10*time.Second, "every byte released", func() bool { return envOf(srv).Budget().InUse() == 0 })
}

// waitFor is testkit.WaitFor: it polls cond every 5 ms until it holds, failing t after d.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testkit.WaitFor(t, d, what, cond)
}
