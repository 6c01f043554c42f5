package proxy

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Every label value of the proxy's counters is created at zero when the server is
// built, so that an alert on increase(...) sees a pod's first incident, not only
// its second.

// CloseReason labels stormgate_downstream_closed_total{reason}.
type CloseReason uint8

const (
	ClosePeer CloseReason = iota
	CloseIdle
	CloseBadMagic
	CloseOversize
	CloseBadLength
	CloseTruncated
	CloseFrameTimeout
	CloseSlowReader
	CloseDrain
	CloseShutdown
	CloseNoPort
	CloseH2Error   // an HTTP/2 connection error (its GOAWAY was sent)
	CloseNotServed // a protocol the provider does not speak (upstream.protocol)
	nCloseReasons
)

var closeReasonNames = [nCloseReasons]string{
	ClosePeer:         "peer_closed",
	CloseIdle:         "idle_timeout",
	CloseBadMagic:     "bad_magic",
	CloseOversize:     "frame_too_large",
	CloseBadLength:    "bad_length",
	CloseTruncated:    "truncated_frame",
	CloseFrameTimeout: "frame_read_timeout",
	CloseSlowReader:   "slow_consumer",
	CloseDrain:        "drain",
	CloseShutdown:     "shutdown",
	CloseNoPort:       "port_not_allowed",
	CloseH2Error:      "http2_error",
	CloseNotServed:    "protocol_not_served",
}

func (r CloseReason) String() string { return closeReasonNames[r] }

// ReplyReason labels stormgate_local_replies_total{reason}: why Stormgate answered a
// request itself.
type ReplyReason uint8

const (
	ReplyUpstreamLost ReplyReason = iota
	ReplyHoldTimeout
	ReplyHoldFull
	ReplyNoUpstream
	ReplyInflight
	ReplyOverloaded
	ReplyMaxAge
	ReplyBadRequest
	ReplyBadResponse
	ReplyDrain
	ReplyDeadline
	ReplyUpgrade
	nReplyReasons
)

var replyReasonNames = [nReplyReasons]string{
	ReplyUpstreamLost: "upstream_lost",
	ReplyHoldTimeout:  "hold_timeout",
	ReplyHoldFull:     "hold_full",
	ReplyNoUpstream:   "no_upstream",
	ReplyInflight:     "inflight_limit",
	ReplyOverloaded:   "overloaded",
	ReplyMaxAge:       "max_request_age",
	ReplyBadRequest:   "bad_request",
	ReplyBadResponse:  "bad_response",
	ReplyDrain:        "draining",
	ReplyDeadline:     "deadline",
	ReplyUpgrade:      "upgrade",
}

func (r ReplyReason) String() string { return replyReasonNames[r] }

// HoldOutcome labels stormgate_hold_outcomes_total{outcome}.
type HoldOutcome uint8

const (
	HoldSent HoldOutcome = iota
	HoldExpired
	HoldRejectedFull
	HoldConsumerGone
	HoldReheld
	HoldReheldUnseen
	HoldReheldNotRun
	HoldSentDraining
	HoldDeadline
	HoldReheldRefused
	nHoldOutcomes
)

// String is o's outcome label (stormgate_hold_outcomes_total{outcome}).
func (o HoldOutcome) String() string { return holdOutcomeNames[o] }

