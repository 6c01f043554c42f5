package proxy

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stormgate/stormgate/keepalive"
)

// holdQueue keeps two-way requests while no provider connection takes them
// (provider restarting, READONLY with policy HOLD, every connection's queue full,
// warm-up). It is bounded by count, bytes and the process budget; entries leave in
// arrival order, either sent on a connection that came back or refused when
// hold.timeout passes. Requests that were on a connection when it died but never
// left Stormgate come back here (rehold) in arrival order, with the deadline their
// arrival gives them.
//
// Concurrency: mu guards the queue; dispatch calls upConn.send with mu held (lock
// order holdQueue.mu -> upConn.mu -> writer.mu). The expiry and warm-up retry
// timers run on the wheel goroutine.
type holdQueue struct {
	pool *pool

	mu    sync.Mutex
	q     []held // q[head:] are live, in arrival order
	head  int
	bytes int
	n     atomic.Int32 // len, readable without mu (the forward fast path)
	timer keepalive.Timer
	retry keepalive.Timer
}

type held struct {
	request
	frame    []byte // a copy: the consumer's input buffer is released after onRequest
	deadline int64
}

func (h *holdQueue) init(p *pool) {
	h.pool = p
	h.timer.Init(h.expire)
	h.retry.Init(h.dispatch)
}

// len is the number of held requests.
func (h *holdQueue) len() int { return int(h.n.Load()) }

// push holds an accepted request, or refuses it when holding is off or full.
func (h *holdQueue) push(r request, frame []byte) {
	srv := h.pool.srv
	cfg := srv.cfg.Load()
	if cfg.HoldTimeout <= 0 {
		srv.refuse(r, FailNoUpstream, "stormgate: no usable provider connection (hold.timeout is 0)", replyNoUpstream)
		return
	}
	h.mu.Lock()
	if srv.closed.Load() {
		// Close has run (or is running) failAll: nobody would answer an entry added now.
		// Checked under mu so that an entry is either answered here or by failAll.
		h.mu.Unlock()
		srv.refuse(r, FailNoUpstream, "stormgate: shutting down", replyDrain)
		return
	}
	if len(h.q)-h.head >= cfg.HoldMaxRequests || h.bytes+len(frame) > cfg.HoldMaxBytes || !srv.budget.tryReserve(len(frame)) {
		h.mu.Unlock()
		srv.m.holdOutcome[holdRejectedFull].Inc()
		why, msg := FailNoUpstream, "stormgate: no usable provider connection and the hold queue is full"
		if h.pool.usable() > 0 {
			why, msg = FailOverloaded, "stormgate: the provider is not keeping up (every connection's queue and the hold queue are full)"
		}
		srv.refuse(r, why, msg, replyHoldFull)
		return
	}
	r.call = srv.noteHeld(r.call, false)
	e := held{request: r, frame: append([]byte(nil), frame...), deadline: r.arrived + int64(cfg.HoldTimeout)}
	h.q = append(h.q, e)
	h.addLocked(e)
	if len(h.q)-h.head == 1 {
		h.armLocked(e.deadline)
	}
	h.mu.Unlock()
	// A connection may have become usable between the caller's pick and this push.
	if h.pool.usable() > 0 {
		h.dispatch()
	}
}

