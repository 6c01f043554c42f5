package proxy_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/stormgate/stormgate/internal/racebuild"
	"github.com/stormgate/stormgate/internal/testkit"
	"github.com/stormgate/stormgate/loadgen"
	"github.com/stormgate/stormgate/peer"
	"github.com/stormgate/stormgate/proxy"
	"github.com/stormgate/stormgate/proxy/dubbo"
	"github.com/stormgate/stormgate/proxy/proxytest"
	"github.com/stormgate/stormgate/settings"
)

// isolationLoad is issue 23's test, scaled to make test: well-behaved consumers send
// 1 KiB requests at a steady rate to an echo provider while greedy neighbours push
// 256 KiB requests as fast as TCP lets them, never reading their answers or reading
// them (bulk senders). The same load straight to a provider is the yardstick.
type isolationLoad struct {
	conns    int
	rate     float64
	greedy   int
	size     int
	duration time.Duration
}

var defaultIsolationLoad = isolationLoad{conns: 100, rate: 500, greedy: 10, size: 256 << 10, duration: 4 * time.Second}

// isolationRun is what one run measured.
type isolationRun struct {
	polite *loadgen.Result
	greedy *loadgen.GreedyResult
}

func (r isolationRun) String() string {
	l := r.polite.Latency
	return fmt.Sprintf("well-behaved: %d sent, %d ok, p50 %v p99 %v max %v, errors %d timeouts %d; greedy: %v",
		r.polite.Sent, r.polite.OK, l.P50, l.P99, l.Max, r.polite.Errors+r.polite.BodyMismatches, r.polite.Timeouts, r.greedy)
}

// runIsolation runs the well-behaved load against target with greedy neighbours that
// start once the well-behaved consumers are connected. Run numbers the runs made
// against one provider: each gets body keys of its own, so that the provider's
// integrity check (every key delivered once) holds across runs.
func runIsolation(t *testing.T, target string, ld isolationLoad, read bool, run int) isolationRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), ld.duration+time.Minute)
	defer cancel()
	greedyDone := make(chan *loadgen.GreedyResult, 1)
	start := func(context.Context, int) error {
		go func() {
			res, err := loadgen.Greedy(ctx, loadgen.GreedyConfig{Target: target, Conns: ld.greedy, Size: ld.size, Read: read,
				Duration: ld.duration, KeyBase: 1<<60 + uint64(run)<<48})
			if err != nil {
				t.Errorf("greedy neighbours: %v", err)
				res = &loadgen.GreedyResult{}
			}
			greedyDone <- res
		}()
		time.Sleep(200 * time.Millisecond) // the neighbours are at full speed when the measured load starts
		return nil
	}
	res, err := loadgen.Run(ctx, loadgen.Config{Target: target, Conns: ld.conns, Rate: ld.rate, BodyMin: 1 << 10,
		BodyMax: 1 << 10, Duration: ld.duration - 400*time.Millisecond, Timeout: 10 * time.Second, WaitStart: start,
		KeyBase: uint64(run) << 48}, nil)
	if err != nil {
		t.Fatalf("well-behaved load: %v", err)
	}
	return isolationRun{polite: res, greedy: <-greedyDone}
}

