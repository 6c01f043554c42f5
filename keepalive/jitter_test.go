package keepalive

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func TestJitterBoundsAndSpread(t *testing.T) {
	const (
		d = 30 * time.Second
		n = 10_000
	)
	for _, frac := range []float64{0.05, 0.2, 0.5, 1, 1.5} {
		for _, rng := range []*rand.Rand{nil, rand.New(rand.NewPCG(3, 4))} {
			f := min(frac, 1)
			lo, hi := float64(d)*(1-f), float64(d)*(1+f)
			width := hi - lo
			minV, maxV, sum := math.Inf(1), math.Inf(-1), 0.0
			var buckets [10]int
			for range n {
				v := float64(Jitter(d, frac, rng))
				if v < lo-1 || v > hi {
					t.Fatalf("frac %v: %v outside [%v, %v]", frac, time.Duration(v), time.Duration(lo), time.Duration(hi))
				}
				minV, maxV, sum = min(minV, v), max(maxV, v), sum+v
				buckets[min(int((v-lo)/width*10), 9)]++
			}
			mean := sum / n
			// Uniform: the extremes get within 1% of the range of the bounds (miss probability 0.99^10000),
			// the mean within 2% of the range of d (> 6 standard deviations), each tenth holds 8-12%.
			if minV > lo+0.01*width || maxV < hi-0.01*width {
				t.Errorf("frac %v: min %v max %v, not spread over [%v, %v]", frac,
					time.Duration(minV), time.Duration(maxV), time.Duration(lo), time.Duration(hi))
			}
			if math.Abs(mean-float64(d)) > 0.02*width {
				t.Errorf("frac %v: mean %v, want about %v", frac, time.Duration(mean), d)
			}
			for i, b := range buckets {
				if b < n/10*8/10 || b > n/10*12/10 {
					t.Errorf("frac %v: tenth %d holds %d of %d samples", frac, i, b, n)
				}
			}
		}
	}
}

func TestJitterEdges(t *testing.T) {
	for _, frac := range []float64{0, -0.5, math.NaN()} {
		if got := Jitter(time.Second, frac, nil); got != time.Second {
			t.Errorf("frac %v: %v, want d unchanged", frac, got)
		}
	}
	for _, d := range []time.Duration{0, -time.Second} {
		if got := Jitter(d, 0.5, nil); got != d {
			t.Errorf("d %v: %v, want d unchanged", d, got)
		}
	}
	if got := Jitter(math.MaxInt64, 1, rand.New(rand.NewPCG(0, 0))); got < 0 {
		t.Errorf("huge d overflowed to %v", got)
	}
	a, b := rand.New(rand.NewPCG(1, 1)), rand.New(rand.NewPCG(2, 2))
	same := 0
	for range 100 {
		if Jitter(time.Second, 0.2, a) == Jitter(time.Second, 0.2, b) {
			same++
		}
	}
	if same > 5 {
		t.Errorf("two rngs gave %d equal jitters of 100", same)
	}
}

func TestBackoffGrowsToCap(t *testing.T) {
	b := Backoff{Base: 50 * time.Millisecond, Max: 2 * time.Second, Rand: rand.New(rand.NewPCG(5, 6))}
	want := []time.Duration{50, 100, 200, 400, 800, 1600, 2000, 2000, 2000}
	for i, w := range want {
		w *= time.Millisecond
		if c := b.Ceiling(); c != w {
			t.Fatalf("attempt %d: ceiling %v, want %v", i, c, w)
		}
		if v := b.Next(); v < 0 || v >= w {
			t.Fatalf("attempt %d: delay %v outside [0, %v)", i, v, w)
		}
		if b.Attempt() != i+1 {
			t.Fatalf("Attempt %d after %d calls", b.Attempt(), i+1)
		}
	}
	// Far past 63 doublings: no overflow, still capped.
	for range 200 {
		if v := b.Next(); v < 0 || v >= b.Max {
			t.Fatalf("attempt %d: delay %v outside [0, %v)", b.Attempt(), v, b.Max)
		}
	}
	if b.Ceiling() != b.Max {
		t.Fatalf("ceiling %v after %d attempts, want the cap", b.Ceiling(), b.Attempt())
	}
	b.Reset()
	if b.Attempt() != 0 || b.Ceiling() != b.Base {
		t.Fatalf("after Reset: attempt %d ceiling %v", b.Attempt(), b.Ceiling())
	}
	if v := b.Next(); v >= b.Base {
		t.Fatalf("first delay after Reset %v, want < %v", v, b.Base)
	}
}

