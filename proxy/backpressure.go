package proxy

import (
	"sync"
	"sync/atomic"

	"github.com/cloudwego/netpoll"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// Per-consumer backpressure (isolation, DESIGN §2). Each consumer counts the bytes of
// its requests that wait in Stormgate for the provider: in the connections' send
// queues and in the hold queue (waiting). What Stormgate does past a bound depends on
// why they wait:
//
//	| the provider                   | past the bound                                         | bound
//	|--------------------------------|--------------------------------------------------------|---------------------------------
//	| serves (a connection is usable)| Stormgate stops reading that consumer (netpoll's       | its share: limits.max_queued_
//	| but not as fast as it is fed   | ReadPauser) until half of it has drained: its socket   | bytes_per_consumer, or less
//	|                                | fills and TCP slows that consumer alone                | (below); resumed at half
//	| is away (restarting, hung)     | its new requests are answered at once (100, overloaded)| hold.max_bytes_per_consumer
//	|                                | instead of held                                        |
//
// A consumer's share while the provider serves is limits.max_queued_bytes_per_consumer,
// but never more than half of hold.max_bytes divided among the consumers that have
// bytes waiting (at least minShare): large requests wait in the hold queue's bulk lane,
// and twenty bulk senders at 4 MiB each would otherwise fill a 64 MiB hold queue, whose
// overflow is answered with errors (hold_full) where TCP should slow them down.
//
// Reading is never paused while the provider is away: a request that waited in the
// consumer's socket during an outage would be read, with a fresh arrival time, after its
// consumer's own timeout, and sent (sendBy counts from when Stormgate reads a request).
// A consumer paused while the provider served and that is still over the bound when the
// provider goes away stays paused until its queued requests have left (sent, answered at
// their deadlines, or re-held and dispatched).

// consumerWait is a session's part: its waiting bytes and whether reading is paused.
type consumerWait struct {
	waiting atomic.Int64
	paused  atomic.Bool // changes under mu only; read anywhere as a hint
	mu      sync.Mutex  // serializes pausing and resuming
}

// minShare is the least a consumer's share of the waiting room gets: one large request
// (upstream.large_request_bytes' default) and a little.
const minShare = 128 << 10

// addWaiting counts n bytes of s's requests that start to wait for the provider.
func (s *session) addWaiting(n int) {
	if s != nil {
		s.countWaiter(s.wait.waiting.Add(int64(n)), int64(n))
	}
}

// countWaiter keeps Server.waiters, the consumers with bytes waiting, from each change
// of a consumer's waiting bytes by d to w: the atomic adds order the changes, so each
// crossing of zero is seen by exactly one of them.
func (s *session) countWaiter(w, d int64) {
	switch was := w - d; {
	case was <= 0 && w > 0:
		s.srv.waiters.Add(1)
	case was > 0 && w <= 0:
		s.srv.waiters.Add(-1)
	}
}

// share is the most bytes s may have waiting before it is paused (0: never paused).
func (s *session) share(cfg *Config) int64 {
	lim := int64(cfg.MaxQueuedBytesPerConsumer)
	if lim <= 0 || cfg.HoldMaxBytes <= 0 {
		return lim
	}
	fair := int64(cfg.HoldMaxBytes) / 2 / max(s.srv.waiters.Load(), 1)
	return min(lim, max(fair, minShare))
}

// doneWaiting counts n bytes that stopped waiting, and resumes reading a paused
// consumer that has drained to half its bound. Called under the queues' locks, so the
// resume runs on a goroutine of its own (ResumeRead may run the consumer's handler,
// which takes those locks).
func (s *session) doneWaiting(n int) {
	if s == nil {
		return
	}
	w := s.wait.waiting.Add(-int64(n))
	s.countWaiter(w, -int64(n))
	if s.wait.paused.Load() && w <= s.resumeAt() && !s.closing.Load() {
		s.srv.spawn(s.resumeRead)
	}
}

// resumeAt is the waiting bytes at or under which a paused consumer is read again.
func (s *session) resumeAt() int64 { return s.share(s.srv.cfg.Load()) / 2 }

// shouldPause reports whether the handler should stop reading s now: over its share
// while its provider serves.
func (s *session) shouldPause(cfg *Config) bool {
	lim := s.share(cfg)
	return lim > 0 && s.wait.waiting.Load() > lim && s.pool.usable() > 0
}

// pauseRead stops reading s (from its handler); false when it was not paused (the
// bound cleared meanwhile, or the connection does not support it).
func (s *session) pauseRead() bool {
	rp, ok := s.conn.(netpoll.ReadPauser)
	if !ok {
		return false
	}
	w := &s.wait
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.paused.Load() || w.waiting.Load() <= s.resumeAt() {
		return w.paused.Load()
	}
	if err := rp.PauseRead(); err != nil {
		s.srv.log.Warn("cannot pause reading a consumer", zap.Stringer("peer", s.remote), zap.Error(err))
		return false
	}
	w.paused.Store(true)
	// A doneWaiting that drained it before paused was set did not see the pause: undo it
	// (inside the handler, ResumeRead does not run the handler again; netpoll goes on
	// with what is buffered once this call returns).
	if w.waiting.Load() <= s.resumeAt() {
		w.paused.Store(false)
		_ = rp.ResumeRead()
		return false
	}
	s.srv.m.bp.paused.Inc()
	s.srv.m.bp.pauses.Inc()
	return true
}

// resumeRead reads s again once it has drained; ResumeRead then runs its handler for
// what is buffered, on this goroutine.
func (s *session) resumeRead() {
	w := &s.wait
	w.mu.Lock()
	if !w.paused.Load() || w.waiting.Load() > s.resumeAt() {
		w.mu.Unlock()
		return
	}
	w.paused.Store(false)
	s.srv.m.bp.paused.Dec()
	w.mu.Unlock()
	// No handler runs while reading is paused, so nothing pauses s between the unlock
	// and this call.
	if rp, ok := s.conn.(netpoll.ReadPauser); ok {
		if err := rp.ResumeRead(); err != nil && !s.closing.Load() {
			s.srv.log.Warn("cannot resume reading a consumer", zap.Stringer("peer", s.remote), zap.Error(err))
		}
	}
}

// forgetPause is the end of a paused consumer's connection (onClosed).
func (s *session) forgetPause() {
	w := &s.wait
	w.mu.Lock()
	if w.paused.Swap(false) {
		s.srv.m.bp.paused.Dec()
	}
	w.mu.Unlock()
}

// bpMetrics are backpressure's metrics.
type bpMetrics struct {
	paused    prometheus.Gauge
	pauses    prometheus.Counter
	queueWait prometheus.Histogram
}

func newBPMetrics() bpMetrics {
	return bpMetrics{
		paused: prometheus.NewGauge(prometheus.GaugeOpts{Name: "stormgate_consumers_paused",
			Help: "Consumers Stormgate is not reading now: over limits.max_queued_bytes_per_consumer of requests " +
				"waiting for a provider that serves but not as fast (TCP slows them alone)."}),
		pauses: prometheus.NewCounter(prometheus.CounterOpts{Name: "stormgate_consumer_pauses_total",
			Help: "Times Stormgate stopped reading a consumer for backpressure."}),
		queueWait: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "stormgate_send_queue_wait_seconds",
			Help: "Time requests waited in a provider connection's send queue for their turn (the writer busy or " +
				"stalled), from when they were queued to when they were handed to the writer.",
			Buckets: latencyBounds}),
	}
}

