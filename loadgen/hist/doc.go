// Package hist is an HDR-style latency histogram: log-linear buckets whose width is at most 1/64 of
// their lower bound, so every reported value (a bucket midpoint, clamped to the observed min and max)
// is within 1/128 (< 0.8%) of the exact sample it stands for. Values are durations from 0 to one hour
// (larger values are counted in the top bucket; Max stays exact). Values below 128 ns are exact.
//
// A Histogram is a fixed array of about 2,400 counters (19 KiB): the zero value is ready to use, Record
// never allocates, and histograms from different goroutines or processes merge exactly (Merge, or
// JSON round trip through MarshalJSON/UnmarshalJSON, whose form lists only non-empty buckets by their
// lower bound in nanoseconds).
//
// Concurrency: Record, Merge, Reset and every reader use atomic operations, so all methods are safe to
// call concurrently. Readers running during Records see a consistent-enough view (each counter is
// exact, the set of counters may be mid-update); read after the writers stop for exact figures.
// A Histogram must not be copied after first use (go vet checks this).
package hist
