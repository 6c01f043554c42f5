package hist

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

func TestLayout(t *testing.T) {
	if got := bucketIndex(int64(MaxValue)) + 1; got != nBuckets {
		t.Fatalf("nBuckets = %d, layout needs %d", nBuckets, got)
	}
	// Every bucket's lower bound maps back to it, buckets tile the range without gaps, and each
	// bucket is at most 1/64 of its lower bound wide.
	next := int64(0)
	for i := 0; i < nBuckets; i++ {
		lower, width := bucketLower(i)
		if lower != next {
			t.Fatalf("bucket %d starts at %d, previous ended at %d", i, lower, next)
		}
		if bucketIndex(lower) != i || bucketIndex(lower+width-1) != i {
			t.Fatalf("bucket %d [%d,+%d) does not map back", i, lower, width)
		}
		if i >= 2*subHalf && float64(width)/float64(lower) > 1.0/subHalf {
			t.Fatalf("bucket %d too wide: %d at %d", i, width, lower)
		}
		next = lower + width
	}
}

// exactPercentile is the definition Percentile approximates: the ceil(q*n)-th smallest sample.
func exactPercentile(sorted []time.Duration, q float64) time.Duration {
	rank := int(math.Ceil(q * float64(len(sorted))))
	if rank < 1 {
		rank = 1
	}
	return sorted[rank-1]
}

func checkAgainstExact(t *testing.T, name string, samples []time.Duration) {
	t.Helper()
	var h Histogram
	for _, s := range samples {
		h.Record(s)
	}
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	if h.Count() != uint64(len(samples)) {
		t.Fatalf("%s: count %d want %d", name, h.Count(), len(samples))
	}
	if h.Max() != sorted[len(sorted)-1] || h.Min() != sorted[0] {
		t.Fatalf("%s: min/max %v/%v want %v/%v", name, h.Min(), h.Max(), sorted[0], sorted[len(sorted)-1])
	}
	for _, q := range []float64{0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 0.9999, 1} {
		want := exactPercentile(sorted, q)
		got := h.Percentile(q)
		relErr := math.Abs(float64(got-want)) / float64(want)
		if relErr > RelativeError {
			t.Errorf("%s: p%v = %v, exact %v, relative error %.5f > %.5f", name, q*100, got, want, relErr, RelativeError)
		}
	}
}

func TestPercentileAccuracy(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 200_000
	gen := func(f func() time.Duration) []time.Duration {
		s := make([]time.Duration, n)
		for i := range s {
			s[i] = f()
		}
		return s
	}
	cases := map[string][]time.Duration{
		// 1 µs .. 1 h uniformly in log space covers every octave the histogram claims.
		"log-uniform 1us..1h": gen(func() time.Duration {
			return time.Duration(math.Exp(math.Log(1e3) + rng.Float64()*(math.Log(3.6e12)-math.Log(1e3))))
		}),
		"uniform 1ms..100ms": gen(func() time.Duration {
			return time.Millisecond + time.Duration(rng.Int64N(int64(99*time.Millisecond)))
		}),
		"exponential mean 500us": gen(func() time.Duration {
			return time.Microsecond + time.Duration(rng.ExpFloat64()*500e3)
		}),
		"constant 1.234ms": gen(func() time.Duration { return 1234567 * time.Nanosecond }),
		// bimodal: 99% fast around 300 µs, 1% stalled around 200 ms — the shape a stall leaves.
		"bimodal 300us/200ms": gen(func() time.Duration {
			if rng.IntN(100) == 0 {
				return 200*time.Millisecond + time.Duration(rng.NormFloat64()*5e6)
			}
			return 300*time.Microsecond + time.Duration(math.Abs(rng.NormFloat64())*50e3)
		}),
	}
	for name, samples := range cases {
		checkAgainstExact(t, name, samples)
	}
}

