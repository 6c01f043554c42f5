package triple

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stormgate/stormgate/internal/testkit"
	"github.com/stormgate/stormgate/keepalive"
	"github.com/stormgate/stormgate/proxy"
)

// TestH2HungProviderIsVisible is TestHungProviderIsVisible for an HTTP/2 provider: one that stops (SIGSTOP)
// while a call is on it is not hidden behind the consumers' PINGs Stormgate answers. With the default
// keepalive.upstream_hung_timeout (5 s), its connection takes no new stream, the provider is hung (Hung()
// for /readyz, stormgate_upstream_hung, stormgate_provider_hangs_total) within 10 s on the clock, a new call
// waits in the hold queue instead of piling into the stopped provider, and all of it ends when it answers
// again. Before, a Triple provider could not be hung at all.
func TestH2HungProviderIsVisible(t *testing.T) {
	prov := startGRPCProvider(t)
	relay := startFaultRelay(t, prov.Addr().String())
	clk := keepalive.NewManualClock(time.Unix(1_000_000, 0))
	srv, addr := newH2ServerWith(t, relay.ln.Addr().String(), proxy.ProtoTriple, proxy.Options{Clock: clk}, func(c *proxy.Config) {
		c.UpstreamConns = 1
		c.HoldMaxBytesPerConsumer = 64 << 10
	})
	step := func(d time.Duration) { clk.Add(d); envOf(srv).Wheel().Advance(clk.Now()) }
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cc := testkit.GRPCClient(t, addr)
	if _, err := echo(ctx, cc, []byte("before")); err != nil {
		t.Fatal(err)
	}

	relay.stop()
	stopped := true
	defer func() {
		if stopped {
			relay.resume()
		}
	}()
	stuck := echoAsync(ctx, cc, "stuck")
	waitFor(t, 10*time.Second, "the call on a provider stream", func() bool { return h2StreamsOpen(srv) == 1 })
	var hungAt time.Duration
	for at := time.Duration(0); at < 10*time.Second && srv.Hung() == ""; at += time.Second {
		step(time.Second)
		hungAt = at + time.Second
	}
	if srv.Hung() == "" {
		t.Fatal("a stopped HTTP/2 provider was not seen hung within 10 s")
	}
	t.Logf("hung after %v on the clock: %s", hungAt, srv.Hung())
	if n := metric(t, srv, "stormgate_provider_hangs_total"); n != 1 {
		t.Errorf("stormgate_provider_hangs_total %v, want 1", n)
	}
	if n := metric(t, srv, "stormgate_upstream_connection_state", "state=hung", "protocol=triple"); n != 1 {
		t.Errorf("stormgate_upstream_connection_state{state=hung,protocol=triple} %v, want 1", n)
	}
	// A new call waits in the hold queue, not on the stopped provider.
	held := echoAsync(ctx, cc, "held")
	waitFor(t, 10*time.Second, "the new call held", func() bool { return metric(t, srv, "stormgate_held_requests") == 1 })
	// A hung provider is away for hold.max_bytes_per_consumer too, as for Dubbo (pool.usable): a call
	// that would take the consumer past it is answered, not held.
	if err := <-echoAsync(ctx, cc, strings.Repeat("b", 70<<10)); status.Code(err) != codes.Unavailable ||
		!strings.Contains(status.Convert(err).Message(), "hold.max_bytes_per_consumer") {
		t.Errorf("a call past hold.max_bytes_per_consumer while the provider is hung: %v, want UNAVAILABLE naming it", err)
	}
	if n := h2StreamsOpen(srv); n != 1 {
		t.Errorf("%d calls on provider streams, want the stuck one alone", n)
	}

	relay.resume()
	stopped = false
	for _, ch := range []<-chan error{stuck, held} {
		if err := <-ch; err != nil {
			t.Fatalf("after the provider answers again: %v", err)
		}
	}
	waitFor(t, 10*time.Second, "not hung any more", func() bool { return srv.Hung() == "" && poolOf(srv).readyConns() == 1 })
	if _, err := echo(ctx, cc, []byte("after")); err != nil {
		t.Fatal(err)
	}
}

