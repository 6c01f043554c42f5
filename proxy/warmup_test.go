package proxy

import (
	"testing"
	"time"
)

// TestWarmupRampsLinearly: right after the provider returns only a small share
// of the earlier rate is let through; by the end of the ramp nearly all of it.
func TestWarmupRampsLinearly(t *testing.T) {
	srv, err := New(Config{Upstream: "127.0.0.1:1", Warmup: time.Second}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := &Pool{srv: srv}
	p.meter.ewma.Store(float64bits(2000))
	p.startWarmup()
	count := func(d time.Duration) int {
		n := 0
		end := time.Now().Add(d)
		for time.Now().Before(end) {
			if p.warmAllow() {
				n++
			}
			time.Sleep(100 * time.Microsecond)
		}
		return n
	}
	first := count(150 * time.Millisecond)
	time.Sleep(600 * time.Millisecond)
	late := count(150 * time.Millisecond)
	// Linear ramp from 5%: ~0.05-0.15 of 2000/s in the first 150 ms (~15-45 + burst),
	// ~0.75-0.9 later (~230-270), bounded by the test loop's own pace.
	if first >= late/2 || late < 80 {
		t.Fatalf("allowed %d early vs %d late; want a ramp", first, late)
	}
	time.Sleep(300 * time.Millisecond)
	if !p.warmAllow() || p.warming() {
		t.Fatal("warm-up did not end after its duration")
	}
}