var holdOutcomeNames = [nHoldOutcomes]string{
	HoldSent:          "sent",
	HoldExpired:       "expired",
	HoldRejectedFull:  "rejected_full",
	HoldConsumerGone:  "consumer_gone",
	HoldReheld:        "reheld_unsent",
	HoldReheldUnseen:  "reheld_unseen",
	HoldReheldNotRun:  "reheld_not_executed",
	HoldSentDraining:  "sent_to_draining_provider",
	HoldDeadline:      "deadline",
	HoldReheldRefused: "reheld_refused",
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

// protoNames labels {protocol} of the consumer and provider connection series, indexed by a
// connection's protocol (session.proto, sniff.go). unknown is a consumer whose first bytes have
// not come yet, which happens only when the provider speaks Triple (ServeFD marks every other
// consumer Dubbo at once); provider connections are dubbo or triple, never unknown.
var protoNames = [nProtos]string{protoUnknown: "unknown", protoDubbo: "dubbo", protoH2: "triple"}

type metrics struct {
	downConns     [nProtos]prometheus.Gauge
	downClosed    [nCloseReasons][nProtos]prometheus.Counter
	upConns       [nProtos]prometheus.Gauge // [protoUnknown] is nil
	upConnected   prometheus.Gauge
	upState       *prometheus.GaugeVec
	upReconnects  [nProtos]prometheus.Counter // [protoUnknown] is nil
	upDialErrors  [nProtos]prometheus.Counter // [protoUnknown] is nil
	hbSent        prometheus.Counter
	localReplies  [nReplyReasons]prometheus.Counter
	held          prometheus.Gauge
	holdOutcome   [nHoldOutcomes]prometheus.Counter
	unknownIDs    prometheus.Counter
	lateResponses prometheus.Counter
	dropped       [nDropKinds]prometheus.Counter
	readonlyIn    [2]prometheus.Counter // READONLY, WRITEABLE received from the provider
	readonlyOut   [2]prometheus.Counter // sent to consumers
	hangs         prometheus.Counter    // providers that became hung (hung.go)
	bp            bpMetrics             // backpressure (backpressure.go)
	life          lifeMetrics           // set by New, which knows the codec's not-executed reasons
	collectors    []prometheus.Collector
}

func newMetrics() *metrics {
	m := &metrics{
		upConnected: prometheus.NewGauge(prometheus.GaugeOpts{Name: "stormgate_upstream_connected",
			Help: "1 while at least one provider connection is usable, else 0."}),
		upState: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "stormgate_upstream_connection_state",
			Help: "Provider connections by state (ready, readonly, hung) and protocol."}, []string{"state", "protocol"}),
		hbSent: prometheus.NewCounter(prometheus.CounterOpts{Name: "stormgate_upstream_heartbeats_sent_total",
			Help: "Heartbeats Stormgate sent to the provider on idle connections."}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{Name: "stormgate_held_requests",
			Help: "Requests waiting in the hold queue for a usable provider connection (Triple and gRPC: for a provider stream)."}),
		unknownIDs: prometheus.NewCounter(prometheus.CounterOpts{Name: "stormgate_upstream_unknown_ids_total",
			Help: "Provider responses whose id matched no pending request (dropped)."}),
		lateResponses: prometheus.NewCounter(prometheus.CounterOpts{Name: "stormgate_late_responses_total",
			Help: "Answers (the provider's or Stormgate's) discarded because their consumer had gone."}),
	}
	downConns := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "stormgate_downstream_connections",
		Help: "Consumer connections currently open, by protocol (unknown: no byte read yet)."}, []string{"protocol"})
	downClosed := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stormgate_downstream_closed_total",
		Help: "Consumer connections closed, by reason and protocol."}, []string{"reason", "protocol"})
	upConns := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "stormgate_upstream_connections",
		Help: "Usable (connected, writable) provider connections, by protocol."}, []string{"protocol"})
	upReconnects := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stormgate_upstream_reconnects_total",
		Help: "Provider connections (re)established after the first one of a slot, by protocol."}, []string{"protocol"})
	upDialErrors := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stormgate_upstream_connect_errors_total",
		Help: "Failed attempts to connect to the provider, by protocol."}, []string{"protocol"})
	for p, name := range protoNames {
		m.downConns[p] = downConns.WithLabelValues(name)
		for r := range m.downClosed {
			m.downClosed[r][p] = downClosed.WithLabelValues(closeReasonNames[r], name)
		}
		if p == int(protoUnknown) {
			continue
		}
		m.upConns[p] = upConns.WithLabelValues(name)
		m.upReconnects[p] = upReconnects.WithLabelValues(name)
		m.upDialErrors[p] = upDialErrors.WithLabelValues(name)
		for _, st := range []string{"ready", "readonly", "hung"} {
			m.upState.WithLabelValues(st, name)
		}
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
			"provider answered that it never ran them (reheld_not_executed), re-held because an HTTP/2 provider " +
			"refused their stream (REFUSED_STREAM, or above its GOAWAY's last stream id: reheld_refused), sent at the end of their hold to a " +
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
	m.hangs = prometheus.NewCounter(prometheus.CounterOpts{Name: "stormgate_provider_hangs_total",
		Help: "Times a provider became hung (keepalive.upstream_hung_timeout): no usable connection, one owing an " +
			"answer and silent although probed with a heartbeat."})
	m.bp = newBPMetrics()
	m.collectors = append([]prometheus.Collector{downConns, downClosed, upConns, m.upConnected, m.upState, upReconnects,
		upDialErrors, m.hbSent, localReplies, m.held, holdOutcomes, m.unknownIDs, m.lateResponses, dropped, ro, m.hangs},
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
				"bounded by limits.max_buffered_bytes."}, func() float64 { return float64(s.budget.InUse()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "stormgate_buffered_bytes_limit",
			Help: "limits.max_buffered_bytes in force."}, func() float64 { return float64(s.budget.Limit()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "stormgate_upstream_queued_bytes",
			Help: "Bytes waiting in Stormgate to be written to the provider, all connections."},
			func() float64 { return float64(s.upstreamQueued()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "stormgate_upstream_last_reachable_seconds",
			Help: "Seconds since a provider connection was last usable; 0 while one is."},
			func() float64 { return s.unreachableFor().Seconds() }),
	)
}