func (m *bpMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.paused, m.pauses, m.queueWait}
}

// waitingBytesBounds are stormgate_consumer_waiting_bytes' buckets.
var waitingBytesBounds = []float64{1 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20}

// waitingCollector is the distribution, over the consumers with requests waiting in
// Stormgate, of how many bytes each has waiting (the top offenders are its upper
// buckets), computed when Prometheus scrapes.
type waitingCollector struct {
	s    *Server
	desc *prometheus.Desc
}

func newWaitingCollector(s *Server) *waitingCollector {
	return &waitingCollector{s: s, desc: prometheus.NewDesc("stormgate_consumer_waiting_bytes",
		"Consumers with requests waiting in Stormgate for the provider (send queues, hold queue), by bytes waiting; "+
			"the upper buckets are the consumers being slowed down or refused.", nil, nil)}
}

func (c *waitingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *waitingCollector) Collect(ch chan<- prometheus.Metric) {
	counts := make([]uint64, len(waitingBytesBounds))
	var n uint64
	var sum float64
	c.s.sessions.each(func(ss *session) {
		w := ss.wait.waiting.Load()
		if w <= 0 {
			return
		}
		n++
		sum += float64(w)
		for i, b := range waitingBytesBounds {
			if float64(w) <= b {
				counts[i]++
			}
		}
	})
	buckets := make(map[float64]uint64, len(waitingBytesBounds))
	for i, b := range waitingBytesBounds {
		buckets[b] = counts[i]
	}
	ch <- prometheus.MustNewConstHistogram(c.desc, n, sum, buckets)
}