func TestBackoffFullJitter(t *testing.T) {
	const n = 10_000
	for _, rng := range []*rand.Rand{nil, rand.New(rand.NewPCG(7, 8))} {
		b := Backoff{Base: 10 * time.Millisecond, Max: time.Second, Rand: rng}
		for b.Ceiling() < b.Max {
			b.Next()
		}
		minV, maxV, sum := time.Duration(math.MaxInt64), time.Duration(0), 0.0
		for range n {
			v := b.Next()
			if v < 0 || v >= b.Max {
				t.Fatalf("delay %v outside [0, %v)", v, b.Max)
			}
			minV, maxV, sum = min(minV, v), max(maxV, v), sum+float64(v)
		}
		mean := time.Duration(sum / n)
		if minV > b.Max/100 || maxV < b.Max*99/100 || mean < b.Max*48/100 || mean > b.Max*52/100 {
			t.Errorf("rng %v: min %v max %v mean %v; full jitter over [0, %v) wants ~0, ~cap, ~cap/2",
				rng != nil, minV, maxV, mean, b.Max)
		}
	}
}

func TestBackoffDefaults(t *testing.T) {
	var b Backoff
	if b.Ceiling() != DefaultBackoffBase {
		t.Fatalf("zero Backoff ceiling %v, want %v", b.Ceiling(), DefaultBackoffBase)
	}
	for range 20 {
		b.Next()
	}
	if b.Ceiling() != DefaultBackoffMax {
		t.Fatalf("zero Backoff caps at %v, want %v", b.Ceiling(), DefaultBackoffMax)
	}
	inverted := Backoff{Base: time.Second, Max: time.Millisecond}
	inverted.Next()
	if inverted.Ceiling() != time.Second {
		t.Fatalf("Max below Base: ceiling %v, want Base", inverted.Ceiling())
	}
}

// TestBackoffNotInStep: reconnect loops with different sources must not sleep in step; the same seed must
// repeat (showing the source is what decides).
func TestBackoffNotInStep(t *testing.T) {
	seq := func(b *Backoff) []time.Duration {
		out := make([]time.Duration, 20)
		for i := range out {
			out[i] = b.Next()
		}
		return out
	}
	equal := func(x, y []time.Duration) int {
		n := 0
		for i := range x {
			if x[i] == y[i] {
				n++
			}
		}
		return n
	}
	a := seq(&Backoff{Rand: rand.New(rand.NewPCG(1, 1))})
	b := seq(&Backoff{Rand: rand.New(rand.NewPCG(2, 2))})
	a2 := seq(&Backoff{Rand: rand.New(rand.NewPCG(1, 1))})
	if n := equal(a, b); n > 2 {
		t.Errorf("different rngs: %d of 20 delays equal: %v vs %v", n, a, b)
	}
	if equal(a, a2) != 20 {
		t.Errorf("same seed gave different sequences: %v vs %v", a, a2)
	}
	if n := equal(seq(&Backoff{}), seq(&Backoff{})); n > 2 {
		t.Errorf("two Backoffs on the default source: %d of 20 delays equal", n)
	}
	rng := rand.New(rand.NewPCG(9, 9))
	b0 := Backoff{Rand: rng}
	if a := testing.AllocsPerRun(1000, func() {
		b0.Next()
		_ = Jitter(time.Second, 0.2, rng)
		_ = Jitter(time.Second, 0.2, nil)
	}); a != 0 {
		t.Errorf("Backoff.Next+Jitter: %v allocs/op", a)
	}
}
