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
}

// Stats reads the current counters.
func (s *Server) Stats() Stats {
	m := s.m
	return Stats{
		DownstreamConns:      int64(value(m.downConns)),
		UpstreamConns:        int64(value(m.upConns)),
		HeartbeatsDownstream: uint64(value(m.hbAnsweredDown)),
		HeartbeatsUpstream:   uint64(value(m.hbAnsweredUp)),
		HeartbeatsSent:       uint64(value(m.hbSent)),
		Requests:             uint64(value(m.requests)),
		Responses:            uint64(value(m.responses)),
		LocalReplies:         vecValues(m.localReplies),
		Closed:               vecValues(m.downClosed),
		Held:                 int64(value(m.held)),
		InFlight:             int64(value(m.inflight)),
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

func vecValues(v *prometheus.CounterVec) map[string]uint64 {
	out := map[string]uint64{}
	ch := make(chan prometheus.Metric, 64)
	go func() { v.Collect(ch); close(ch) }()
	for mt := range ch {
		var d dto.Metric
		if mt.Write(&d) != nil {
			continue
		}
		key := ""
		for _, l := range d.Label {
			key = l.GetValue()
		}
		out[key] = uint64(d.Counter.GetValue())
	}
	return out
}
