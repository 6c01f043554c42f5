package triple

import (
	"bytes"
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stormgate/stormgate/internal/testkit"
	"github.com/stormgate/stormgate/proxy"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// TestH2ConnectionsResizeLive: upstream.connections is a live setting (settings/validate.go), and
// HTTP/2 provider connections follow it as Dubbo's do. Grown, new connections are dialed; shrunk, the
// retired connections take no new stream, finish the calls on them and close, and no call fails.
// Before, the HTTP/2 pool read it once at start: still 2 connections after a change to 4.
func TestH2ConnectionsResizeLive(t *testing.T) {
	prov := startGRPCProvider(t)
	front := &openCounter{Listener: mustListen(t)}
	go relayAccepts(front, prov.Addr().String())
	srv, addr := newH2Server(t, front.Addr().String(), proxy.ProtoTriple)
	hp := poolOf(srv)
	set := func(n int) {
		t.Helper()
		cfg := *envOf(srv).Config()
		cfg.UpstreamConns = n
		if err := srv.Update(cfg); err != nil {
			t.Fatal(err)
		}
	}
	set(4)
	waitFor(t, 20*time.Second, "4 HTTP/2 provider connections", func() bool { return hp.readyConns() == 4 && front.open.Load() == 4 })

	// Calls in flight on every connection while the pool shrinks to 1.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cc := testkit.GRPCClient(t, addr)
	var wg sync.WaitGroup
	var failed atomic.Int64
	call := func(i int) {
		msg := bytes.Repeat([]byte{byte('a' + i%26)}, 100+i)
		got, err := echo(ctx, cc, msg, "x-sleep-ms", "300")
		if err != nil || !bytes.Equal(got, msg) {
			failed.Add(1)
			t.Errorf("call %d: %d bytes, %v", i, len(got), err)
		}
	}
	for i := range 40 {
		wg.Go(func() { call(i) })
	}
	waitFor(t, 20*time.Second, "calls on the provider", func() bool { return prov.active.Load() >= 20 })
	set(1)
	for i := range 40 { // and calls that start after the change
		wg.Go(func() { call(40 + i) })
	}
	wg.Wait()
	waitFor(t, 20*time.Second, "1 HTTP/2 provider connection", func() bool { return hp.readyConns() == 1 && front.open.Load() == 1 })
	if failed.Load() > 0 {
		t.Fatalf("%d of 80 calls failed across the resize", failed.Load())
	}
	set(2)
	waitFor(t, 20*time.Second, "2 HTTP/2 provider connections", func() bool { return hp.readyConns() == 2 && front.open.Load() == 2 })
}

// openCounter is a listener that counts its connections still open (both sides relayed: relayAccepts).
type openCounter struct {
	net.Listener
	open atomic.Int64
}

func mustListen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// relayAccepts relays each connection of l to target until either side ends, counting it open meanwhile.
func relayAccepts(l *openCounter, target string) {
	for {
		in, err := l.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", target)
		if err != nil {
			in.Close()
			continue
		}
		l.open.Add(1)
		go func() {
			var once sync.Once
			end := func() { once.Do(func() { in.Close(); out.Close(); l.open.Add(-1) }) }
			go func() { _, _ = io.Copy(out, in); end() }()
			_, _ = io.Copy(in, out)
			end()
		}()
	}
}

// TestH2GoAwayOpensANewConnection: a provider's GOAWAY stops new streams on that connection, and the slot
// opens a new connection at once (RFC 9113 §6.8) rather than after the old one's last stream ends.
// grpc-go's MaxConnectionAge does exactly this to a provider that goes on serving: with one connection and
// a 5 s call on it, a call made after the GOAWAY waited for that call to end. Now it is answered on the new
// connection while the long call still runs there.
func TestH2GoAwayOpensANewConnection(t *testing.T) {
	prov := startGRPCProvider(t, grpc.KeepaliveParams(keepalive.ServerParameters{
		MaxConnectionAge: 300 * time.Millisecond, MaxConnectionAgeGrace: 30 * time.Second}))
	_, addr := newH2Server(t, prov.Addr().String(), proxy.ProtoTriple, func(c *proxy.Config) { c.UpstreamConns = 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cc := testkit.GRPCClient(t, addr)
	long := make(chan error, 1)
	go func() {
		_, err := echo(ctx, cc, []byte("long"), "x-sleep-ms", "5000")
		long <- err
	}()
	waitFor(t, 10*time.Second, "the long call at the provider", func() bool { return prov.active.Load() == 1 })
	waitFor(t, 10*time.Second, "a second provider connection", func() bool { return prov.accepted.Load() >= 2 })
	got, err := echo(ctx, cc, []byte("next"))
	if err != nil || string(got) != "next" {
		t.Fatalf("the call after the GOAWAY: %q, %v", got, err)
	}
	select {
	case err := <-long:
		t.Fatalf("the long call ended (%v) before the next call was answered: the next one waited for it", err)
	default:
	}
	if err := <-long; err != nil {
		t.Fatalf("the long call, below the GOAWAY's last stream id: %v", err)
	}
}
