package proxy

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Stats is a point-in-time summary of the server's counters, for the demo,
// tests and logs. Prometheus remains the source of truth.
type Stats struct {
	DownstreamConns      int64
	UpstreamConns        int64
	HeartbeatsDownstream uint64 // consumer heartbeats answered by Stormgate
	HeartbeatsUpstream   uint64 // provider heartbeats answered by Stormgate
	HeartbeatsSent       uint64 // Stormgate's own heartbeats to the provider
	Requests             uint64
	Responses            uint64
	LocalReplies         map[string]uint64
	Closed               map[string]uint64
	Held                 int64
	InFlight             int64
	UnknownIDs           uint64
	LateResponses        uint64
	Buffered             int64 // bytes charged to limits.max_buffered_bytes
}

// Stats reads the current counters.
func (s *Server) Stats() Stats {
	m := s.m
	st, ut, inflight := s.connTotals()
	return Stats{
		DownstreamConns:      int64(sumValues(m.downConns[:])),
		UpstreamConns:        int64(sumValues(m.upConns[:])),
		HeartbeatsDownstream: st.heartbeats,
		HeartbeatsUpstream:   ut.heartbeats,
		HeartbeatsSent:       uint64(value(m.hbSent)),
		Requests:             st.requests,
		Responses:            ut.responses,
		LocalReplies:         counterValues(m.localReplies[:], replyReasonNames[:]),
		Closed:               closedValues(&m.downClosed),
		Held:                 int64(value(m.held)),
		InFlight:             inflight,
		Buffered:             s.budget.InUse(),
		UnknownIDs:           uint64(value(m.unknownIDs)),
		LateResponses:        uint64(value(m.lateResponses)),
	}
}

func value(c prometheus.Metric) float64 {
	var d dto.Metric
	if err := c.Write(&d); err != nil {
		return 0
	}
	switch {
	case d.Counter != nil:
		return d.Counter.GetValue()
	case d.Gauge != nil:
		return d.Gauge.GetValue()
	}
	return 0
}

// sumValues adds the values of a metric's children (nil ones skipped).
func sumValues[M prometheus.Metric](ms []M) float64 {
	var sum float64
	for _, c := range ms {
		if prometheus.Metric(c) != nil {
			sum += value(c)
		}
	}
	return sum
}

// closedValues is the closes by reason, every protocol together.
func closedValues(cs *[nCloseReasons][nProtos]prometheus.Counter) map[string]uint64 {
	out := make(map[string]uint64, nCloseReasons)
	for r := range cs {
		if v := uint64(sumValues(cs[r][:])); v > 0 {
			out[closeReasonNames[r]] = v
		}
	}
	return out
}

func counterValues(cs []prometheus.Counter, names []string) map[string]uint64 {
	out := make(map[string]uint64, len(cs))
	for i, c := range cs {
		if v := uint64(value(c)); v > 0 {
			out[names[i]] = v
		}
	}
	return out
}
