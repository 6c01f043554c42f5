package proxy

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The per-request metrics are counted on the connection that handles the request,
// in memory that connection's handler writes anyway, and summed when Prometheus
// scrapes: a forwarded request touches no counter shared by the pollers, so no cache
// line bounces between cores per request (a prometheus.Counter is one atomic that
// every core writes). A connection's counts move to the closed totals when it ends,
// under the same lock the scrape takes, so the sums never step back.

// sessionCounters are one consumer connection's counts; its handler writes them.
type sessionCounters struct {
	requests   atomic.Uint64 // two-way and one-way requests received
	oneway     atomic.Uint64 // one-way requests forwarded
	heartbeats atomic.Uint64 // consumer heartbeats answered
}

func (c *sessionCounters) addTo(t *sessionTotals) {
	t.requests += c.requests.Load()
	t.oneway += c.oneway.Load()
	t.heartbeats += c.heartbeats.Load()
}

// sessionTotals are plain sums (under a lock).
type sessionTotals struct{ requests, oneway, heartbeats uint64 }

func (t *sessionTotals) add(o sessionTotals) {
	t.requests += o.requests
	t.oneway += o.oneway
	t.heartbeats += o.heartbeats
}

// upCounters are one provider connection's counts: responses routed (written by its
// handler) and frames per write(2) (written by whichever sender holds its writer).
type upCounters struct {
	responses  atomic.Uint64
	heartbeats atomic.Uint64 // the provider's heartbeats answered
	duration   latencyHist
	batches    countHist
	calls      MethodShard // per-method counts of the answers it routed (methods.go)
}

// latencyBounds are stormgate_request_duration_seconds' buckets.
var latencyBounds = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// latencyHist is a histogram of durations with latencyBounds.
type latencyHist struct {
	counts [19]atomic.Uint64 // one per bound, then +Inf
	sumNs  atomic.Uint64
}

func (h *latencyHist) observe(d time.Duration) {
	h.counts[bucketOf(latencyBounds, d)].Add(1)
	h.sumNs.Add(uint64(max(d, 0)))
}

// bucketOf is the index of d's bucket: the first bound d does not exceed, or len(bounds).
func bucketOf(bounds []float64, d time.Duration) int {
	s := d.Seconds()
	i := 0
	for i < len(bounds) && s > bounds[i] {
		i++
	}
	return i
}

// batchBounds are stormgate_upstream_write_batch_frames' buckets.
var batchBounds = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512}

// countHist is a histogram of frame counts with batchBounds.
type countHist struct {
	counts [11]atomic.Uint64
	sum    atomic.Uint64
}

func (h *countHist) observe(n int) {
	i := 0
	for i < len(batchBounds) && float64(n) > batchBounds[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sum.Add(uint64(n))
}

// upTotals are plain sums of upCounters.
type upTotals struct {
	responses, heartbeats uint64
	duration              [19]uint64
	durationNs            uint64
	batches               [11]uint64
	batchFrames           uint64
}

func (t *upTotals) addCounters(c *upCounters) {
	t.responses += c.responses.Load()
	t.heartbeats += c.heartbeats.Load()
	for i := range t.duration {
		t.duration[i] += c.duration.counts[i].Load()
	}
	t.durationNs += c.duration.sumNs.Load()
	for i := range t.batches {
		t.batches[i] += c.batches.counts[i].Load()
	}
	t.batchFrames += c.batches.sum.Load()
}

// upClosed holds the counts of provider connections that ended.
type upClosed struct {
	mu     sync.Mutex
	totals upTotals
	calls  []callTotal // per-method counts, by call index
}

// fold moves uc's counts to the closed totals once (under mu, which the scrape
// also takes, so they are never counted twice or missed).
func (u *upClosed) fold(uc *upConn) {
	u.mu.Lock()
	if !uc.folded {
		uc.folded = true
		u.totals.addCounters(&uc.counts)
		u.calls = addShard(u.calls, &uc.counts.calls)
	}
	u.mu.Unlock()
}

// connTotals sums every connection's counts, live and closed.
func (s *Server) connTotals() (sessionTotals, upTotals, int64) {
	st, inflight := s.sessions.totals()
	s.upClosed.mu.Lock()
	defer s.upClosed.mu.Unlock()
	ut := s.upClosed.totals
	for _, p := range s.poolList() {
		for uc := range p.dubbo.conns() {
			if !uc.folded {
				ut.addCounters(&uc.counts)
			}
		}
	}
	return st, ut, inflight
}

// connCollector exports the per-connection counts.
type connCollector struct {
	s                                                 *Server
	requests, oneway, responses, heartbeats, inflight *prometheus.Desc
	duration, batches                                 *prometheus.Desc
}

func newConnCollector(s *Server) *connCollector {
	return &connCollector{
		s: s,
		requests: prometheus.NewDesc("stormgate_requests_total",
			"Requests received from consumers (two-way and one-way).", nil, nil),
		oneway: prometheus.NewDesc("stormgate_oneway_requests_total",
			"One-way requests forwarded to the provider.", nil, nil),
		responses: prometheus.NewDesc("stormgate_responses_total",
			"Provider responses routed back to consumers.", nil, nil),
		heartbeats: prometheus.NewDesc("stormgate_heartbeats_answered_total",
			"Heartbeat requests answered by Stormgate, by side (downstream = consumers, upstream = provider).", []string{"side"}, nil),
		inflight: prometheus.NewDesc("stormgate_inflight_requests",
			"Two-way requests accepted (held or forwarded) and not yet answered.", nil, nil),
		duration: prometheus.NewDesc("stormgate_request_duration_seconds",
			"Time from a request's arrival at Stormgate to its response leaving for the consumer.", nil, nil),
		batches: prometheus.NewDesc("stormgate_upstream_write_batch_frames",
			"Frames per upstream write(2) (batching).", nil, nil),
	}
}

func (c *connCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.requests, c.oneway, c.responses, c.heartbeats, c.inflight, c.duration, c.batches} {
		ch <- d
	}
}

func (c *connCollector) Collect(ch chan<- prometheus.Metric) {
	st, ut, inflight := c.s.connTotals()
	ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(st.requests))
	ch <- prometheus.MustNewConstMetric(c.oneway, prometheus.CounterValue, float64(st.oneway))
	ch <- prometheus.MustNewConstMetric(c.responses, prometheus.CounterValue, float64(ut.responses))
	ch <- prometheus.MustNewConstMetric(c.heartbeats, prometheus.CounterValue, float64(st.heartbeats), "downstream")
	ch <- prometheus.MustNewConstMetric(c.heartbeats, prometheus.CounterValue, float64(ut.heartbeats), "upstream")
	ch <- prometheus.MustNewConstMetric(c.inflight, prometheus.GaugeValue, float64(inflight))
	ch <- constHistogram(c.duration, latencyBounds, ut.duration[:], float64(ut.durationNs)/1e9)
	ch <- constHistogram(c.batches, batchBounds, ut.batches[:], float64(ut.batchFrames))
}

// constHistogram builds a histogram from per-bucket (not cumulative) counts, the last
// one past every bound.
func constHistogram(d *prometheus.Desc, bounds []float64, counts []uint64, sum float64) prometheus.Metric {
	buckets := make(map[float64]uint64, len(bounds))
	var cum uint64
	for i, b := range bounds {
		cum += counts[i]
		buckets[b] = cum
	}
	cum += counts[len(bounds)]
	return prometheus.MustNewConstHistogram(d, cum, sum, buckets)
}
