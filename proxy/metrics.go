package proxy

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stormgate/stormgate/proxy/h2"
)

// Every label value of the proxy's counters is created at zero when the server is
// built, so that an alert on increase(...) sees a pod's first incident, not only
// its second.

// closeReason labels stormgate_downstream_closed_total{reason}.
type closeReason uint8

const (
	closePeer closeReason = iota
	closeIdle
	closeBadMagic
	closeOversize
	closeBadLength
	closeTruncated
	closeFrameTimeout
	closeSlowReader
	closeDrain
	closeShutdown
	closeNoPort
	closeH2Error   // an HTTP/2 connection error (its GOAWAY was sent)
	closeNotServed // a protocol the provider does not speak (upstream.protocol)
	nCloseReasons
)

var closeReasonNames = [nCloseReasons]string{
	closePeer:         "peer_closed",
	closeIdle:         "idle_timeout",
	closeBadMagic:     "bad_magic",
	closeOversize:     "frame_too_large",
	closeBadLength:    "bad_length",
	closeTruncated:    "truncated_frame",
	closeFrameTimeout: "frame_read_timeout",
	closeSlowReader:   "slow_consumer",
	closeDrain:        "drain",
	closeShutdown:     "shutdown",
	closeNoPort:       "port_not_allowed",
	closeH2Error:      "http2_error",
	closeNotServed:    "protocol_not_served",
}

func (r closeReason) String() string { return closeReasonNames[r] }

// replyReason labels stormgate_local_replies_total{reason}: why Stormgate answered a
// request itself.
type replyReason uint8

const (
	replyUpstreamLost replyReason = iota
	replyHoldTimeout
	replyHoldFull
	replyNoUpstream
	replyInflight
	replyOverloaded
	replyMaxAge
	replyBadRequest
	replyBadResponse
	replyDrain
	replyDeadline
	nReplyReasons
)

var replyReasonNames = [nReplyReasons]string{
	replyUpstreamLost: "upstream_lost",
	replyHoldTimeout:  "hold_timeout",
	replyHoldFull:     "hold_full",
	replyNoUpstream:   "no_upstream",
	replyInflight:     "inflight_limit",
	replyOverloaded:   "overloaded",
	replyMaxAge:       "max_request_age",
	replyBadRequest:   "bad_request",
	replyBadResponse:  "bad_response",
	replyDrain:        "draining",
	replyDeadline:     "deadline",
}

func (r replyReason) String() string { return replyReasonNames[r] }

// holdOutcome labels stormgate_hold_outcomes_total{outcome}.
type holdOutcome uint8

const (
	holdSent holdOutcome = iota
	holdExpired
	holdRejectedFull
	holdConsumerGone
	holdReheld
	holdReheldUnseen
	holdReheldNotRun
	holdSentDraining
	holdDeadline
	nHoldOutcomes
)

var holdOutcomeNames = [nHoldOutcomes]string{
	holdSent:         "sent",
	holdExpired:      "expired",
	holdRejectedFull: "rejected_full",
	holdConsumerGone: "consumer_gone",
	holdReheld:       "reheld_unsent",
	holdReheldUnseen: "reheld_unseen",
	holdReheldNotRun: "reheld_not_executed",
	holdSentDraining: "sent_to_draining_provider",
	holdDeadline:     "deadline",
}

// dropKind labels stormgate_frames_dropped_total{kind}: frames consumed without
// forwarding.
type dropKind uint8

const (
	dropEventOneWay dropKind = iota
	dropConsumerResponse
	dropProviderEvent
	dropProviderOneWay
	dropProviderCallback
	dropOneWayNoUpstream
	dropOneWayOverloaded
	dropOversizeResponse
	nDropKinds
)

var dropKindNames = [nDropKinds]string{
	dropEventOneWay:      "event_oneway",
	dropConsumerResponse: "consumer_response",
	dropProviderEvent:    "provider_event",
	dropProviderOneWay:   "provider_oneway",
	dropProviderCallback: "provider_callback",
	dropOneWayNoUpstream: "oneway_no_upstream",
	dropOneWayOverloaded: "oneway_overloaded",
	dropOversizeResponse: "oversize_response",
}

