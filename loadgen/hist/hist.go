package hist

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

const (
	// subBits sets the precision: 2^subBits linear sub-buckets per power of two.
	subBits = 6
	subHalf = 1 << subBits // 64 sub-buckets per octave
	// MaxValue is the largest value tracked with bounded error; larger values land in the top bucket.
	MaxValue = time.Hour
	// RelativeError bounds |reported-exact|/exact for every reported percentile.
	RelativeError = 1.0 / (2 * subHalf)
)

// nBuckets covers 0 .. MaxValue: bucketIndex(int64(MaxValue)) + 1 (checked in tests).
const nBuckets = 2345

// Histogram counts durations in log-linear buckets. See the package doc for the error bound.
type Histogram struct {
	counts [nBuckets]atomic.Uint64
	count  atomic.Uint64
	sum    atomic.Uint64 // nanoseconds; wraps only after ~584 years of recorded time
	min    atomic.Int64  // stored as value+1 so that zero means "none yet"
	max    atomic.Int64
}

// bucketIndex maps v >= 0 to its bucket: exact below 2*subHalf, then subHalf buckets per octave.
func bucketIndex(v int64) int {
	if v < 2*subHalf {
		return int(v)
	}
	shift := bits.Len64(uint64(v)) - 1 - subBits // >= 1
	return shift*subHalf + int(v>>uint(shift))
}

// bucketLower returns the smallest value of bucket i and its width.
func bucketLower(i int) (lower, width int64) {
	if i < 2*subHalf {
		return int64(i), 1
	}
	shift := i/subHalf - 1
	sub := int64(i%subHalf + subHalf)
	return sub << uint(shift), 1 << uint(shift)
}

func clampValue(v int64) int64 {
	if v < 0 {
		return 0
	}
	if v > int64(MaxValue) {
		return int64(MaxValue)
	}
	return v
}

// Record adds one value. Negative values count as zero. It never allocates.
func (h *Histogram) Record(d time.Duration) {
	v := int64(d)
	if v < 0 {
		v = 0
	}
	h.counts[bucketIndex(clampValue(v))].Add(1)
	h.count.Add(1)
	h.sum.Add(uint64(v))
	for {
		m := h.max.Load()
		if v <= m || h.max.CompareAndSwap(m, v) {
			break
		}
	}
	for {
		m := h.min.Load()
		if (m != 0 && v+1 >= m) || h.min.CompareAndSwap(m, v+1) {
			break
		}
	}
}

// Count returns the number of recorded values.
func (h *Histogram) Count() uint64 { return h.count.Load() }

// Max returns the largest recorded value (exact), or 0 if empty.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max.Load()) }

// Min returns the smallest recorded value (exact), or 0 if empty.
func (h *Histogram) Min() time.Duration {
	m := h.min.Load()
	if m == 0 {
		return 0
	}
	return time.Duration(m - 1)
}

// Mean returns the exact arithmetic mean, or 0 if empty.
func (h *Histogram) Mean() time.Duration {
	n := h.count.Load()
	if n == 0 {
		return 0
	}
	return time.Duration(h.sum.Load() / n)
}

// Percentile returns the value at quantile q (0..1; q=0.99 is p99): the smallest recorded value v such
// that at least ceil(q*Count) values are <= v, within RelativeError. 0 if empty. q <= 0 gives Min,
// q >= 1 gives Max.
func (h *Histogram) Percentile(q float64) time.Duration {
	n := h.count.Load()
	if n == 0 {
		return 0
	}
	if q <= 0 || math.IsNaN(q) {
		return h.Min()
	}
	if q >= 1 {
		return h.Max()
	}
	rank := uint64(math.Ceil(q * float64(n)))
	if rank < 1 {
		rank = 1
	}
	var seen uint64
	for i := range h.counts {
		seen += h.counts[i].Load()
		if seen >= rank {
			return h.representative(i)
		}
	}
	return h.Max() // counters mid-update: fall back to the top
}

// representative is the bucket midpoint clamped to [Min, Max], which keeps it inside the bucket that
// holds the exact answer and makes single-bucket histograms exact at the edges.
func (h *Histogram) representative(i int) time.Duration {
	lower, width := bucketLower(i)
	v := lower + (width-1)/2
	if mx := h.max.Load(); v > mx {
		v = mx
	}
	if mn := int64(h.Min()); v < mn {
		v = mn
	}
	return time.Duration(v)
}

