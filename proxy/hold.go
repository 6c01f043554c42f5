package proxy

import (
	"sync"
	"sync/atomic"
	"time"
)

// HoldQueue keeps two-way requests while no provider connection is usable
// (provider restarting, READONLY with policy HOLD). It is bounded by count and
// bytes; entries leave in arrival order, either sent on a connection that came
// back or answered with an error when hold.timeout passes. All entries share one
// timeout, so the head is always the oldest and one timer suffices.
type HoldQueue struct {
	pool *Pool

	mu      sync.Mutex
	q       []holdEntry // FIFO: q[head:] are live
	head    int
	bytes   int
	timer   *time.Timer
	armedAt int64
	retry   atomic.Bool
}

type holdEntry struct {
	sess     *Session
	f        Frame
	frame    []byte
	arrived  int64
	deadline int64
}

func (h *HoldQueue) init(p *Pool) {
	h.pool = p
	h.timer = time.AfterFunc(time.Hour, h.expire)
	h.timer.Stop()
}

// Len is the number of held requests.
func (h *HoldQueue) Len() int {
	h.mu.Lock()
	n := len(h.q) - h.head
	h.mu.Unlock()
	return n
}

func (h *HoldQueue) push(s *Session, f Frame, frame []byte, now int64) {
	srv := h.pool.srv
	cfg := srv.cfg.Load()
	if cfg.HoldTimeout < 0 {
		s.replyError(f, FailNoUpstream, "stormgate: no usable provider connection", replyNoUpstream)
		return
	}
	h.mu.Lock()
	if srv.closed.Load() {
		// Close has run (or is running) failAll: nobody would answer an entry added now.
		// Checked under h.mu so that an entry is either answered here or by failAll.
		h.mu.Unlock()
		s.replyError(f, FailNoUpstream, "stormgate: shutting down", replyDrain)
		return
	}
	if len(h.q)-h.head >= cfg.HoldMaxRequests || h.bytes+len(frame) > cfg.HoldMaxBytes {
		h.mu.Unlock()
		srv.m.holdOutcome.WithLabelValues("rejected_full").Inc()
		s.replyError(f, FailNoUpstream, "stormgate: no usable provider connection and the hold queue is full", replyHoldFull)
		return
	}
	e := holdEntry{sess: s, f: f, frame: append([]byte(nil), frame...), arrived: now,
		deadline: now + int64(cfg.HoldTimeout)}
	h.q = append(h.q, e)
	h.bytes += len(frame)
	s.inflight.Add(1)
	if len(h.q)-h.head == 1 {
		h.armLocked(e.deadline)
	}
	h.mu.Unlock()
	srv.m.held.Inc()
	srv.m.inflight.Inc()
	// A connection may have become usable between the caller's pick and this push.
	if h.pool.usable() > 0 {
		h.dispatch()
	}
}

func (h *HoldQueue) armLocked(deadline int64) {
	d := time.Duration(deadline - time.Now().UnixNano())
	if d < 0 {
		d = 0
	}
	h.armedAt = deadline
	h.timer.Reset(d)
}

func (h *HoldQueue) popLocked() holdEntry {
	e := h.q[h.head]
	h.q[h.head] = holdEntry{}
	h.head++
	h.bytes -= len(e.frame)
	if h.head == len(h.q) {
		h.q, h.head = h.q[:0], 0
	} else if h.head > 1024 && h.head*2 > len(h.q) {
		n := copy(h.q, h.q[h.head:])
		h.q, h.head = h.q[:n], 0
	}
	return e
}

// dispatch sends held requests in arrival order while a connection takes them.
func (h *HoldQueue) dispatch() {
	srv := h.pool.srv
	h.mu.Lock()
	defer h.mu.Unlock()
	for h.head < len(h.q) {
		e := h.q[h.head]
		if e.sess.closing.Load() {
			h.popLocked()
			e.sess.inflight.Add(-1)
			srv.m.held.Dec()
			srv.m.inflight.Dec()
			srv.m.holdOutcome.WithLabelValues("consumer_gone").Inc()
			continue
		}
		if h.pool.warming() && !h.pool.warmAllow() {
			h.retryLater()
			return
		}
		uc := h.pool.pick()
		if uc == nil {
			return
		}
		if !uc.send(e.sess, e.f, e.frame, e.arrived) {
			continue // that connection just closed; pick again
		}
		h.popLocked()
		// send counted the request again; the hold's count moves to the pending entry.
		e.sess.inflight.Add(-1)
		srv.m.inflight.Dec()
		srv.m.held.Dec()
		srv.m.holdOutcome.WithLabelValues("sent").Inc()
	}
	h.timer.Stop()
}

// retryLater re-runs dispatch shortly while a warm-up ramp holds requests back.
func (h *HoldQueue) retryLater() {
	if h.retry.CompareAndSwap(false, true) {
		time.AfterFunc(5*time.Millisecond, func() {
			h.retry.Store(false)
			h.dispatch()
		})
	}
}

// expire answers every held request whose deadline has passed.
func (h *HoldQueue) expire() {
	srv := h.pool.srv
	now := time.Now().UnixNano()
	h.mu.Lock()
	defer h.mu.Unlock()
	for h.head < len(h.q) && h.q[h.head].deadline <= now {
		e := h.popLocked()
		// Count before answering: whoever sees the reply must also see the counter.
		srv.m.holdOutcome.WithLabelValues("expired").Inc()
		h.answerLocked(e, "stormgate: no usable provider connection within hold.timeout", replyHoldTimeout)
	}
	if h.head < len(h.q) {
		h.armLocked(h.q[h.head].deadline)
	}
}

func (h *HoldQueue) answerLocked(e holdEntry, msg, reason string) {
	srv := h.pool.srv
	e.sess.inflight.Add(-1)
	srv.m.held.Dec()
	srv.m.inflight.Dec()
	if !e.sess.closing.Load() {
		e.sess.replyError(e.f, FailNoUpstream, msg, reason)
	}
}

// failAll answers every held request (shutdown).
func (h *HoldQueue) failAll(msg string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.timer.Stop()
	for h.head < len(h.q) {
		h.answerLocked(h.popLocked(), msg, replyDrain)
	}
}
