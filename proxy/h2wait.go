package proxy

import (
	"slices"
	"sync/atomic"

	"github.com/stormgate/stormgate/proxy/h2"
)

// h2Lane is the hold queue's HTTP/2 lane (hold.go): the calls no provider connection can open a stream
// for now (every one is at the provider's SETTINGS_MAX_CONCURRENT_STREAMS, after its GOAWAY, or not up
// yet), and the calls pausing before they are sent again (h2replay.go). One hold queue per provider
// serves both protocols: a waiting call counts once in hold.max_requests and by its bytes in
// hold.max_bytes beside Dubbo's held requests, in stormgate_held_requests and in
// stormgate_hold_outcomes_total; while no HTTP/2 connection takes new streams (none is up, or every one
// is hung), its consumer's waiting bytes are bounded by hold.max_bytes_per_consumer. A call's bytes are its head's header list size (§6.5.2),
// the DATA kept while it waits and its trailers' size. What each lane waits for differs (a Dubbo
// request for room in a connection's send queue, a call for a provider stream), so each is
// dispatched on its own: this one by the h2Pool, when a stream frees or a connection comes.
//
// Waiting calls are served round robin by consumer connection: a stream that frees goes to the next
// consumer with calls waiting, and each consumer's own calls go in arrival order. A provider stream
// is the scarce thing here, and streams are taken one per call whatever their size, so the turns
// count calls, not bytes (the send queue's deficit round robin, sendq.go, counts bytes for the same
// reason on Dubbo's shared connections).
//
// Served in arrival order instead, twenty consumers that each open a hundred streams for answers they
// never read queue two thousand calls in front of everyone else's: a well-behaved call waited behind
// all of them (p99 0.6-0.7 s against 1.5 ms without them, e2e TestH2SlowConsumersCostOthersNothing).
// Round robin, it waits for about one stream per consumer with calls waiting.
//
// Locks: the holdQueue's mu guards the lane, each call's heldSize and each session's heldBytes; it is
// taken inside the h2Pool's mu (lock order h2Pool.mu -> holdQueue.mu), which guards whether a call
// waits or pauses (c.waiting, c.paused).
type h2Lane struct {
	waiting turns[*h2Session, *h2Call, h2CallTurns]
	paused  []*h2Call
	queued  atomic.Int32 // waiting.len(), readable without the lock (h2Pool.open's fast path)
}

// h2CallTurns: a call waiting for a stream costs one turn.
type h2CallTurns struct{}

func (h2CallTurns) key(c *h2Call) *h2Session { return c.sess }
func (h2CallTurns) cost(*h2Call) int         { return 1 }
func (h2CallTurns) quantum() int             { return 1 }

// h2CallSize is what a call waiting with head, in and trailers counts in hold.max_bytes.
func h2CallSize(head []h2.HeaderField, in []byte) int { return h2.ListSize(head) + len(in) }

// Why a call may not wait.
const (
	h2HoldFullMsg  = "stormgate: no provider connection can take the request now and the hold queue is full"
	h2HeldBytesMsg = "stormgate: this consumer already has hold.max_bytes_per_consumer of requests waiting for " +
		"the provider, which is away"
)

// holdCall queues c, whose bytes are size, behind its consumer's other waiting calls; or says why it
// may not wait (msg "" when it waits). away: no HTTP/2 provider connection takes new streams
// (h2Pool.awayLocked), so the consumer's bound applies.
func (h *holdQueue) holdCall(c *h2Call, size int, cfg *Config, away bool) (ReplyReason, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if reason, msg := h.refuseCallLocked(c, size, true, cfg, away); msg != "" {
		return reason, msg
	}
	h.addCallLocked(c, size)
	h.calls.waiting.push(c)
	h.calls.queued.Add(1)
	return 0, ""
}

// refuseCallLocked says why c may not wait with n more bytes (msg "" when it may): a call that is new
// to the queue also takes one of hold.max_requests.
func (h *holdQueue) refuseCallLocked(c *h2Call, n int, isNew bool, cfg *Config, away bool) (ReplyReason, string) {
	switch {
	case isNew && h.len() >= cfg.HoldMaxRequests:
		return ReplyHoldFull, h2HoldFullMsg + " (hold.max_requests)"
	case h.bytes+n > cfg.HoldMaxBytes:
		return ReplyHoldFull, h2HoldFullMsg + " (hold.max_bytes)"
	case away && cfg.HoldMaxBytesPerConsumer > 0 && c.sess.heldBytes+n > cfg.HoldMaxBytesPerConsumer:
		return ReplyOverloaded, h2HeldBytesMsg
	}
	return 0, ""
}