func newEcho(t *testing.T) *peer.EchoProvider {
	t.Helper()
	p, err := peer.StartEcho(peer.EchoConfig{}, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)).Named("provider"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestGreedyNeighboursCostOnlyThemselves is issue 23's acceptance 1: with greedy
// neighbours of both kinds, the well-behaved consumers' p99 through Stormgate is at
// most 1.5 times their p99 straight to the provider plus 5 ms, measured in the same
// test, with no error; the greedy consumers that read get their answers, and the ones
// that never read are closed (limits.max_queued_bytes_per_connection) or keep sending.
//
// Its bounds are latency, so it skips under -race (make timing runs it without): the
// consumers, the provider and Stormgate share this race-instrumented process, and the
// detector's cost grows with the bytes each path copies. 256 KiB requests through
// Stormgate are copied more often than straight to the provider, so under -race beside
// a busy loop the bulk senders got 13 answers through Stormgate against 336 direct
// (2,472 against 7,730 without -race): a figure of the detector, not of fair sharing.
func TestGreedyNeighboursCostOnlyThemselves(t *testing.T) {
	if racebuild.Enabled {
		t.Skip("skipping under -race: its bounds are latency; make timing runs it without -race")
	}
	ld := defaultIsolationLoad
	for _, c := range []struct {
		name string
		read bool
	}{{"never reading", false}, {"bulk senders", true}} {
		t.Run(c.name, func(t *testing.T) {
			prov := newEcho(t)
			cfg := settings.ProxyConfig(settings.Defaults())
			cfg.Upstream = prov.Addr()
			srv, addr := startIsolationProxy(t, cfg, prometheus.NewRegistry())
			directProv := newEcho(t)
			// The p99 bound compares two runs made one after the other; on a shared 2-core
			// machine a burst of other work can land in one of them. A pair that misses the
			// bound is measured again, up to isolationPairs pairs: the coupling this test is
			// about (6-25 times direct before fair sharing) misses it in every pair.
			for pair := 1; ; pair++ {
				direct := runIsolation(t, directProv.Addr(), ld, c.read, pair)
				t.Logf("pair %d direct:  %v", pair, direct)
				via := runIsolation(t, addr, ld, c.read, pair)
				t.Logf("pair %d through: %v", pair, via)
				t.Logf("stormgate: %+v", srv.Stats())
				if v := prov.Stats().Violations; v != 0 {
					t.Fatalf("the provider behind Stormgate saw %d integrity violations (DESIGN §8a)", v)
				}

				if n := via.polite.Errors + via.polite.BodyMismatches + via.polite.Timeouts + via.polite.Lost; n != 0 {
					t.Errorf("%d well-behaved requests failed through Stormgate", n)
				}
				limit := direct.polite.Latency.P99*3/2 + 5*time.Millisecond
				var miss string
				switch {
				case via.polite.Latency.P99 > limit:
					miss = fmt.Sprintf("well-behaved p99 through Stormgate %v, over 1.5 x direct (%v) + 5 ms = %v",
						via.polite.Latency.P99, direct.polite.Latency.P99, limit)
				case c.read && via.greedy.Answered == 0:
					// Slowed, never starved: on a loaded machine a 256 KiB bulk sender can get
					// no answer within one run (reads are CPU-bound), not in every pair.
					miss = fmt.Sprintf("the bulk senders got no answer: %v", via.greedy)
				}
				if miss == "" {
					break
				}
				if pair == isolationPairs || t.Failed() {
					t.Fatalf("%s (pair %d of %d)", miss, pair, isolationPairs)
				}
				t.Logf("pair %d: %s; measuring another pair", pair, miss)
			}
		})
	}
}

// isolationPairs is how many direct/through pairs TestGreedyNeighboursCostOnlyThemselves
// measures at most.
const isolationPairs = 3

// TestBulkSendersAreSlowedNotRefused: many consumers that each send large requests as
// fast as they can, and read their answers, to a provider that serves. Their bounds
// together (limits.max_queued_bytes_per_consumer each) are more than the hold queue
// keeps (hold.max_bytes), so before each consumer's share of the queue shrank with the
// number of consumers waiting, the queue filled and their requests were refused
// (hold_full) or expired in it (hold_timeout). TCP should slow them instead: every
// answer they get is their own body.
func TestBulkSendersAreSlowedNotRefused(t *testing.T) {
	prov := newEcho(t)
	cfg := settings.ProxyConfig(settings.Defaults())
	cfg.Upstream = prov.Addr()
	cfg.HoldMaxBytes = 8 << 20              // 8 bulk senders × 4 MiB each would be 32 MiB
	cfg.MaxQueuedBytesPerConsumer = 4 << 20 // the default
	reg := prometheus.NewRegistry()
	srv, addr := startIsolationProxy(t, cfg, reg)

	res, err := loadgen.Greedy(t.Context(), loadgen.GreedyConfig{Target: addr, Conns: 8, Size: 256 << 10, Read: true,
		Duration: 3 * time.Second, KeyBase: 1 << 60})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("bulk senders: %v; stormgate: %+v", res, srv.Stats())
	if res.Answered == 0 || res.Errors != 0 || res.Closed != 0 {
		t.Errorf("bulk senders: %v; want answers, no error answer and no connection closed", res)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "stormgate_local_replies_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if v := m.GetCounter().GetValue(); v != 0 {
				t.Errorf("stormgate answered %v requests itself (%v)", v, m.GetLabel())
			}
		}
	}
}

// startIsolationProxy starts a proxy with cfg in front of its provider, closed when the test
// ends, and returns it with its loopback address once every upstream connection is up.
func startIsolationProxy(t *testing.T, cfg proxy.Config, reg prometheus.Registerer) (*proxy.Server, string) {
	t.Helper()
	srv, err := proxy.New(cfg, proxy.Options{Codec: dubbo.Codec{}, Logger: zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)).Named("proxy"),
		Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	addr := proxytest.ServeLoopback(t, srv)
	testkit.WaitFor(t, 10*time.Second, "upstream connections", func() bool { return srv.Stats().UpstreamConns == int64(cfg.UpstreamConns) })
	return srv, addr
}
