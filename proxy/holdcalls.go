package proxy

import (
	"slices"
	"sync/atomic"
)

// callLane is the hold queue's lane for calls that wait for a provider stream (hold.go): HTTP/2's today
// (Triple, gRPC), the calls no provider connection can open a stream for now (every one is at the
// provider's SETTINGS_MAX_CONCURRENT_STREAMS, after its GOAWAY, or not up yet), and the calls pausing
// before they are sent again (proxy/triple/replay.go). One hold queue per provider serves both protocols: a waiting
// call counts once in hold.max_requests and by its bytes in hold.max_bytes beside Dubbo's held requests,
// in stormgate_held_requests and in stormgate_hold_outcomes_total; while no connection of the protocol
// takes new streams (none is up, or every one is hung), its consumer's waiting bytes are bounded by
// hold.max_bytes_per_consumer. What a call's bytes are is the protocol's to say (HTTP/2: its head's
// header list size, §6.5.2, and the DATA kept while it waits). What each lane waits for differs (a Dubbo
// request for room in a connection's send queue, a call for a provider stream), so each is dispatched on
// its own: this one by the protocol's pool, when a stream frees or a connection comes.
//
// A protocol's call waits here by embedding Waiter; its consumer connection's state embeds WaitAccount,
// the turn key and the consumer's bytes. The lane hands calls back as Waiting, which the protocol asserts
// to its own type.
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
// Locks: the HoldQueue's mu guards the lane, each Waiter and each WaitAccount; it is taken inside the
// protocol pool's lock (HTTP/2: h2Pool.mu -> HoldQueue.mu), which guards whether a call waits or pauses.
type callLane struct {
	waiting turns[*WaitAccount, Waiting, waiterTurns]
	paused  []Waiting
	queued  atomic.Int32 // waiting.len(), readable without the lock (the protocol's fast path)
}

// WaitAccount is one consumer connection's part of the call lane: its calls' turn, and the bytes they
// hold (hold.max_bytes_per_consumer). The protocol's per-connection state embeds it.
type WaitAccount struct {
	bytes int // its calls' bytes in the lane, under the queue's mu
}

// Waiter is what a protocol's call embeds to wait in the call lane.
type Waiter struct {
	acct *WaitAccount // its consumer's, from the call's first wait
	size int          // what it counts in hold.max_bytes while in the lane, under the queue's mu
}

func (w *Waiter) waiter() *Waiter { return w }

// Waiting is a call that can wait in the lane: a protocol's call type that embeds Waiter.
type Waiting interface{ waiter() *Waiter }

// waiterTurns: a call waiting for a stream costs one turn.
type waiterTurns struct{}

func (waiterTurns) key(c Waiting) *WaitAccount { return c.waiter().acct }
func (waiterTurns) cost(Waiting) int           { return 1 }
func (waiterTurns) quantum() int               { return 1 }

// Why a call may not wait.
const (
	holdFullMsg  = "stormgate: no provider connection can take the request now and the hold queue is full"
	heldBytesMsg = "stormgate: this consumer already has hold.max_bytes_per_consumer of requests waiting for " +
		"the provider, which is away"
)

// HoldCall queues c, a call of the consumer whose account is acct, with size bytes, behind that
// consumer's other waiting calls; or says why it may not wait (msg "" when it waits). away: no provider
// connection of the protocol takes new streams, so the consumer's bound applies.
func (h *HoldQueue) HoldCall(c Waiting, acct *WaitAccount, size int, cfg *Config, away bool) (ReplyReason, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if reason, msg := h.refuseCallLocked(acct, size, true, cfg, away); msg != "" {
		return reason, msg
	}
	h.addCallLocked(c, acct, size)
	h.calls.waiting.push(c)
	h.calls.queued.Add(1)
	return 0, ""
}