func TestConstantIsExact(t *testing.T) {
	var h Histogram
	for range 1000 {
		h.Record(1234567)
	}
	for _, q := range []float64{0, 0.5, 0.99, 1} {
		if got := h.Percentile(q); got != 1234567 {
			t.Fatalf("p%v = %v, want exactly 1.234567ms (clamped to min/max)", q, got)
		}
	}
}

func TestBimodalTail(t *testing.T) {
	// 990 fast values and 10 at 200 ms: p99 is still fast (the 990th value), p99.9 is the stall.
	var h Histogram
	for range 990 {
		h.Record(300 * time.Microsecond)
	}
	for range 10 {
		h.Record(200 * time.Millisecond)
	}
	if p := h.Percentile(0.99); math.Abs(float64(p-300*time.Microsecond)) > RelativeError*300e3 {
		t.Fatalf("p99 = %v, want 300µs within %.2f%%", p, RelativeError*100)
	}
	if p := h.Percentile(0.991); p != 200*time.Millisecond {
		t.Fatalf("p99.1 = %v, want 200ms", p)
	}
}

func TestOutOfRange(t *testing.T) {
	var h Histogram
	h.Record(-5)
	h.Record(3 * time.Hour)
	if h.Min() != 0 || h.Max() != 3*time.Hour {
		t.Fatalf("min/max %v/%v", h.Min(), h.Max())
	}
	if p := h.Percentile(0.75); p < time.Hour-time.Hour/64 {
		t.Fatalf("p75 of {0, 3h} = %v, want the top bucket", p)
	}
	var empty Histogram
	if empty.Percentile(0.5) != 0 || empty.Max() != 0 || empty.Mean() != 0 {
		t.Fatal("empty histogram must report zeros")
	}
}

func TestMergeEqualsCombined(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var a, b, all Histogram
	for i := range 50_000 {
		v := time.Duration(rng.ExpFloat64() * 2e6)
		if i%3 == 0 {
			a.Record(v)
		} else {
			b.Record(v)
		}
		all.Record(v)
	}
	var m Histogram
	m.Merge(&a)
	m.Merge(&b)
	if m.Summarize() != all.Summarize() {
		t.Fatalf("merged %+v\ncombined %+v", m.Summarize(), all.Summarize())
	}
}

func TestJSONRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var h Histogram
	for range 10_000 {
		h.Record(time.Duration(rng.Int64N(int64(time.Second))))
	}
	b, err := json.Marshal(&h)
	if err != nil {
		t.Fatal(err)
	}
	var back Histogram
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Summarize() != h.Summarize() {
		t.Fatalf("round trip %+v\n want %+v", back.Summarize(), h.Summarize())
	}
	for i := range h.counts {
		if h.counts[i].Load() != back.counts[i].Load() {
			t.Fatalf("bucket %d differs", i)
		}
	}
	bad := []string{
		`{"unit":"ms","count":0,"buckets":[]}`,
		`{"count":2,"buckets":[[1000,1]]}`,
		`{"count":1,"buckets":[[-1,1]]}`,
	}
	for _, s := range bad {
		if err := json.Unmarshal([]byte(s), &back); err == nil {
			t.Errorf("accepted %s", s)
		}
	}
}

func TestRecordAllocs(t *testing.T) {
	var h Histogram
	if n := testing.AllocsPerRun(1000, func() { h.Record(1500 * time.Microsecond) }); n != 0 {
		t.Fatalf("Record allocates %v times", n)
	}
}

func TestConcurrentRecord(t *testing.T) {
	var h Histogram
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 10_000 {
				h.Record(time.Duration(g*10_000+i) * time.Microsecond)
			}
		})
	}
	wg.Wait()
	if h.Count() != 40_000 || h.Min() != 0 || h.Max() != 39_999*time.Microsecond {
		t.Fatalf("count %d min %v max %v", h.Count(), h.Min(), h.Max())
	}
}

func BenchmarkRecord(b *testing.B) {
	var h Histogram
	for i := 0; b.Loop(); i++ {
		h.Record(time.Duration(i&0xfffff) * 100)
	}
}
