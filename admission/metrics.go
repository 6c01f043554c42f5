package admission

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Reasons for closing an accepted connection without admitting it (label "reason" of
// stormgate_admission_rejected_total).
const (
	ReasonMaxConnections = "max_connections"
	ReasonMaxPending     = "max_pending"
	ReasonPortNotAllowed = "port_not_allowed"
	ReasonShutdown       = "shutdown" // pending when StopAccepting/Close/ctx ended Serve
)

type reason int

const (
	rMaxConnections reason = iota
	rMaxPending
	rPortNotAllowed
	rShutdown
	numReasons
)

func (r reason) String() string {
	switch r {
	case rMaxConnections:
		return ReasonMaxConnections
	case rMaxPending:
		return ReasonMaxPending
	case rPortNotAllowed:
		return ReasonPortNotAllowed
	case rShutdown:
		return ReasonShutdown
	}
	return "unknown"
}

// metrics are the admission collectors; one set per Admitter, registered on the Registerer
// passed to Listen.
type metrics struct {
	accepted   prometheus.Counter
	admitted   prometheus.Counter
	pending    prometheus.Gauge
	rejected   [numReasons]prometheus.Counter
	overflows  prometheus.Counter
	drops      prometheus.Counter
	queueLen   prometheus.GaugeFunc
	queueLimit prometheus.GaugeFunc
	wait       prometheus.Histogram
	rateLimit  prometheus.Gauge
	burst      prometheus.Gauge
	all        []prometheus.Collector
}

func newMetrics(queue func() (length, limit uint32)) *metrics {
	m := &metrics{
		accepted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stormgate_downstream_accepted_total",
			Help: "Connections accepted from the listening socket (admitted or not).",
		}),
		admitted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stormgate_admission_admitted_total",
			Help: "Accepted connections admitted into the proxy.",
		}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "stormgate_admission_pending",
			Help: "Accepted connections waiting for an admission token.",
		}),
		overflows: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stormgate_listen_overflows_total",
			Help: "TcpExt ListenOverflows since serving started (whole network namespace; sampled while connections arrive, at most every second, and at each scrape).",
		}),
		drops: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stormgate_listen_drops_total",
			Help: "TcpExt ListenDrops since serving started (whole network namespace; sampled while connections arrive, at most every second, and at each scrape).",
		}),
		queueLen: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "stormgate_listen_queue_length",
			Help: "Connections in the listening socket's accept queue (TCP_INFO tcpi_unacked).",
		}, func() float64 { l, _ := queue(); return float64(l) }),
		queueLimit: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "stormgate_listen_queue_limit",
			Help: "Accept queue limit of the listening socket, the effective backlog (TCP_INFO tcpi_sacked).",
		}, func() float64 { _, l := queue(); return float64(l) }),
		wait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "stormgate_admission_wait_seconds",
			Help: "Time from accept to admission.",
			// From sub-millisecond token waits to just past the default 1 s MaxWait.
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, .75, 1, 1.25, 2, 5},
		}),
		rateLimit: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "stormgate_admission_rate_limit",
			Help: "Admission token rate in connections per second; 0 means unlimited.",
		}),
		burst: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "stormgate_admission_burst",
			Help: "Admission token bucket size.",
		}),
	}
	rejected := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stormgate_admission_rejected_total",
		Help: "Accepted connections closed without admission, by reason.",
	}, []string{"reason"})
	for r := range numReasons {
		m.rejected[r] = rejected.WithLabelValues(r.String())
	}
	// overflows and drops are registered through the Admitter's kernelCollector, which samples
	// the kernel's counters first.
	m.all = []prometheus.Collector{m.accepted, m.admitted, m.pending, rejected,
		m.queueLen, m.queueLimit, m.wait, m.rateLimit, m.burst}
	return m
}

func (m *metrics) register(reg prometheus.Registerer) error {
	if reg == nil {
		return nil
	}
	for i, c := range m.all {
		if err := reg.Register(c); err != nil {
			for _, done := range m.all[:i] {
				reg.Unregister(done)
			}
			return err
		}
	}
	return nil
}
