package triple

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stormgate/stormgate/internal/testkit"
	"github.com/stormgate/stormgate/keepalive"
	"github.com/stormgate/stormgate/proxy"
)

// tripleLiveDurations is proxy's live rule (proxy/rearm.go; its table, liveDurations in its rearm_test.go) for the
// waits HTTP/2 adds: for each duration of Config that bounds one, a probe that starts the wait with an
// hour, lowers the duration with Update and checks that the wait ends by the new value on the manual
// clock. proxy's table probes Dubbo's waits on the same settings, and requires an entry for every live
// duration of the schema (TestEveryLiveDurationIsRearmed).
var tripleLiveDurations = map[string]func(t *testing.T){
	"UpstreamInterval": probeH2UpstreamInterval,
	"WriteTimeout":     probeH2WriteTimeout,
	"HoldTimeout":      func(t *testing.T) { probeH2Hold(t, 0, func(c *proxy.Config) { c.HoldTimeout = 2 * time.Second }) },
	"HoldMaxTimeout": func(t *testing.T) {
		probeH2Hold(t, time.Hour, func(c *proxy.Config) { c.HoldMaxTimeout = 2 * time.Second })
	},
	"DeadlineMargin": func(t *testing.T) {
		probeH2Hold(t, time.Hour, func(c *proxy.Config) { c.DeadlineMargin = time.Hour - 2*time.Second })
	},
}

// TestLiveDurationsRearmTriple runs tripleLiveDurations.
func TestLiveDurationsRearmTriple(t *testing.T) {
	for field, probe := range tripleLiveDurations {
		t.Run(field, probe)
	}
}

// probeH2Hold is probeHold for an HTTP/2 call carrying grpc-timeout of timeout (0: none), waiting
// for a provider stream while the provider is away.
func probeH2Hold(t *testing.T, timeout time.Duration, lower func(*proxy.Config)) {
	clk := keepalive.NewManualClock(time.Unix(1_000_000, 0))
	srv, addr := startH2Server(t, testkit.AwayAddr(t), proxy.ProtoTriple, proxy.Options{Clock: clk}, func(c *proxy.Config) {
		c.HoldTimeout, c.HoldMaxTimeout, c.MaxRequestAge = time.Hour, time.Hour, 2*time.Hour
		c.BackoffBase, c.BackoffMax = time.Hour, time.Hour
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var hdr []string
	if timeout > 0 {
		hdr = []string{"grpc-timeout", fmt.Sprintf("%dm", timeout.Milliseconds())}
	}
	res := make(chan h2Outcome, 1)
	go func() { res <- unaryH2(ctx, h2cTransport(addr), []byte("held"), hdr...) }()
	waitFor(t, 10*time.Second, "the call held", func() bool { return metric(t, srv, "stormgate_held_requests") == 1 })
	updateLive(t, srv, lower)
	testkit.StepClockUntil(t, clk, envOf(srv).Wheel(), 3*time.Second, 100*time.Millisecond, "the held call answered", func() bool { return metric(t, srv, "stormgate_held_requests") == 0 })
	if o := <-res; o.ok || o.cancelled {
		t.Fatalf("held call: %+v; want Stormgate's error answer", o)
	}
}