// refuseCallLocked says why a call of acct may not wait with n more bytes (msg "" when it may): a call that is new
// to the queue also takes one of hold.max_requests. A call already waiting is never refused for nothing
// more (an empty END_STREAM, request trailers): the queue may be over its bounds, since calls sent again
// come back past them (ReholdCall), and refusing then failed a call that asked for no byte.
func (h *HoldQueue) refuseCallLocked(acct *WaitAccount, n int, isNew bool, cfg *Config, away bool) (ReplyReason, string) {
	switch {
	case !isNew && n == 0:
		return 0, ""
	case isNew && h.Len() >= cfg.HoldMaxRequests:
		return ReplyHoldFull, holdFullMsg + " (hold.max_requests)"
	case h.bytes+n > cfg.HoldMaxBytes:
		return ReplyHoldFull, holdFullMsg + " (hold.max_bytes)"
	case away && cfg.HoldMaxBytesPerConsumer > 0 && acct.bytes+n > cfg.HoldMaxBytesPerConsumer:
		return ReplyOverloaded, heldBytesMsg
	}
	return 0, ""
}

// GrowCall counts n more bytes of a waiting call (DATA that came while it waits); or says why they may
// not wait, and then the caller ends the call (the hold queue keeps nothing of it).
func (h *HoldQueue) GrowCall(c Waiting, n int, cfg *Config, away bool) (ReplyReason, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w := c.waiter()
	if reason, msg := h.refuseCallLocked(w.acct, n, false, cfg, away); msg != "" {
		return reason, msg
	}
	w.size += n
	w.acct.bytes += n
	h.bytes += n
	return 0, ""
}

// ReholdCall puts back a call of acct that was accepted already, whatever the bounds (as rehold does
// for Dubbo): a call sent again (proxy/triple/replay.go), paused first when pause, or one a handover restored.
func (h *HoldQueue) ReholdCall(c Waiting, acct *WaitAccount, size int, pause bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.addCallLocked(c, acct, size)
	if pause {
		h.calls.paused = append(h.calls.paused, c)
		return
	}
	h.calls.waiting.push(c)
	h.calls.queued.Add(1)
}

// UnpauseCall moves a call whose pause ended to the waiting calls, behind its consumer's others.
func (h *HoldQueue) UnpauseCall(c Waiting) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if i := slices.Index(h.calls.paused, c); i >= 0 {
		h.calls.paused = slices.Delete(h.calls.paused, i, i+1)
		h.calls.waiting.push(c)
		h.calls.queued.Add(1)
	}
}

// PopCall takes the waiting call whose turn it is out of the queue; nil when none waits.
func (h *HoldQueue) PopCall() Waiting {
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

// RemoveCall takes c out of the queue, waiting or paused (its consumer reset it, it expired, it was
// refused).
func (h *HoldQueue) RemoveCall(c Waiting) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if i := slices.Index(h.calls.paused, c); i >= 0 {
		h.calls.paused = slices.Delete(h.calls.paused, i, i+1)
		h.dropCallLocked(c)
		return
	}
	if _, ok := h.calls.waiting.remove(c.waiter().acct, func(x *Waiting) bool { return *x == c }); ok {
		h.calls.queued.Add(-1)
		h.dropCallLocked(c)
	}
}

// TakeCalls takes every call out of the lane, waiting ones first (the pool closes).
func (h *HoldQueue) TakeCalls() []Waiting {
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

// PausedCalls is the number of calls pausing before they are sent again.
func (h *HoldQueue) PausedCalls() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.calls.paused)
}

// EachCall calls f for every call in the lane, waiting or paused.
func (h *HoldQueue) EachCall(f func(Waiting)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls.waiting.each(func(c *Waiting) { f(*c) })
	for _, c := range h.calls.paused {
		f(c)
	}
}

// CallsWaiting is the number of calls waiting for a stream (not those pausing).
func (h *HoldQueue) CallsWaiting() int { return int(h.calls.queued.Load()) }

func (h *HoldQueue) addCallLocked(c Waiting, acct *WaitAccount, size int) {
	w := c.waiter()
	w.acct, w.size = acct, size
	acct.bytes += size
	h.bytes += size
	h.n[laneStream].Add(1)
	h.pool.srv.m.held.Inc()
}

func (h *HoldQueue) dropCallLocked(c Waiting) {
	w := c.waiter()
	w.acct.bytes -= w.size
	h.bytes -= w.size
	w.size = 0
	h.n[laneStream].Add(-1)
	h.pool.srv.m.held.Dec()
}
