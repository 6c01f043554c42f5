package proxy

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stormgate/stormgate/internal/testkit"
	"github.com/stormgate/stormgate/keepalive"
	"github.com/stormgate/stormgate/proxy/dubbo"
)

// TestWarmupRampsLinearly: right after the provider returns only a small share
// of the earlier rate is let through; by the end of the ramp nearly all of it.
// Time is a ManualClock stepped 1 ms per attempt, so the counts are exact.
func TestWarmupRampsLinearly(t *testing.T) {
	clk := keepalive.NewManualClock(time.Unix(1000, 0))
	cfg := testConfig("127.0.0.1:1")
	cfg.Warmup = time.Second
	srv, err := New(cfg, Options{Codec: dubbo.Codec{}, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	p := &pool{srv: srv}
	p.meter.ewma.Store(float64bits(2000))
	p.startWarmup()
	count := func(d time.Duration) int {
		n := 0
		for end := clk.Now().Add(d); clk.Now().Before(end); clk.Add(100 * time.Microsecond) {
			if p.warmAllow() {
				n++
			}
		}
		return n
	}
	first := count(150 * time.Millisecond) // 0-150 ms: 5-15% of 2000/s, plus the burst
	clk.Add(450 * time.Millisecond)
	late := count(150 * time.Millisecond) // 600-750 ms: 60-75%
	t.Logf("allowed %d in the first 150 ms, %d at 600-750 ms", first, late)
	// Expected: 2000/s x 150 ms x the mean share of the window (10%, 67.5%) = 30 and
	// 202, plus each window's burst (a tenth of a second's allowance).
	if first < 25 || first > 70 || late < 190 || late > 260 {
		t.Fatalf("allowed %d in the first 150 ms vs %d at 600-750 ms; want a linear ramp (about 30-60 and 200-230)", first, late)
	}
	clk.Add(300 * time.Millisecond)
	if !p.warmAllow() || p.warming() {
		t.Fatal("warm-up did not end after its duration")
	}
}

// TestH2WarmupPacesCalls: during a warm-up ramp an HTTP/2 call takes a provider stream only as the ramp
// allows; the rest wait in the hold queue and leave as it lets them, each with its own answer. Before,
// upstream.warmup did nothing for Triple: all ten went to the provider at once. The clock is a
// ManualClock, so the ramp's allowance is exact: its burst (one call) at once, then about 5 % of the
// target rate (100 calls/s) growing to all of it over the second.
func TestH2WarmupPacesCalls(t *testing.T) {
	prov := startGRPCEcho(t, "127.0.0.1:0")
	clk := keepalive.NewManualClock(time.Unix(1_700_000_000, 0))
	srv, addr := newH2ServerWith(t, prov.addr, ProtoTriple, Options{Clock: clk}, func(c *Config) {
		c.Warmup = time.Second
		c.HoldTimeout = time.Minute // the clock moves 1 s at most: no call expires
	})
	p := srv.poolList()[0]
	p.meter.ewma.Store(float64bits(100))
	p.startWarmup()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cc := testkit.GRPCClient(t, addr)
	const calls = 10
	var done atomic.Int32
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			msg := fmt.Appendf(nil, "warm-%d-%s", i, strings.Repeat("x", i*37))
			resp, err := echo(ctx, cc, msg)
			if err != nil || !bytes.Equal(resp, msg) {
				t.Errorf("call %d: %q, %v; want its own body back", i, resp, err)
			}
			done.Add(1)
		})
	}
	waitFor(t, 20*time.Second, "one call sent (the ramp's burst) and nine waiting", func() bool {
		return p.ups[protoH2].Opened() == 1 && p.hold.CallsWaiting() == calls-1
	})
	for range 20 { // 100 ms on the clock: at 5-10 % of 100 calls/s, about one more call
		clk.Add(5 * time.Millisecond)
	}
	if n := p.ups[protoH2].Opened(); n > 3 {
		t.Errorf("%d calls sent within 100 ms of the ramp's start; want at most 3 (the burst and about 5-10 %% of 100 calls/s)", n)
	}
	testkit.StepClockUntil(t, clk, srv.wheel, 2*time.Second, 5*time.Millisecond, "every call answered", func() bool { return done.Load() == calls })
	wg.Wait()
	if got := testutil.ToFloat64(srv.m.holdOutcome[HoldSent]); got < calls-2 {
		t.Errorf("hold outcome sent %v; want at least %d (the calls the ramp held back)", got, calls-2)
	}
	if got := p.sentTotal(); got != calls {
		t.Errorf("sentTotal %d, want %d: the ramp's rate meter counts HTTP/2 calls", got, calls)
	}
}

// TestWarmupAfterTripleOutage: the ramp starts when a provider's first usable connection comes after it
// had none, whatever the protocol: here a Triple-only provider restarted. Before, only a Dubbo
// connection started it.
func TestWarmupAfterTripleOutage(t *testing.T) {
	prov := startGRPCEcho(t, "127.0.0.1:0")
	addr := prov.addr
	srv, _ := newH2Server(t, addr, ProtoTriple, func(c *Config) { c.Warmup = time.Hour })
	p := srv.poolList()[0]
	if p.warming() {
		t.Fatal("warming up at the first connect; want a ramp only after an outage")
	}
	prov.srv.Stop()
	waitFor(t, 10*time.Second, "no usable provider connection", func() bool { ready, _, _ := p.connStates(); return ready == 0 })
	startGRPCEcho(t, addr)
	waitFor(t, 20*time.Second, "the warm-up ramp started by the new Triple connection", p.warming)
}
