package proxy

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stormgate/stormgate/keepalive"
	"github.com/stormgate/stormgate/peer"
	"github.com/stormgate/stormgate/proxy/dubbo"
)

// TestIdleTimeoutSparesACallInFlight: a consumer waiting for an answer sends nothing meanwhile (a Dubbo
// consumer with its heartbeats off, as an HTTP/2 one has none: TestH2IdleTimeoutSparesOpenStreams), and is
// not idle: keepalive.downstream_idle_timeout closing it lost the answer. Beside it a consumer with no call
// is closed at the same instant, and the busy one once its answer is in and the timeout has passed again.
func TestIdleTimeoutSparesACallInFlight(t *testing.T) {
	type seen struct {
		c net.Conn
		h dubbo.Header
	}
	got := make(chan seen, 1)
	prov := newScriptedProvider(t, func(c net.Conn, h dubbo.Header, _ []byte) { got <- seen{c, h} })
	clk := keepalive.NewManualClock(time.Unix(1_000_000, 0))
	f := newFixtureWith(t, peer.ProviderConfig{}, Options{Clock: clk}, func(c *Config) {
		c.Upstream, c.UpstreamConns, c.DownstreamIdleTimeout = prov.addr(), 1, time.Second
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	busy := f.dial(ctx)
	f.dial(ctx) // sends nothing
	waitFor(t, 10*time.Second, "both consumers served", func() bool { return f.srv.sessions.len() == 2 })
	res := callAsync(ctx, busy, 1, "slow answer")
	var req seen
	select {
	case req = <-got:
	case <-ctx.Done():
		t.Fatal("the request did not reach the provider")
	}
	closedIdle := func() uint64 { return f.srv.Stats().Closed["idle_timeout"] }

	f.step(1500 * time.Millisecond) // every idle timer fired and ran (step's contract)
	waitFor(t, 10*time.Second, "the consumer with no call closed as idle", func() bool { return closedIdle() >= 1 })
	_, _ = req.c.Write(dubbo.AppendValueResponse(nil, req.h.ID, dubbo.SerialHessian2, "slow answer"))
	if r := <-res; r.err != nil || r.resp.Value != "slow answer" {
		t.Fatalf("the call in flight across the idle timeout: %+v, %v; want its answer", r.resp, r.err)
	}
	// The call settles after its answer is written, so the consumer can have it first; a step before the
	// settle finds the call in flight and re-arms the timer a whole timeout on (failed once in a make test
	// run beside a CPU hog).
	waitFor(t, 10*time.Second, "the answered call settled", func() bool {
		var n int32
		f.srv.sessions.each(func(s *session) { n += s.inflight.Load() })
		return n == 0
	})
	f.step(1500 * time.Millisecond)
	waitFor(t, 10*time.Second, "the consumer closed as idle once answered", func() bool { return closedIdle() == 2 })
}
