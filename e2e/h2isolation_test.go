package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stormgate/stormgate/internal/racebuild"
	"github.com/stormgate/stormgate/loadgen"
	"github.com/stormgate/stormgate/peer"
)

// TestH2NonReadersFailNoCall is issue 26's acceptance 3 as far as it holds today: 200 h2c consumers make
// 1,000 unary calls a second in total through `sidecar run` (upstream.protocol triple, default settings)
// in front of the Triple echo provider; 20 more open streams for 256 KiB answers and never read
// (loadgen.Greedy, Protocol triple: they read nothing after the server's SETTINGS). No call of the 200
// fails, the provider sees no integrity violation and no consumer PING, and Stormgate's peak RSS stays
// within limits.max_buffered_bytes of where it started. (How many of the 20 Stormgate closed as slow
// consumers before their run ended is logged: on a busy machine it takes longer to queue their bound;
// proxy's TestH2StalledConsumerBound checks the bound itself.)
//
// Their p99 beside the 20 against without them (measured one run after the other) is logged, not
// bounded: the acceptance asks at most 2x + 5 ms, and this machine measures 0.15-0.25 s against 1.5 ms,
// where direct consumers of the same provider see 0.43-0.45 s and HAProxy's 0.27-0.37 s (docs/design.md,
// "A slow HTTP/2 consumer", says what bounds it and the decision it needs). Before the waiting calls were served round robin it was
// 0.6-0.7 s, and before a client Conn ignored frames on the streams it had reset, a provider connection
// died of a PROTOCOL_ERROR and every call on it failed.
//
// It runs in make timing (it skips under -race): the in-process provider builds up to 500 MB of checked
// answers for the 20, which the race detector would make minutes.
func TestH2NonReadersFailNoCall(t *testing.T) {
	if racebuild.Enabled {
		t.Skip("skipping under -race: the provider builds up to 500 MB of checked answers; make timing runs it without -race")
	}
	const (
		conns, rate = 200, 1000
		greedy      = 20
		answer      = 256 << 10
		duration    = 4 * time.Second
		budget      = 256 << 20 // limits.max_buffered_bytes' default
	)
	prov, err := peer.StartTripleEcho(peer.TripleConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = prov.Close() })
	sc := startSidecar(t, prov.Addr(), "upstream: { protocol: triple }\n", 4)
	before := sc.footprint(t)

	run := func(key uint64, noisy bool) (*loadgen.Result, *loadgen.GreedyResult) {
		ctx, cancel := context.WithTimeout(t.Context(), duration+time.Minute)
		defer cancel()
		greedyDone := make(chan *loadgen.GreedyResult, 1)
		start := func(context.Context, int) error {
			if !noisy {
				greedyDone <- &loadgen.GreedyResult{}
				return nil
			}
			go func() {
				res, err := loadgen.Greedy(ctx, loadgen.GreedyConfig{Target: sc.listen, Conns: greedy, Size: answer,
					Duration: duration, KeyBase: 1<<60 + key, Protocol: loadgen.ProtocolTriple})
				if err != nil {
					t.Errorf("greedy consumers: %v", err)
					res = &loadgen.GreedyResult{}
				}
				greedyDone <- res
			}()
			time.Sleep(200 * time.Millisecond) // their streams are open when the measured load starts
			return nil
		}
		res, err := loadgen.Run(ctx, loadgen.Config{Protocol: loadgen.ProtocolTriple, Target: sc.listen, Conns: conns,
			Rate: rate, BodyMin: 1 << 10, BodyMax: 1 << 10, Duration: duration - 400*time.Millisecond,
			Timeout: 10 * time.Second, WaitStart: start, KeyBase: key}, nil)
		if err != nil {
			t.Fatalf("well-behaved load: %v", err)
		}
		return res, <-greedyDone
	}
	describe := func(r *loadgen.Result) string {
		return fmt.Sprintf("%d sent, %d ok, p50 %v p99 %v max %v, errors %v, timeouts %d, lost %d, unsent %d",
			r.Sent, r.OK, r.Latency.P50, r.Latency.P99, r.Latency.Max, r.ErrorByStatus, r.Timeouts, r.Lost, r.Unsent)
	}
	quiet, _ := run(0, false)
	t.Logf("without the %d: %s", greedy, describe(quiet))
	noisy, g := run(1<<48, true)
	t.Logf("with them:    %s; they: %v", describe(noisy), g)
	for _, r := range []*loadgen.Result{quiet, noisy} {
		if bad := r.Errors + r.BodyMismatches + r.Timeouts + r.Lost + r.Unsent; bad != 0 || r.OK != r.Sent || r.Sent == 0 {
			t.Errorf("%d of %d well-behaved calls failed: %s", bad, r.Sent, describe(r))
		}
	}
	if g.Sent == 0 {
		t.Errorf("the non-readers opened no stream: %v", g)
	}
	t.Logf("p99 beside the %d non-readers %v, %.1f x without them (%v); acceptance 3 asks at most 2 x + 5 ms (not met yet)",
		greedy, noisy.Latency.P99, float64(noisy.Latency.P99)/float64(quiet.Latency.P99), quiet.Latency.P99)
	after := sc.footprint(t)
	slow := sc.metric(t, "stormgate_downstream_closed_total", `reason="slow_consumer"`, `protocol="triple"`)
	t.Logf("stormgate: before %v; after %v, peak RSS %.1f MiB; %v non-readers closed as slow consumers",
		before, after, float64(after.peakKiB)/1024, slow)
	if grew := (after.peakKiB - before.rssKiB) << 10; grew > budget {
		t.Errorf("Stormgate's RSS peaked %d MiB above where it started, over limits.max_buffered_bytes (%d MiB)", grew>>20, budget>>20)
	}
	if v := prov.Violations(); len(v) != 0 {
		t.Errorf("provider violations: %v", v)
	}
	if st := prov.Stats(); st.LoadPings != 0 {
		t.Errorf("the provider saw %d consumer PINGs; want 0 (Stormgate answers them)", st.LoadPings)
	}
}