type metrics struct {
	downConns     prometheus.Gauge
	downClosed    [nCloseReasons]prometheus.Counter
	upConns       prometheus.Gauge
	upConnected   prometheus.Gauge
	upState       *prometheus.GaugeVec
	upReconnects  prometheus.Counter
	upDialErrors  prometheus.Counter
	hbSent        prometheus.Counter
	localReplies  [nReplyReasons]prometheus.Counter
	held          prometheus.Gauge
	holdOutcome   [nHoldOutcomes]prometheus.Counter
	unknownIDs    prometheus.Counter
	lateResponses prometheus.Counter
	dropped       [nDropKinds]prometheus.Counter
	readonlyIn    [2]prometheus.Counter            // READONLY, WRITEABLE received from the provider
	readonlyOut   [2]prometheus.Counter            // sent to consumers
	hangs         prometheus.Counter               // providers that became hung (hung.go)
	h2Pings       prometheus.Counter               // consumer PINGs answered by Stormgate (h2session.go)
	h2Guards      [h2.NumGuards]prometheus.Counter // HTTP/2 attack guards tripped, by guard (h2session.go)
	bp            bpMetrics                        // backpressure (backpressure.go)
	life          lifeMetrics                      // set by New, which knows the codec's not-executed reasons
	collectors    []prometheus.Collector
}

func newMetrics() *metrics {
	m := &metrics{
		downConns: prometheus.NewGauge(prometheus.GaugeOpts{Name: "stormgate_downstream_connections",
			Help: "Consumer connections currently open."}),
		upConns: prometheus.NewGauge(prometheus.GaugeOpts{Name: "stormgate_upstream_connections",
			Help: "Usable (connected, writable) provider connections."}),
		upConnected: prometheus.NewGauge(prometheus.GaugeOpts{Name: "stormgate_upstream_connected",
			Help: "1 while at least one provider connection is usable, else 0."}),
		upState: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "stormgate_upstream_connection_state",
			Help: "Provider connections by state (ready, readonly, hung)."}, []string{"state"}),
		upReconnects: prometheus.NewCounter(prometheus.CounterOpts{Name: "stormgate_upstream_reconnects_total",
			Help: "Provider connections (re)established after the first one of a slot."}),
		upDialErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "stormgate_upstream_connect_errors_total",
			Help: "Failed attempts to connect to the provider."}),
		hbSent: prometheus.NewCounter(prometheus.CounterOpts{Name: "stormgate_upstream_heartbeats_sent_total",
			Help: "Heartbeats Stormgate sent to the provider on idle connections."}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{Name: "stormgate_held_requests",
			Help: "Requests waiting in the hold queue for a usable provider connection."}),
		unknownIDs: prometheus.NewCounter(prometheus.CounterOpts{Name: "stormgate_upstream_unknown_ids_total",
			Help: "Provider responses whose id matched no pending request (dropped)."}),
		lateResponses: prometheus.NewCounter(prometheus.CounterOpts{Name: "stormgate_late_responses_total",
			Help: "Answers (the provider's or Stormgate's) discarded because their consumer had gone."}),
	}
	downClosed := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stormgate_downstream_closed_total",
		Help: "Consumer connections closed, by reason."}, []string{"reason"})
	for i := range m.downClosed {
		m.downClosed[i] = downClosed.WithLabelValues(closeReasonNames[i])
	}
	localReplies := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stormgate_local_replies_total",
		Help: "Error responses Stormgate sent to consumers itself, by reason (deadline: a request that waited until " +
			"its consumer's own timeout was hold.deadline_margin away, never sent)."}, []string{"reason"})
	for i := range m.localReplies {
		m.localReplies[i] = localReplies.WithLabelValues(replyReasonNames[i])
	}
	holdOutcomes := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stormgate_hold_outcomes_total",
		Help: "Held requests by outcome: sent after the hold, expired, rejected because the queue was full, " +
			"consumer gone, re-held because their connection died before they were sent (reheld_unsent) or after " +
			"the kernel took them but provably before the provider read them (reheld_unseen), re-held because the " +
			"provider answered that it never ran them (reheld_not_executed), sent at the end of their hold to a " +
			"provider that is draining but still serving (sent_to_draining_provider), answered and never sent because " +
			"their consumer's own timeout would have passed first (deadline)."}, []string{"outcome"})
	for i := range m.holdOutcome {
		m.holdOutcome[i] = holdOutcomes.WithLabelValues(holdOutcomeNames[i])
	}
	dropped := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stormgate_frames_dropped_total",
		Help: "Frames consumed without forwarding, by kind."}, []string{"kind"})
	for i := range m.dropped {
		m.dropped[i] = dropped.WithLabelValues(dropKindNames[i])
	}
	ro := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stormgate_readonly_events_total",
		Help: "READONLY/WRITEABLE events, by direction (received from provider, sent to consumers)."}, []string{"event", "direction"})
	for i, ev := range []string{"readonly", "writeable"} {
		m.readonlyIn[i] = ro.WithLabelValues(ev, "received")
		m.readonlyOut[i] = ro.WithLabelValues(ev, "sent")
	}
	m.upState.WithLabelValues("ready")
	m.upState.WithLabelValues("readonly")
	m.upState.WithLabelValues("hung")
	m.hangs = prometheus.NewCounter(prometheus.CounterOpts{Name: "stormgate_provider_hangs_total",
		Help: "Times a provider became hung (keepalive.upstream_hung_timeout): no usable connection, one owing an " +
			"answer and silent although probed with a heartbeat."})
	m.h2Pings = prometheus.NewCounter(prometheus.CounterOpts{Name: "stormgate_http2_pings_answered_total",
		Help: "HTTP/2 PINGs from consumers that Stormgate answered itself (none reaches the provider)."})
	h2Guards := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stormgate_http2_guard_trips_total",
		Help: "HTTP/2 consumer behaviour Stormgate stopped, by reason (docs/design.md §14.3): rapid_reset, " +
			"continuation_flood, ping_flood, settings_flood, control_flood, empty_frames, outbound_queue, stream_id, " +
			"closed_stream (HEADERS) and preface end the consumer's connection with GOAWAY; header_list_size, " +
			"too_many_streams, zero_window_stall and closed_stream (DATA) reset one stream."}, []string{"reason"})
	for g := range m.h2Guards {
		m.h2Guards[g] = h2Guards.WithLabelValues(h2.Guard(g).String())
	}
	m.bp = newBPMetrics()
	m.collectors = append([]prometheus.Collector{m.downConns, downClosed, m.upConns, m.upConnected, m.upState, m.upReconnects,
		m.upDialErrors, m.hbSent, localReplies, m.held, holdOutcomes, m.unknownIDs, m.lateResponses, dropped, ro, m.hangs,
		m.h2Pings, h2Guards},
		m.bp.collectors()...)
	return m
}

