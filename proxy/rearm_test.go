package proxy

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stormgate/stormgate/internal/testkit"
	"github.com/stormgate/stormgate/keepalive"
	"github.com/stormgate/stormgate/peer"
	"github.com/stormgate/stormgate/proxy/dubbo"
)

// liveDurations is the live rule (rearm.go) as a table: for every duration of Config,
// keyed by its field path, either a probe that starts the wait the duration bounds
// with an hour, lowers the duration with Update and checks that the wait ends by the
// new value on the manual clock, or why no wait is running on it.
// TestEveryLiveDurationIsRearmed (package proxy_test) walks the settings schema and
// requires an entry here for each live duration setting that reaches the proxy.
var liveDurations = map[string]struct {
	probe  func(t *testing.T)
	noWait string
}{
	"DownstreamIdleTimeout": {probe: probeIdleTimeout},
	"FrameReadTimeout":      {probe: probeFrameReadTimeout},
	"UpstreamInterval":      {probe: probeUpstreamInterval},
	"WriteTimeout":          {probe: probeWriteTimeout},
	"BackoffBase":           {probe: func(t *testing.T) { probeBackoff(t, func(c *Config) { c.BackoffBase = 50 * time.Millisecond }) }},
	"BackoffMax": {probe: func(t *testing.T) {
		lower := func(c *Config) { c.BackoffBase, c.BackoffMax = 50*time.Millisecond, 50*time.Millisecond }
		t.Run("reconnect", func(t *testing.T) { probeBackoff(t, lower) })
		t.Run("not-executed pause", func(t *testing.T) { probePause(t, lower) })
	}},
	"HoldTimeout":    {probe: func(t *testing.T) { probeHolds(t, 0, func(c *Config) { c.HoldTimeout = 2 * time.Second }) }},
	"HoldMaxTimeout": {probe: func(t *testing.T) { probeHolds(t, time.Hour, func(c *Config) { c.HoldMaxTimeout = 2 * time.Second }) }},
	"DeadlineMargin": {probe: func(t *testing.T) {
		probeHolds(t, time.Hour, func(c *Config) { c.DeadlineMargin = time.Hour - 2*time.Second })
	}},
	"MaxRequestAge":       {probe: probeMaxRequestAge},
	"UpstreamHungTimeout": {probe: probeHungTimeout},
	"DrainTimeout":        {probe: probeDrainTimeout},
	"Warmup":              {probe: probeWarmup},
	"ConnectTimeout": {noWait: "bounds one connect(2): an attempt in progress lasts at most the old value, " +
		"the next one reads the new"},
	"NotExecutedWindow":       {noWait: "read when a provider's answer arrives, against the time the window opened"},
	"AccessLog.SlowThreshold": {noWait: "read when a call is answered"},
}

// liveFixture is a fixture on a manual clock with the settings of mods; update
// applies a further change live.
func liveFixture(t *testing.T, pcfg peer.ProviderConfig, mods ...func(*Config)) *fixture {
	t.Helper()
	return newFixtureWith(t, pcfg, Options{Clock: keepalive.NewManualClock(time.Unix(1_000_000, 0))}, mods...)
}

func (f *fixture) update(mod func(*Config)) {
	f.t.Helper()
	cfg := f.srv.Config()
	mod(&cfg)
	if err := f.srv.Update(cfg); err != nil {
		f.t.Fatal(err)
	}
}

// stepUntil moves the clock in steps of step, up to limit, until cond holds; each
// step waits a little for what runs on other goroutines to catch up with it.
func (f *fixture) stepUntil(limit, step time.Duration, what string, cond func() bool) {
	f.t.Helper()
	testkit.StepClockUntil(f.t, f.clk, f.srv.wheel, limit, step, what, cond)
}