// TestH2SlowCallIsNotAHang: a provider whose call runs long while its connection answers PINGs is never
// hung, and Stormgate's probes stay within gRPC's PING policy (at most maxQuietPings while the provider
// sends nothing: grpc-go closes the connection past it, which would fail the call).
func TestH2SlowCallIsNotAHang(t *testing.T) {
	prov := startGRPCProvider(t)
	clk := keepalive.NewManualClock(time.Unix(1_000_000, 0))
	srv, addr := newH2ServerWith(t, prov.Addr().String(), proxy.ProtoTriple, proxy.Options{Clock: clk}, func(c *proxy.Config) {
		c.UpstreamConns = 1
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := echoAsync(ctx, testkit.GRPCClient(t, addr), "slow", "x-sleep-ms", "3000")
	waitFor(t, 10*time.Second, "the call on a provider stream", func() bool { return h2StreamsOpen(srv) == 1 })
	for range 30 {
		clk.Add(time.Second)
		envOf(srv).Wheel().Advance(clk.Now())
		waitFor(t, 10*time.Second, "a probe answered", func() bool { return !h2PingOutstanding(srv) })
		if h := srv.Hung(); h != "" {
			t.Fatalf("a slow call made the provider hung: %s", h)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := metric(t, srv, "stormgate_upstream_heartbeats_sent_total"); n < 1 || n > maxQuietPings {
		t.Errorf("%v PINGs during the silence, want 1..%d", n, maxQuietPings)
	}
}

// echoAsync makes an echo call of msg and says how it ended: nil when the answer was msg.
func echoAsync(ctx context.Context, cc *grpc.ClientConn, msg string, md ...string) <-chan error {
	ch := make(chan error, 1)
	go func() {
		resp, err := echo(ctx, cc, []byte(msg), md...)
		if err == nil && string(resp) != msg {
			err = fmt.Errorf("answer %q, want %q", resp, msg)
		}
		ch <- err
	}()
	return ch
}

// h2StreamsOpen is the number of calls on provider streams in the first pool.
func h2StreamsOpen(srv *proxy.Server) int {
	hp := poolOf(srv)
	hp.mu.Lock()
	defer hp.unlock()
	return hp.streams
}

// h2PingOutstanding reports whether a PING of Stormgate's waits for its ACK on a provider connection.
func h2PingOutstanding(srv *proxy.Server) bool {
	hp := poolOf(srv)
	hp.mu.Lock()
	defer hp.unlock()
	for _, u := range hp.ups {
		if u.pingSent != 0 {
			return true
		}
	}
	return false
}

// TestH2CloseDoesNotWaitForTheReadProof: a provider connection that ended while the provider's socket
// stays open waits for the kernel's announcement of that socket's end (the proof of what the provider
// read, up to diagWait on the server's clock); Close stops that wait, since nothing is sent again once
// the pool closes. Found in fresh-clone run 90: TestH2HungProviderIsVisible's cleanup waited 14 minutes
// in ReadProof.ProviderRead on the test's manual clock, after grpc-go had ended a connection through the
// test's relay, which keeps its sockets open until the test ends.
func TestH2CloseDoesNotWaitForTheReadProof(t *testing.T) {
	prov := startAdvProvider(t) // keeps its sockets open until the test ends
	clk := keepalive.NewManualClock(time.Unix(1_000_000, 0))
	srv, _ := startH2Server(t, prov.addr(), proxy.ProtoTriple, proxy.Options{Clock: clk}, func(c *proxy.Config) { c.UpstreamConns = 1 })
	hp := poolOf(srv)
	pc := prov.next(t)
	pc.settings()
	waitFor(t, 10*time.Second, "the provider connection usable", func() bool { return hp.readyConns() == 1 })
	if err := pc.nc.(*net.TCPConn).CloseWrite(); err != nil { // the provider's FIN; its socket stays
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the connection's end waiting for the proof", func() bool {
		buf := make([]byte, 1<<20)
		return bytes.Contains(buf[:runtime.Stack(buf, true)], []byte("(*ReadProof).ProviderRead"))
	})
	closed := make(chan struct{})
	go func() {
		srv.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close still waiting after 10 s: for the announcement of a provider socket that stays open, on a clock that does not move")
	}
}
