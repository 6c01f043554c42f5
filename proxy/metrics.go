package proxy

import "github.com/prometheus/client_golang/prometheus"

// Close reasons for stormgate_downstream_closed_total{reason}.
const (
	closePeer       = "peer_closed"
	closeIdle       = "idle_timeout"
	closeBadMagic   = "bad_magic"
	closeOversize   = "frame_too_large"
	closeBadLength  = "bad_length"
	closeTruncated  = "truncated_frame"
	closeSlowReader = "slow_consumer"
	closeDrain      = "drain"
	closeShutdown   = "shutdown"
	closeNoPort     = "port_not_allowed"
)

// Local reply reasons for stormgate_local_replies_total{reason}.
const (
	replyUpstreamLost = "upstream_lost"
	replyHoldTimeout  = "hold_timeout"
	replyHoldFull     = "hold_full"
	replyNoUpstream   = "no_upstream"
	replyInflight     = "inflight_limit"
	replyMaxAge       = "max_request_age"
	replyBadRequest   = "bad_request"
	replyDrain        = "draining"
)

type metrics struct {
	downConns      prometheus.Gauge
	downClosed     *prometheus.CounterVec
	upConns        prometheus.Gauge
	upState        *prometheus.GaugeVec
	upReconnects   prometheus.Counter
	hbAnswered     *prometheus.CounterVec
	hbAnsweredDown prometheus.Counter
	hbAnsweredUp   prometheus.Counter
	hbSent         prometheus.Counter
	requests       prometheus.Counter
	oneway         prometheus.Counter
	responses      prometheus.Counter
	localReplies   *prometheus.CounterVec
	held           prometheus.Gauge
	holdOutcome    *prometheus.CounterVec
	duration       prometheus.Histogram
	unknownIDs     prometheus.Counter
	lateResponses  prometheus.Counter
	dropped        *prometheus.CounterVec
	readonly       *prometheus.CounterVec
	inflight       prometheus.Gauge
	upBatch        prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		downConns: prometheus.NewGauge(prometheus.GaugeOpts{Name: "stormgate_downstream_connections",
			Help: "Consumer connections currently open."}),
		downClosed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stormgate_downstream_closed_total",
			Help: "Consumer connections closed, by reason."}, []string{"reason"}),
		upConns: prometheus.NewGauge(prometheus.GaugeOpts{Name: "stormgate_upstream_connections",
			Help: "Usable (connected, writable) provider connections."}),
		upState: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "stormgate_upstream_connection_state",
			Help: "Provider connections by state (connecting, ready, readonly, closing)."}, []string{"state"}),
		upReconnects: prometheus.NewCounter(prometheus.CounterOpts{Name: "stormgate_upstream_reconnects_total",
			Help: "Provider connections (re)established after the first one of a slot."}),
		hbAnswered: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stormgate_heartbeats_answered_total",
			Help: "Heartbeat requests answered by Stormgate, by side (downstream = consumers, upstream = provider)."}, []string{"side"}),
		hbSent: prometheus.NewCounter(prometheus.CounterOpts{Name: "stormgate_upstream_heartbeats_sent_total",
			Help: "Heartbeats Stormgate sent to the provider on idle connections."}),
		requests: prometheus.NewCounter(prometheus.CounterOpts{Name: "stormgate_requests_total",
			Help: "Requests received from consumers (two-way and one-way)."}),
		oneway: prometheus.NewCounter(prometheus.CounterOpts{Name: "stormgate_oneway_requests_total",
			Help: "One-way requests forwarded to the provider."}),
		responses: prometheus.NewCounter(prometheus.CounterOpts{Name: "stormgate_responses_total",
			Help: "Provider responses routed back to consumers."}),
		localReplies: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stormgate_local_replies_total",
			Help: "Error responses Stormgate sent to consumers itself, by reason."}, []string{"reason"}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{Name: "stormgate_held_requests",
			Help: "Requests waiting in the hold queue for a usable provider connection."}),
		holdOutcome: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stormgate_hold_outcomes_total",
			Help: "Held requests by outcome (sent after hold, expired, rejected because the queue was full)."}, []string{"outcome"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "stormgate_request_duration_seconds",
			Help:    "Time from a request's arrival at Stormgate to its response leaving for the consumer.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}}),
		unknownIDs: prometheus.NewCounter(prometheus.CounterOpts{Name: "stormgate_upstream_unknown_ids_total",
			Help: "Provider responses whose id matched no pending request (dropped)."}),
		lateResponses: prometheus.NewCounter(prometheus.CounterOpts{Name: "stormgate_late_responses_total",
			Help: "Provider responses discarded because their consumer had gone or had already been answered."}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stormgate_frames_dropped_total",
			Help: "Frames consumed without forwarding, by kind."}, []string{"kind"}),
		readonly: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stormgate_readonly_events_total",
			Help: "READONLY/WRITEABLE events, by direction (received from provider, sent to consumers)."}, []string{"event", "direction"}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "stormgate_inflight_requests",
			Help: "Requests forwarded to the provider and not yet answered."}),
		upBatch: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "stormgate_upstream_write_batch_frames",
			Help:    "Frames per upstream flush (batching).",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512}}),
	}
	m.hbAnsweredDown = m.hbAnswered.WithLabelValues("downstream")
	m.hbAnsweredUp = m.hbAnswered.WithLabelValues("upstream")
	if reg != nil {
		reg.MustRegister(m.downConns, m.downClosed, m.upConns, m.upState, m.upReconnects, m.hbAnswered, m.hbSent,
			m.requests, m.oneway, m.responses, m.localReplies, m.held, m.holdOutcome, m.duration, m.unknownIDs,
			m.lateResponses, m.dropped, m.readonly, m.inflight, m.upBatch)
	}
	return m
}