// rehold puts back requests whose connection died before they left Stormgate. They
// keep their arrival time (and so their deadline) and their place in arrival order.
// Their bytes were reserved by the writer they came from; rehold charges them anew.
func (h *holdQueue) rehold(es []held, why holdOutcome) {
	if len(es) == 0 {
		return
	}
	srv := h.pool.srv
	cfg := srv.cfg.Load()
	slices.SortFunc(es, func(a, b held) int { return int(a.arrived - b.arrived) })
	h.mu.Lock()
	if srv.closed.Load() { // see push
		h.mu.Unlock()
		for _, e := range es {
			srv.refuse(e.request, FailNoUpstream, "stormgate: shutting down", replyDrain)
		}
		return
	}
	// Not bounded by hold.max_requests/max_bytes: these were accepted already, and a
	// bound hit now would fail requests that did nothing wrong.
	live := h.q[h.head:]
	merged := make([]held, 0, len(live)+len(es))
	for _, e := range es {
		for len(live) > 0 && live[0].arrived <= e.arrived {
			merged = append(merged, live[0])
			live = live[1:]
		}
		e.deadline = e.arrived + int64(cfg.HoldTimeout)
		e.call = srv.noteHeld(e.call, true)
		srv.budget.force(len(e.frame))
		merged = append(merged, e)
		h.addLocked(e)
		srv.m.holdOutcome[why].Inc()
	}
	merged = append(merged, live...)
	clear(h.q)
	h.q, h.head = merged, 0
	h.armLocked(h.q[0].deadline)
	h.mu.Unlock()
	if h.pool.usable() > 0 {
		h.dispatch()
	}
}

func (h *holdQueue) addLocked(e held) {
	h.bytes += len(e.frame)
	h.n.Add(1)
	h.pool.srv.m.held.Inc()
}

func (h *holdQueue) armLocked(deadline int64) {
	h.pool.srv.wheel.ScheduleAt(&h.timer, time.Unix(0, deadline))
}

func (h *holdQueue) popLocked() held {
	e := h.q[h.head]
	h.q[h.head] = held{}
	h.head++
	h.bytes -= len(e.frame)
	h.n.Add(-1)
	srv := h.pool.srv
	srv.m.held.Dec()
	srv.budget.release(len(e.frame))
	if h.head == len(h.q) {
		h.q, h.head = h.q[:0], 0
	} else if h.head > 1024 && h.head*2 > len(h.q) {
		n := copy(h.q, h.q[h.head:])
		clear(h.q[n:])
		h.q, h.head = h.q[:n], 0
	}
	return e
}

// dispatch sends held requests in arrival order while a connection takes them.
func (h *holdQueue) dispatch() {
	srv := h.pool.srv
	h.mu.Lock()
	defer h.mu.Unlock()
	for h.head < len(h.q) {
		e := h.q[h.head]
		if e.sess.closing.Load() {
			h.popLocked()
			srv.m.holdOutcome[holdConsumerGone].Inc()
			srv.settle(e.request) // counted as late: the consumer is gone
			continue
		}
		if until, ok := h.pool.paused(); ok {
			srv.wheel.ScheduleAt(&h.retry, time.Unix(0, until))
			return
		}
		if h.pool.warming() && !h.pool.warmAllow() {
			srv.wheel.Schedule(&h.retry, 5*time.Millisecond)
			return
		}
		if !h.pool.send(e.request, e.frame) {
			return // nothing takes it now; a connection coming back dispatches again
		}
		h.popLocked()
		srv.m.holdOutcome[holdSent].Inc()
	}
	srv.wheel.Stop(&h.timer)
}

// expire refuses every held request whose deadline has passed.
func (h *holdQueue) expire() {
	srv := h.pool.srv
	now := srv.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	for h.head < len(h.q) && h.q[h.head].deadline <= now {
		e := h.popLocked()
		if h.pool.sendToDraining(e.request, e.frame) {
			srv.m.holdOutcome[holdSentDraining].Inc()
			continue
		}
		srv.m.holdOutcome[holdExpired].Inc() // counted before the consumer can see the reply
		srv.refuse(e.request, FailNoUpstream, "stormgate: no usable provider connection within hold.timeout", replyHoldTimeout)
	}
	if h.head < len(h.q) {
		h.armLocked(h.q[h.head].deadline)
	}
}

// failAll refuses every held request (shutdown).
func (h *holdQueue) failAll(msg string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	srv := h.pool.srv
	srv.wheel.Stop(&h.timer)
	srv.wheel.Stop(&h.retry)
	for h.head < len(h.q) {
		srv.refuse(h.popLocked().request, FailNoUpstream, msg, replyDrain)
	}
}