// growCall counts n more bytes of a waiting call (DATA that came while it waits); or says why they may
// not wait, and then the caller ends the call (the hold queue keeps nothing of it).
func (h *holdQueue) growCall(c *h2Call, n int, cfg *Config, away bool) (ReplyReason, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if reason, msg := h.refuseCallLocked(c, n, false, cfg, away); msg != "" {
		return reason, msg
	}
	h.growCallLocked(c, n)
	return 0, ""
}

// reholdCall puts back a call that was accepted already, whatever the bounds (as rehold does for
// Dubbo): a call sent again (h2replay.go), paused first when pause, or one a handover restored.
func (h *holdQueue) reholdCall(c *h2Call, size int, pause bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.addCallLocked(c, size)
	if pause {
		h.calls.paused = append(h.calls.paused, c)
		return
	}
	h.calls.waiting.push(c)
	h.calls.queued.Add(1)
}

// unpauseCall moves a call whose pause ended to the waiting calls, behind its consumer's others.
func (h *holdQueue) unpauseCall(c *h2Call) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if i := slices.Index(h.calls.paused, c); i >= 0 {
		h.calls.paused = slices.Delete(h.calls.paused, i, i+1)
		h.calls.waiting.push(c)
		h.calls.queued.Add(1)
	}
}

// popCall takes the waiting call whose turn it is out of the queue; nil when none waits.
func (h *holdQueue) popCall() *h2Call {
	h.mu.Lock()
	defer h.mu.Unlock()
	c, ok := h.calls.waiting.pop()
	if !ok {
		return nil
	}
	h.calls.queued.Add(-1)
	h.dropCallLocked(c)
	return c
}

// removeCall takes c out of the queue, waiting or paused (its consumer reset it, it expired, it was
// refused).
func (h *holdQueue) removeCall(c *h2Call) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if i := slices.Index(h.calls.paused, c); i >= 0 {
		h.calls.paused = slices.Delete(h.calls.paused, i, i+1)
		h.dropCallLocked(c)
		return
	}
	if _, ok := h.calls.waiting.remove(c.sess, func(x **h2Call) bool { return *x == c }); ok {
		h.calls.queued.Add(-1)
		h.dropCallLocked(c)
	}
}

// takeCalls takes every call out of the lane, waiting ones first (the pool closes).
func (h *holdQueue) takeCalls() []*h2Call {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := append(h.calls.waiting.takeAll(), h.calls.paused...)
	h.calls.paused = nil
	h.calls.queued.Store(0)
	for _, c := range out {
		h.dropCallLocked(c)
	}
	return out
}

// pausedCalls is the number of calls pausing before they are sent again.
func (h *holdQueue) pausedCalls() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.calls.paused)
}

// eachCall calls f for every call in the lane, waiting or paused.
func (h *holdQueue) eachCall(f func(*h2Call)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls.waiting.each(func(c **h2Call) { f(*c) })
	for _, c := range h.calls.paused {
		f(c)
	}
}

// callsWaiting is the number of calls waiting for a stream (not those pausing).
func (h *holdQueue) callsWaiting() int { return int(h.calls.queued.Load()) }

func (h *holdQueue) addCallLocked(c *h2Call, size int) {
	c.heldSize = size
	c.sess.heldBytes += size
	h.bytes += size
	h.n[laneStream].Add(1)
	h.pool.srv.m.held.Inc()
}

func (h *holdQueue) growCallLocked(c *h2Call, n int) {
	c.heldSize += n
	c.sess.heldBytes += n
	h.bytes += n
}

func (h *holdQueue) dropCallLocked(c *h2Call) {
	c.sess.heldBytes -= c.heldSize
	h.bytes -= c.heldSize
	c.heldSize = 0
	h.n[laneStream].Add(-1)
	h.pool.srv.m.held.Dec()
}