// Merge adds every value of o into h. o may be in use concurrently (see the package doc).
func (h *Histogram) Merge(o *Histogram) {
	if o == nil || o == h {
		return
	}
	for i := range o.counts {
		if c := o.counts[i].Load(); c != 0 {
			h.counts[i].Add(c)
		}
	}
	h.count.Add(o.count.Load())
	h.sum.Add(o.sum.Load())
	if o.count.Load() > 0 {
		h.mergeMinMax(int64(o.Min()), int64(o.Max()))
	}
}

func (h *Histogram) mergeMinMax(mn, mx int64) {
	for {
		m := h.max.Load()
		if mx <= m || h.max.CompareAndSwap(m, mx) {
			break
		}
	}
	for {
		m := h.min.Load()
		if (m != 0 && mn+1 >= m) || h.min.CompareAndSwap(m, mn+1) {
			break
		}
	}
}

// Reset empties h. Records racing with Reset may be partly lost.
func (h *Histogram) Reset() {
	for i := range h.counts {
		h.counts[i].Store(0)
	}
	h.count.Store(0)
	h.sum.Store(0)
	h.min.Store(0)
	h.max.Store(0)
}

// Summary is a histogram reduced to the figures reports print.
type Summary struct {
	Count uint64        `json:"count"`
	Min   time.Duration `json:"min_ns"`
	Mean  time.Duration `json:"mean_ns"`
	P50   time.Duration `json:"p50_ns"`
	P90   time.Duration `json:"p90_ns"`
	P99   time.Duration `json:"p99_ns"`
	P999  time.Duration `json:"p999_ns"`
	Max   time.Duration `json:"max_ns"`
}

// Summarize computes the Summary of h.
func (h *Histogram) Summarize() Summary {
	return Summary{
		Count: h.Count(), Min: h.Min(), Mean: h.Mean(),
		P50: h.Percentile(0.50), P90: h.Percentile(0.90), P99: h.Percentile(0.99),
		P999: h.Percentile(0.999), Max: h.Max(),
	}
}

// String prints the summary in milliseconds, e.g. "n=100 p50=0.41ms p99=1.90ms p99.9=2.10ms max=2.30ms".
func (s Summary) String() string {
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	return fmt.Sprintf("n=%d p50=%.3fms p90=%.3fms p99=%.3fms p99.9=%.3fms max=%.3fms",
		s.Count, ms(s.P50), ms(s.P90), ms(s.P99), ms(s.P999), ms(s.Max))
}

// wire is the JSON form: buckets as [lower_bound_ns, count] pairs, non-empty ones only.
type wire struct {
	Unit    string     `json:"unit"`
	SubBits int        `json:"sub_bucket_bits"`
	Count   uint64     `json:"count"`
	Sum     uint64     `json:"sum_ns"`
	Min     int64      `json:"min_ns"`
	Max     int64      `json:"max_ns"`
	Buckets [][2]int64 `json:"buckets"`
}

// MarshalJSON writes the sparse form described in the package doc.
func (h *Histogram) MarshalJSON() ([]byte, error) {
	w := wire{Unit: "ns", SubBits: subBits, Count: h.Count(), Sum: h.sum.Load(),
		Min: int64(h.Min()), Max: int64(h.Max()), Buckets: [][2]int64{}}
	for i := range h.counts {
		if c := h.counts[i].Load(); c != 0 {
			lower, _ := bucketLower(i)
			w.Buckets = append(w.Buckets, [2]int64{lower, int64(c)})
		}
	}
	return json.Marshal(w)
}

// UnmarshalJSON replaces h's contents with the JSON form. Bucket bounds from a histogram of another
// precision are re-bucketed by value (exact for this precision).
func (h *Histogram) UnmarshalJSON(b []byte) error {
	var w wire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	if w.Unit != "" && w.Unit != "ns" {
		return fmt.Errorf("hist: unit %q, want ns", w.Unit)
	}
	h.Reset()
	var n uint64
	for _, bc := range w.Buckets {
		if bc[0] < 0 || bc[1] < 0 {
			return errors.New("hist: negative bucket bound or count")
		}
		h.counts[bucketIndex(clampValue(bc[0]))].Add(uint64(bc[1]))
		n += uint64(bc[1])
	}
	if n != w.Count {
		return fmt.Errorf("hist: bucket counts sum to %d, count says %d", n, w.Count)
	}
	h.count.Store(n)
	h.sum.Store(w.Sum)
	if n > 0 {
		h.mergeMinMax(w.Min, w.Max)
	}
	return nil
}
