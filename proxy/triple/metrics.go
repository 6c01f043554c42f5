package triple

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stormgate/stormgate/proxy/h2"
)

// The HTTP/2 series. The codec counts (h2.Counters, per connection); each connection's owner moves what
// changed into these counters when it writes the Conn's Output (h2Meter.sync), which it does after
// every frame read and every reset or GOAWAY it makes: a counter is up to date before the peer can see
// the frame it counts. Every child is resolved here, once: the per-frame path only adds.

// h2Peer labels {peer}: which side of Stormgate the HTTP/2 connection faces.
const (
	h2Consumer = iota
	h2Provider
	nH2Peers
)

var h2PeerNames = [nH2Peers]string{h2Consumer: "consumer", h2Provider: "provider"}

// Directions of {direction}.
const (
	h2Received = iota
	h2Sent
	nH2Directions
)

var h2DirectionNames = [nH2Directions]string{h2Received: "received", h2Sent: "sent"}

type h2Metrics struct {
	pings   prometheus.Counter // consumer PINGs answered by Stormgate
	streams prometheus.Counter // streams consumers opened
	resets  [nH2Peers][nH2Directions][h2.NumErrCodeClasses]prometheus.Counter
	goAways [nH2Peers][nH2Directions]prometheus.Counter
	guards  [h2.NumGuards]prometheus.Counter // consumer behaviour the codec's guards stopped
}

func newH2Metrics() (h2Metrics, []prometheus.Collector) {
	m := h2Metrics{
		pings: prometheus.NewCounter(prometheus.CounterOpts{Name: "stormgate_http2_pings_answered_total",
			Help: "HTTP/2 PINGs from consumers that Stormgate answered itself (none reaches the provider)."}),
		streams: prometheus.NewCounter(prometheus.CounterOpts{Name: "stormgate_http2_streams_opened_total",
			Help: "HTTP/2 streams (Triple and gRPC calls) consumers opened, including those Stormgate refused."}),
	}
	resets := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stormgate_http2_resets_total",
		Help: "HTTP/2 RST_STREAM frames by peer (consumer, provider), direction (received from it, sent to it) and " +
			"error code (RFC 9113's names; OTHER for any other code)."}, []string{"peer", "direction", "code"})
	goAways := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stormgate_http2_goaways_total",
		Help: "HTTP/2 GOAWAY frames by peer (consumer, provider) and direction (received from it, sent to it)."},
		[]string{"peer", "direction"})
	for p := range nH2Peers {
		for d := range nH2Directions {
			m.goAways[p][d] = goAways.WithLabelValues(h2PeerNames[p], h2DirectionNames[d])
			for c := range h2.NumErrCodeClasses {
				m.resets[p][d][c] = resets.WithLabelValues(h2PeerNames[p], h2DirectionNames[d], h2.ErrCodeClassName(c))
			}
		}
	}
	guards := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stormgate_http2_guard_trips_total",
		Help: "HTTP/2 consumer behaviour Stormgate stopped, by reason (docs/design.md §14.3): rapid_reset, " +
			"continuation_flood, ping_flood, settings_flood, control_flood, empty_frames, outbound_queue, stream_id, " +
			"closed_stream (HEADERS) and preface end the consumer's connection with GOAWAY; header_list_size, " +
			"too_many_streams, zero_window_stall and closed_stream (DATA) reset one stream."}, []string{"reason"})
	for g := range m.guards {
		m.guards[g] = guards.WithLabelValues(h2.Guard(g).String())
	}
	return m, []prometheus.Collector{m.pings, m.streams, resets, goAways, guards}
}

// h2Meter is what one HTTP/2 connection has moved into the metrics so far. Its owner's lock guards it.
type h2Meter struct {
	pings, streams uint64
	resets         [nH2Directions]uint64
	resetsByCode   [nH2Directions][h2.NumErrCodeClasses]uint64
	goAways        [nH2Directions]uint64
	guards         [h2.NumGuards]uint64
}

// sync adds what c counted since the last call to the metrics of peer. It never allocates.
func (hm *h2Meter) sync(m *h2Metrics, peer int, c *h2.Counters) {
	if peer == h2Consumer {
		if d := c.PingsAnswered - hm.pings; d > 0 {
			hm.pings = c.PingsAnswered
			m.pings.Add(float64(d))
		}
		if d := c.StreamsOpened - hm.streams; d > 0 {
			hm.streams = c.StreamsOpened
			m.streams.Add(float64(d))
		}
		for g, n := range c.Guards {
			if d := n - hm.guards[g]; d > 0 {
				hm.guards[g] = n
				m.guards[g].Add(float64(d))
			}
		}
	}
	if c.ResetsReceived != hm.resets[h2Received] {
		hm.resets[h2Received] = c.ResetsReceived
		hm.syncCodes(m, peer, h2Received, &c.ResetsReceivedByCode)
	}
	if c.ResetsSent != hm.resets[h2Sent] {
		hm.resets[h2Sent] = c.ResetsSent
		hm.syncCodes(m, peer, h2Sent, &c.ResetsSentByCode)
	}
	if d := c.GoAwaysReceived - hm.goAways[h2Received]; d > 0 {
		hm.goAways[h2Received] = c.GoAwaysReceived
		m.goAways[peer][h2Received].Add(float64(d))
	}
	if d := c.GoAwaysSent - hm.goAways[h2Sent]; d > 0 {
		hm.goAways[h2Sent] = c.GoAwaysSent
		m.goAways[peer][h2Sent].Add(float64(d))
	}
}

func (hm *h2Meter) syncCodes(m *h2Metrics, peer, dir int, byCode *[h2.NumErrCodeClasses]uint64) {
	for i, n := range byCode {
		if d := n - hm.resetsByCode[dir][i]; d > 0 {
			hm.resetsByCode[dir][i] = n
			m.resets[peer][dir][i].Add(float64(d))
		}
	}
}
