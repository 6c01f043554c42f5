package proxy

import (
	"testing"
	"time"

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
