package proxy

import "github.com/prometheus/client_golang/prometheus"

// callTotals sums every shard's per-method counts: the provider connections that ended,
// the live ones, the HTTP/2 pools', and Stormgate's local replies. n is the number of indexes wanted.
func (s *Server) callTotals(n int) []callTotal {
	s.upClosed.mu.Lock()
	totals := make([]callTotal, max(n, len(s.upClosed.calls)))
	copy(totals, s.upClosed.calls)
	for _, p := range s.poolList() {
		for uc := range p.dubbo.conns() { // Dubbo's counts are each connection's (dubboUpstream.Calls)
			if !uc.folded {
				totals = addShard(totals, &uc.counts.calls)
			}
		}
		for _, u := range p.upstreams() {
			if sh := u.Calls(); sh != nil {
				totals = addShard(totals, sh)
			}
		}
	}
	s.upClosed.mu.Unlock()
	return addShard(totals, &s.calls.local)
}

// callCollector exports the per-method series (methods.go). Every pair seen gets its
// OK requests, exceptions and duration series at once (zero until counted), so that a
// rate or an alert sees a method's first calls; other statuses, holds and local replies
// appear when they first happen.
type callCollector struct {
	s                                           *Server
	statuses                                    []string
	requests, exceptions, duration, local, held *prometheus.Desc
	labels, limit, overflow                     *prometheus.Desc
}

func newCallCollector(s *Server) *callCollector {
	sm := []string{"service", "method"}
	return &callCollector{
		s:        s,
		statuses: s.statuses.names,
		requests: prometheus.NewDesc("stormgate_method_requests_total",
			"Two-way requests answered, by service (Dubbo's service key: group/interface:version), method and the "+
				"answer's status (the Dubbo status name for Dubbo 2, the gRPC status name for Triple and gRPC), whether "+
				"the provider or Stormgate answered; HTTP/2 calls their consumer cancelled count as CANCELLED.",
			[]string{"service", "method", "status"}, nil),
		exceptions: prometheus.NewDesc("stormgate_method_exceptions_total",
			"Answers with status OK that carry an exception thrown by the called method (Dubbo business exceptions).", sm, nil),
		duration: prometheus.NewDesc("stormgate_method_request_duration_seconds",
			"Time from a request's arrival at Stormgate to its answer leaving for the consumer, by service and method.", sm, nil),
		local: prometheus.NewDesc("stormgate_method_local_replies_total",
			"Answers Stormgate sent itself, by service, method and reason (the reasons of stormgate_local_replies_total).",
			[]string{"service", "method", "reason"}, nil),
		held: prometheus.NewDesc("stormgate_method_held_requests_total",
			"Requests that waited in the hold queue (kind=held; HTTP/2: waited for a provider stream), or went back "+
				"to it after being sent (kind=reheld), by service and method.", []string{"service", "method", "kind"}, nil),
		labels: prometheus.NewDesc("stormgate_method_labels",
			"Distinct service/method pairs the per-method series carry (at most metrics.max_methods).", nil, nil),
		limit: prometheus.NewDesc("stormgate_method_labels_limit",
			"metrics.max_methods in force; 0 turns per-method metrics off.", nil, nil),
		overflow: prometheus.NewDesc("stormgate_method_labels_overflow_total",
			"Requests counted under service=\"other\", method=\"other\" because metrics.max_methods pairs were seen already.", nil, nil),
	}
}

func (c *callCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.requests, c.exceptions, c.duration, c.local, c.held, c.labels, c.limit, c.overflow} {
		ch <- d
	}
}

func (c *callCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	lbls := s.calls.table.snapshot()
	limit := s.cfg.Load().MaxMethods
	ch <- prometheus.MustNewConstMetric(c.labels, prometheus.GaugeValue, float64(len(lbls)-firstCall))
	ch <- prometheus.MustNewConstMetric(c.limit, prometheus.GaugeValue, float64(limit))
	if limit == 0 && len(lbls) == firstCall {
		return // off, and never on
	}
	totals := s.callTotals(len(lbls))
	ch <- prometheus.MustNewConstMetric(c.overflow, prometheus.CounterValue, float64(totals[callOther].requests()))
	bounds := methodBounds[:]
	for i, l := range lbls {
		t := &totals[i]
		for st, n := range t.status {
			if st < len(c.statuses) && (n > 0 || st == 0) {
				ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(n), l.service, l.method, c.statuses[st])
			}
		}
		ch <- prometheus.MustNewConstMetric(c.exceptions, prometheus.CounterValue, float64(t.exceptions), l.service, l.method)
		buckets := make(map[float64]uint64, len(bounds))
		var cum uint64
		for b, bound := range bounds {
			cum += t.buckets[b]
			buckets[bound] = cum
		}
		cum += t.buckets[len(bounds)]
		ch <- prometheus.MustNewConstHistogram(c.duration, cum, float64(t.sumNs)/1e9, buckets, l.service, l.method)
		ev := s.calls.events.peek(uint32(i))
		if ev == nil {
			continue
		}
		for r := range ev.local {
			if n := ev.local[r].Load(); n > 0 {
				ch <- prometheus.MustNewConstMetric(c.local, prometheus.CounterValue, float64(n), l.service, l.method, ReplyReason(r).String())
			}
		}
		if n := ev.held.Load(); n > 0 {
			ch <- prometheus.MustNewConstMetric(c.held, prometheus.CounterValue, float64(n), l.service, l.method, "held")
		}
		if n := ev.reheld.Load(); n > 0 {
			ch <- prometheus.MustNewConstMetric(c.held, prometheus.CounterValue, float64(n), l.service, l.method, "reheld")
		}
	}
}