// register exports the metrics, plus gauges read from the server at scrape time.
func (m *metrics) register(reg prometheus.Registerer, s *Server) {
	if reg == nil {
		return
	}
	reg.MustRegister(m.collectors...)
	reg.MustRegister(m.life.collectors...)
	reg.MustRegister(newConnCollector(s))                                               // requests, responses, heartbeats, in flight, durations, batches
	reg.MustRegister(newCallCollector(s), s.calls.access.lines, s.calls.access.dropped) // per method, access log
	reg.MustRegister(newHangMetrics(s)...)
	reg.MustRegister(newWaitingCollector(s))
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "stormgate_buffered_bytes",
			Help: "Bytes held because a peer is slow or absent (stalled sockets, hold queue, partial frames); " +
				"bounded by limits.max_buffered_bytes."}, func() float64 { return float64(s.budget.inUse()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "stormgate_buffered_bytes_limit",
			Help: "limits.max_buffered_bytes in force."}, func() float64 { return float64(s.budget.limit.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "stormgate_upstream_queued_bytes",
			Help: "Bytes waiting in Stormgate to be written to the provider, all connections."},
			func() float64 { return float64(s.upstreamQueued()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "stormgate_upstream_last_reachable_seconds",
			Help: "Seconds since a provider connection was last usable; 0 while one is."},
			func() float64 { return s.unreachableFor().Seconds() }),
	)
}
