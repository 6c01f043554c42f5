package proxy_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/stormgate/stormgate/loadgen"
	"github.com/stormgate/stormgate/peer"
	"github.com/stormgate/stormgate/proxy"
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
// start once the well-behaved consumers are connected.
func runIsolation(t *testing.T, target string, ld isolationLoad, read bool) isolationRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), ld.duration+time.Minute)
	defer cancel()
	greedyDone := make(chan *loadgen.GreedyResult, 1)
	start := func(context.Context, int) error {
		go func() {
			res, err := loadgen.Greedy(ctx, loadgen.GreedyConfig{Target: target, Conns: ld.greedy, Size: ld.size, Read: read,
				Duration: ld.duration, KeyBase: 1 << 60})
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
		BodyMax: 1 << 10, Duration: ld.duration - 400*time.Millisecond, Timeout: 10 * time.Second, WaitStart: start}, nil)
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
func TestGreedyNeighboursCostOnlyThemselves(t *testing.T) {
	ld := defaultIsolationLoad
	for _, c := range []struct {
		name string
		read bool
	}{{"never reading", false}, {"bulk senders", true}} {
		t.Run(c.name, func(t *testing.T) {
			direct := runIsolation(t, newEcho(t).Addr(), ld, c.read)
			t.Logf("direct:  %v", direct)

			prov := newEcho(t)
			cfg := settings.ProxyConfig(settings.Defaults())
			cfg.Upstream = prov.Addr()
			srv, err := proxy.New(cfg, proxy.Options{Logger: zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)).Named("proxy"),
				Registerer: prometheus.NewRegistry()})
			if err != nil {
				t.Fatal(err)
			}
			if err := srv.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			addr := proxy.ServeLoopback(t, srv)
			proxy.WaitFor(t, 10*time.Second, "upstream connections", func() bool { return srv.Stats().UpstreamConns == int64(cfg.UpstreamConns) })
			via := runIsolation(t, addr, ld, c.read)
			t.Logf("through: %v", via)
			t.Logf("stormgate: %+v", srv.Stats())

			if n := via.polite.Errors + via.polite.BodyMismatches + via.polite.Timeouts + via.polite.Lost; n != 0 {
				t.Errorf("%d well-behaved requests failed through Stormgate", n)
			}
			if limit := direct.polite.Latency.P99*3/2 + 5*time.Millisecond; via.polite.Latency.P99 > limit {
				t.Errorf("well-behaved p99 through Stormgate %v, over 1.5 x direct (%v) + 5 ms = %v",
					via.polite.Latency.P99, direct.polite.Latency.P99, limit)
			}
			if c.read && via.greedy.Answered == 0 {
				t.Errorf("the bulk senders got no answer: %v", via.greedy)
			}
		})
	}
}