func probeIdleTimeout(t *testing.T) {
	f := liveFixture(t, peer.ProviderConfig{}, func(c *Config) { c.DownstreamIdleTimeout = time.Hour })
	nc, err := net.Dial("tcp", f.ln.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	waitFor(t, 10*time.Second, "the consumer's session", func() bool { return f.srv.sessions.len() == 1 })
	f.update(func(c *Config) { c.DownstreamIdleTimeout = 2 * time.Second })
	f.stepUntil(3*time.Second, 100*time.Millisecond, "the idle consumer closed", func() bool { return f.srv.sessions.len() == 0 })
}

func probeFrameReadTimeout(t *testing.T) {
	f := liveFixture(t, peer.ProviderConfig{}, func(c *Config) { c.FrameReadTimeout, c.DownstreamIdleTimeout = time.Hour, 0 })
	nc, err := net.Dial("tcp", f.ln.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.Write([]byte{0xda, 0xbb, 0xc2, 0x00}); err != nil { // a header left unfinished
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the partial frame read", func() bool {
		partial := false
		f.srv.sessions.each(func(s *session) { partial = s.dubbo.rd.partialSince() != 0 })
		return partial
	})
	f.update(func(c *Config) { c.FrameReadTimeout = 2 * time.Second })
	f.stepUntil(3*time.Second, 100*time.Millisecond, "the consumer closed", func() bool { return f.srv.sessions.len() == 0 })
}

func probeUpstreamInterval(t *testing.T) {
	f := liveFixture(t, peer.ProviderConfig{}, func(c *Config) { c.UpstreamInterval, c.UpstreamConns = time.Hour, 1 })
	f.update(func(c *Config) { c.UpstreamInterval = 2 * time.Second })
	f.stepUntil(3*time.Second, 100*time.Millisecond, "a heartbeat at the provider", func() bool {
		return f.provider.Stats().HeartbeatsReceived > 0
	})
}

func probeWriteTimeout(t *testing.T) {
	up := neverReadingProvider(t)
	f := liveFixture(t, peer.ProviderConfig{}, func(c *Config) {
		c.Upstream, c.UpstreamConns = up, 1
		c.WriteTimeout, c.UpstreamInterval, c.UpstreamHungTimeout, c.MaxRequestAge = time.Hour, time.Hour, 0, time.Hour
		c.MaxQueuedBytesPerConsumer = 0
	})
	uc := f.srv.poolList()[0].dubbo.slotList()[0].uc.Load()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cl := f.dial(ctx)
	body := strings.Repeat("w", 256<<10)
	for i := int64(1); uc.w.StalledFor(f.srv.now()) == 0; i++ {
		if i > 200 {
			t.Fatal("the writer never stalled on a provider that does not read")
		}
		_ = callAsync(ctx, cl, i, body)
		waitFor(t, 10*time.Second, "the request queued", func() bool { return uc.w.StreamOffset() >= uint64(i)*(256<<10) })
	}
	f.update(func(c *Config) { c.WriteTimeout = 2 * time.Second })
	f.stepUntil(3*time.Second, 100*time.Millisecond, "the stalled connection failed", func() bool {
		return uc.state.Load() == stateClosed
	})
}

// probeBackoff stops the provider so that every slot waits out a backoff of up to an
// hour, starts it again, applies lower and expects the connections back at once.
func probeBackoff(t *testing.T, lower func(*Config)) {
	f, _, _ := downFixture(t, func(c *Config) { c.BackoffBase, c.BackoffMax = time.Hour, time.Hour })
	newScriptedProviderOn(t, f.srv.Config().Upstream, func(c net.Conn, h dubbo.Header, frame []byte) {})
	f.update(lower)
	f.stepUntil(time.Second, 50*time.Millisecond, "the connections back", func() bool { return f.readyConns() > 0 })
}

// probePause: the pause after a not-executed answer (backoff_base doubling up to
// backoff_max) ends by the new backoff_max.
func probePause(t *testing.T, lower func(*Config)) {
	f := liveFixture(t, peer.ProviderConfig{}, func(c *Config) { c.BackoffBase, c.BackoffMax = time.Hour, time.Hour })
	p := f.srv.poolList()[0]
	p.pause.pause(f.srv.now(), p.pause.nextPause(f.srv.cfg.Load()))
	f.update(lower)
	f.stepUntil(time.Second, 50*time.Millisecond, "the pause over", func() bool { _, paused := p.paused(); return !paused })
}

// probeHolds probes a held Dubbo request (package proxy/triple probes a held HTTP/2 call:
// TestLiveDurationsRearmTriple).
func probeHolds(t *testing.T, timeout time.Duration, lower func(*Config)) {
	probeHold(t, timeout, lower)
}

// probeHold holds a request carrying a consumer timeout of timeout (0: none) while
// the provider is away, with every hold bound at an hour, and lowers one of them.
func probeHold(t *testing.T, timeout time.Duration, lower func(*Config)) {
	f, _, _ := downFixture(t, func(c *Config) {
		c.HoldTimeout, c.HoldMaxTimeout, c.MaxRequestAge = time.Hour, time.Hour, 2*time.Hour
		c.BackoffBase, c.BackoffMax = time.Hour, time.Hour
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res := callTimeoutAsync(ctx, f.dial(ctx), 1, "held", timeout)
	waitFor(t, 10*time.Second, "the request held", func() bool { return heldNow(f) == 1 })
	f.update(lower)
	f.stepUntil(3*time.Second, 100*time.Millisecond, "the held request answered", func() bool { return heldNow(f) == 0 })
	if r := <-res; r.err != nil || r.resp.Status == dubbo.StatusOK {
		t.Fatalf("held request: %+v %v; want Stormgate's error answer", r.resp, r.err)
	}
}

// neverAnsweringFixture is a fixture in front of a provider that reads requests and
// never answers them.
func neverAnsweringFixture(t *testing.T, mods ...func(*Config)) *fixture {
	prov := newScriptedProvider(t, func(net.Conn, dubbo.Header, []byte) {})
	mods = append([]func(*Config){func(c *Config) { c.Upstream, c.UpstreamConns = prov.addr(), 1 }}, mods...)
	return liveFixture(t, peer.ProviderConfig{}, mods...)
}

func probeMaxRequestAge(t *testing.T) {
	f := neverAnsweringFixture(t, func(c *Config) {
		c.MaxRequestAge, c.HoldMaxTimeout, c.UpstreamHungTimeout, c.UpstreamInterval = time.Hour, time.Second, 0, time.Hour
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res := callAsync(ctx, f.dial(ctx), 1, "never answered")
	waitFor(t, 10*time.Second, "the request sent", func() bool { return f.srv.upstreamPending() == 1 })
	f.update(func(c *Config) { c.MaxRequestAge = 2 * time.Second })
	f.stepUntil(4*time.Second, 100*time.Millisecond, "the request answered", func() bool { return f.srv.upstreamPending() == 0 })
	if r := <-res; r.err != nil || r.resp.Status != dubbo.StatusServerTimeout {
		t.Fatalf("%+v %v; want SERVER_TIMEOUT", r.resp, r.err)
	}
}

func probeHungTimeout(t *testing.T) {
	prov := newFreezableProvider(t)
	f := liveFixture(t, peer.ProviderConfig{}, func(c *Config) {
		c.Upstream, c.UpstreamConns, c.UpstreamHungTimeout = prov.ln.Addr().String(), 1, time.Hour
	})
	prov.freeze()
	defer prov.thaw()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = callTimeoutAsync(ctx, f.dial(ctx), 1, "stuck", time.Hour)
	waitFor(t, 10*time.Second, "the request sent", func() bool { return f.srv.upstreamPending() == 1 })
	f.update(func(c *Config) { c.UpstreamHungTimeout = 2 * time.Second })
	f.stepUntil(4*time.Second, 100*time.Millisecond, "the provider seen hung", func() bool { return f.srv.Hung() != "" })
}

// probeDrainTimeout: drain.timeout bounds a provider's drain and Stormgate's own.
func probeDrainTimeout(t *testing.T) {
	t.Run("provider", func(t *testing.T) {
		// A provider that says READONLY instead of answering: the request stays in flight,
		// so nothing but drain.timeout ends the drain.
		prov := newScriptedProvider(t, func(c net.Conn, h dubbo.Header, frame []byte) {
			_, _ = c.Write(dubbo.AppendReadonlyEvent(nil, 1))
		})
		f := liveFixture(t, peer.ProviderConfig{}, func(c *Config) {
			c.Upstream, c.UpstreamConns, c.DrainTimeout = prov.addr(), 1, time.Hour
			c.MaxRequestAge, c.UpstreamHungTimeout = 2*time.Hour, 0
		})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = callAsync(ctx, f.dial(ctx), 1, "in flight")
		p := f.srv.poolList()[0]
		waitFor(t, 10*time.Second, "the provider's drain", p.providerDraining)
		f.update(func(c *Config) { c.DrainTimeout = 2 * time.Second })
		f.stepUntil(3*time.Second, 100*time.Millisecond, "the drain over", func() bool { return !p.providerDraining() })
	})
	t.Run("stormgate", func(t *testing.T) {
		f := neverAnsweringFixture(t, func(c *Config) { c.DrainTimeout, c.MaxRequestAge = time.Hour, 2*time.Hour })
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = callAsync(ctx, f.dial(ctx), 1, "in flight")
		waitFor(t, 10*time.Second, "the request sent", func() bool { return f.srv.upstreamPending() == 1 })
		done := make(chan error, 1)
		go func() { done <- f.srv.Drain(ctx) }()
		waitFor(t, 10*time.Second, "the drain started", f.srv.Draining)
		f.update(func(c *Config) { c.DrainTimeout = 2 * time.Second })
		drained := false
		f.stepUntil(3*time.Second, 100*time.Millisecond, "Drain returned", func() bool {
			select {
			case <-done:
				drained = true
			default:
			}
			return drained
		})
	})
}

// probeWarmup: a ramp started with an hour ends when upstream.warmup is lowered.
func probeWarmup(t *testing.T) {
	f := liveFixture(t, peer.ProviderConfig{}, func(c *Config) { c.Warmup = time.Hour })
	p := f.srv.poolList()[0]
	p.startWarmup()
	if !p.warming() {
		t.Fatal("no ramp started")
	}
	f.update(func(c *Config) { c.Warmup = 2 * time.Second })
	f.stepUntil(3*time.Second, 100*time.Millisecond, "the ramp over", func() bool { p.warmAllow(); return !p.warming() })
}
