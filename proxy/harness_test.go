package proxy

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	"github.com/stormgate/stormgate/internal/testkit"
	"github.com/stormgate/stormgate/keepalive"
	"github.com/stormgate/stormgate/peer"
	"github.com/stormgate/stormgate/proxy/dubbo"
)

// rawListener hands the connections it accepts to a Server as non-blocking raw fds, the way the
// admission package does, without pacing (testkit.ServeLoopback), so proxy tests do not depend on
// admission. The test's cleanup stops it.
type rawListener struct {
	addr string
}

func listenRaw(t testing.TB, srv *Server) *rawListener {
	t.Helper()
	return &rawListener{addr: testkit.ServeLoopback(t, srv.ServeFD)}
}

type fixture struct {
	t        testing.TB
	provider *peer.Provider
	srv      *Server
	reg      *prometheus.Registry
	ln       *rawListener
	clk      *keepalive.ManualClock // set when the fixture runs on a manual clock
}

// advance moves the fixture's manual clock by d in steps of step, and after each
// waits until the wheel has fired what became due and, with answered, until every
// heartbeat Stormgate sent has been answered (a provider that answers at once must
// not look silent because the test moved time faster than loopback).
func (f *fixture) advance(d, step time.Duration, answered bool) {
	f.t.Helper()
	for end := f.clk.Now().Add(d); f.clk.Now().Before(end); {
		// The wheel publishes CoarseNow before it runs the callbacks due: waiting for it
		// let a heartbeat leave after this returned. Advance returns once they have run
		// (and once a concurrent tick of the driver has finished).
		f.clk.Add(step)
		f.srv.wheel.Advance(f.clk.Now())
		if answered {
			waitFor(f.t, 10*time.Second, "heartbeats answered", func() bool {
				for _, p := range f.srv.poolList() {
					for uc := range p.dubbo.conns() {
						if uc.npending.Load() != 0 {
							return false
						}
					}
				}
				return true
			})
		}
	}
}

// shippedConfig is proxytest.Config, passed in by TestMain (SetTestConfig): this package's tests cannot
// import proxytest, which imports proxy.
var shippedConfig func(upstream string) Config

// testConfig is the shipped defaults (settings.Defaults) as a proxy Config, with the
// provider at upstream. Tests change what they exercise.
func testConfig(upstream string) Config { return shippedConfig(upstream) }

// newFixture starts a provider, a Server in front of it (testConfig changed by
// each mod) and a listener.
func newFixture(t testing.TB, pcfg peer.ProviderConfig, mods ...func(*Config)) *fixture {
	t.Helper()
	return newFixtureWith(t, pcfg, Options{}, mods...)
}

// newFixtureWith is newFixture with the Server's Options (a clock); its logger and
// registry are the fixture's.
func newFixtureWith(t testing.TB, pcfg peer.ProviderConfig, opts Options, mods ...func(*Config)) *fixture {
	t.Helper()
	log := zaptest.NewLogger(t)
	if pcfg.Addr == "" {
		pcfg.Addr = "127.0.0.1:0"
	}
	prov, err := peer.NewProvider(pcfg, log.Named("provider"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go prov.Serve(ctx)
	cfg := testConfig(prov.Addr())
	for _, mod := range mods {
		mod(&cfg)
	}
	reg := prometheus.NewRegistry()
	opts.Codec, opts.Logger, opts.Registerer = dubbo.Codec{}, log.Named("proxy"), reg
	srv, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, provider: prov, srv: srv, reg: reg}
	if clk, ok := opts.Clock.(*keepalive.ManualClock); ok {
		f.clk = clk
	}
	f.ln = listenRaw(t, srv)
	t.Cleanup(func() {
		srv.Close()
		prov.Close()
		cancel()
	})
	waitFor(t, 30*time.Second, "upstream connections", func() bool { return f.readyConns() == srv.Config().UpstreamConns })
	return f
}

// readyConns counts the connections that take requests, from their states (not the
// stormgate_upstream_connections gauge, which TestUpstreamGaugesAfterConcurrentChanges
// checks against this).
func (f *fixture) readyConns() int {
	n := 0
	for _, p := range f.srv.poolList() {
		r, _, _ := p.connStates()
		n += r
	}
	return n
}

func (f *fixture) dial(ctx context.Context) *peer.Client {
	f.t.Helper()
	c, err := peer.Dial(ctx, f.ln.addr, 0)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { c.Close() })
	return c
}

// waitSettled waits until no call is in flight after what: a call leaves the count just after its answer
// is written (pending.go), so a consumer can read the answer a moment before.
func waitSettled(t testing.TB, srv *Server, what string) {
	t.Helper()
	waitFor(t, 10*time.Second, "no call in flight after "+what, func() bool { return srv.InFlight() == 0 })
}

// waitFor is testkit.WaitFor: it polls cond every 5 ms until it holds, failing t after d.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testkit.WaitFor(t, d, what, cond)
}
