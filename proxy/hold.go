package proxy

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stormgate/stormgate/keepalive"
	"github.com/stormgate/stormgate/proxy/wire"
)

// HoldQueue keeps two-way requests while no provider connection takes them
// (provider restarting, READONLY with policy HOLD, every connection's queue full,
// warm-up, a hung provider). It is bounded by count, bytes and the process budget;
// entries leave by consumer in turns (turns.go: deficit round robin by bytes, each
// consumer's requests in arrival order), sent on a connection that came back or whose
// queue has room again (looked at every wheel tick while the provider serves), or
// refused when their wait ends: at their consumer's own deadline less
// hold.deadline_margin, or after hold.timeout when the request carries no timeout
// (deadline.go). A request is never sent once its consumer's deadline is that close.
// Requests that were on a connection when it died but never left Stormgate come back
// here (rehold) in their consumer's arrival order, with the deadline their arrival
// gives them.
//
// Turns, not arrival order: when the provider comes back every held request usually
// leaves at once and the order does not matter; when it serves slower than requests
// arrive (every connection's queue full), arrival order would make everyone's request
// wait behind all that one flooding consumer had sent, which is what the send queues'
// turns (sendq.go) already prevent one step later.
//
// Two lanes for Dubbo, as the pool's connections (dubboUpstream.pick): requests over
// upstream.large_request_bytes wait in one, the others in the other, each dispatched
// on its own, so that large requests waiting for their connection never hold up the
// small ones behind them. A third for HTTP/2 (holdcalls.go): calls waiting for a
// provider stream, dispatched by the h2Pool. One queue for both protocols: the bounds
// (hold.max_requests, hold.max_bytes) and the metrics count every lane.
//
// Concurrency: mu guards the queue; dispatch calls upConn.send with mu held (lock
// order HoldQueue.mu -> upConn.mu -> writer.mu). The expiry and warm-up retry
// timers run on the wheel goroutine.
type HoldQueue struct {
	pool *pool

	mu      sync.Mutex
	lanes   [2]turns[*session, held, heldTurns]
	calls   callLane        // laneStream: calls waiting for a provider stream (holdcalls.go)
	bytes   int             // every lane's
	armedAt int64           // when the expiry timer fires; 0 when it is not armed
	n       [3]atomic.Int32 // each lane's length, readable without mu (the forward fast path)
	timer   keepalive.Timer
	retry   keepalive.Timer
}

// heldTurns: a hold lane's turns are by consumer, in bytes (what a request waits for is
// room in a connection's send queue, which counts bytes).
type heldTurns struct{}

func (heldTurns) key(e held) *session { return e.sess }
func (heldTurns) cost(e held) int     { return len(e.frame) }
func (heldTurns) quantum() int        { return sendQuantum }

// roomRetry is how soon the hold queue tries again to send a request that no
// connection's queue had room for while the provider serves (rounded up to a wheel tick).
const roomRetry = 5 * time.Millisecond

// Hold lanes: Dubbo's two, dispatched here, and HTTP/2's (holdcalls.go), dispatched by the h2Pool.
const (
	laneSmall  = 0
	laneLarge  = 1
	laneStream = 2
)

type held struct {
	request
	frame    []byte // a copy: the consumer's input buffer is released after onRequest
	deadline int64  // when its wait ends (holdUntil)
	// carried: on its way to rehold from a send queue (takeQueuedLocked), its bytes are
	// still charged to the budget and counted as its consumer's waiting bytes; rehold
	// takes that charge over instead of making a new one. False once in a lane.
	carried bool
}

func (h *HoldQueue) init(p *pool) {
	h.pool = p
	h.timer.Init(h.expire)
	h.retry.Init(h.dispatch)
}

// Len is the number of held requests of either protocol (hold.max_requests bounds it).
func (h *HoldQueue) Len() int {
	return int(h.n[laneSmall].Load() + h.n[laneLarge].Load() + h.n[laneStream].Load())
}

// Bytes is what every lane holds, as hold.max_bytes counts it.
func (h *HoldQueue) Bytes() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.bytes
}

// dubboLen is the number of held Dubbo requests (the lanes the expiry timer looks at).
func (h *HoldQueue) dubboLen() int { return int(h.n[laneSmall].Load() + h.n[laneLarge].Load()) }

// laneLen is the number of held requests in the lane of a frame of size bytes.
func (h *HoldQueue) laneLen(size int) int { return int(h.n[h.laneOf(size)].Load()) }

// laneOf is the lane of a frame of size bytes.
func (h *HoldQueue) laneOf(size int) int {
	if limit := h.pool.srv.cfg.Load().LargeRequestBytes; limit > 0 && size > limit {
		return laneLarge
	}
	return laneSmall
}

// push holds an accepted request, or refuses it when holding is off or full, or when
// its consumer's deadline is already too close.
func (h *HoldQueue) push(r request, frame []byte) {
	srv := h.pool.srv
	cfg := srv.cfg.Load()
	if cfg.HoldTimeout <= 0 {
		srv.refuse(r, wire.FailNoUpstream, "stormgate: no usable provider connection (hold.timeout is 0)", ReplyNoUpstream)
		return
	}
	srv.sendByOf(&r, frame, cfg)
	if pastDeadline(&r, srv.now()) {
		srv.m.holdOutcome[HoldDeadline].Inc()
		srv.refuse(r, wire.FailDeadline, deadlineMsg, ReplyDeadline)
		return
	}
	h.mu.Lock()
	if srv.closed.Load() {
		// Close has run (or is running) failAll: nobody would answer an entry added now.
		// Checked under mu so that an entry is either answered here or by failAll.
		h.mu.Unlock()
		srv.refuse(r, wire.FailNoUpstream, "stormgate: shutting down", ReplyDrain)
		return
	}
	if lim := cfg.HoldMaxBytesPerConsumer; lim > 0 && r.sess.wait.waiting.Load()+int64(len(frame)) > int64(lim) && h.pool.usable() == 0 {
		// One consumer may not fill the hold queue for everyone while the provider is away
		// (backpressure.go: reading is not paused then, so this one is answered instead).
		h.mu.Unlock()
		srv.m.holdOutcome[HoldRejectedFull].Inc()
		srv.refuse(r, wire.FailOverloaded, "stormgate: this consumer already has hold.max_bytes_per_consumer of requests "+
			"waiting for the provider, which is away", ReplyHoldFull)
		return
	}
	if h.Len() >= cfg.HoldMaxRequests || h.bytes+len(frame) > cfg.HoldMaxBytes || !srv.budget.TryReserve(len(frame)) {
		h.mu.Unlock()
		srv.m.holdOutcome[HoldRejectedFull].Inc()
		why, msg := wire.FailNoUpstream, "stormgate: no usable provider connection and the hold queue is full"
		if h.pool.usable() > 0 {
			why, msg = wire.FailOverloaded, "stormgate: the provider is not keeping up (every connection's queue and the hold queue are full)"
		}
		srv.refuse(r, why, msg, ReplyHoldFull)
		return
	}
	r.call = srv.noteHeld(r.call, false)
	e := held{request: r, frame: append([]byte(nil), frame...), deadline: holdUntil(&r, cfg)}
	i := h.laneOf(len(frame))
	h.lanes[i].push(e)
	h.armLocked(e.deadline) // before it counts as held: whoever sees it held may move the clock past its end
	h.addLocked(i, e)
	h.mu.Unlock()
	// A connection may have become usable between the caller's pick and this push.
	if h.pool.usable() > 0 {
		h.dispatch()
	}
}

// rehold puts back requests whose connection died before they left Stormgate. They
// keep their arrival time (and so their deadline) and their place in arrival order;
// those whose consumer's deadline is already too close are answered instead. Their
// bytes were reserved by the writer they came from; rehold charges them anew.
func (h *HoldQueue) rehold(es []held, why HoldOutcome) {
	if len(es) == 0 {
		return
	}
	srv := h.pool.srv
	cfg := srv.cfg.Load()
	now := srv.now()
	live := es[:0]
	for _, e := range es {
		srv.sendByOf(&e.request, e.frame, cfg)
		if pastDeadline(&e.request, now) {
			h.dropCarried(e)
			srv.m.holdOutcome[HoldDeadline].Inc()
			srv.refuse(e.request, wire.FailDeadline, deadlineMsg, ReplyDeadline)
			continue
		}
		e.deadline = holdUntil(&e.request, cfg)
		live = append(live, e)
	}
	es = live
	if len(es) == 0 {
		return
	}
	slices.SortFunc(es, func(a, b held) int { return int(a.arrived - b.arrived) })
	h.mu.Lock()
	if srv.closed.Load() { // see push
		h.mu.Unlock()
		for _, e := range es {
			h.dropCarried(e)
			srv.refuse(e.request, wire.FailNoUpstream, "stormgate: shutting down", ReplyDrain)
		}
		return
	}
	// Not bounded by hold.max_requests/max_bytes: these were accepted already, and a
	// bound hit now would fail requests that did nothing wrong.
	type place struct {
		lane int
		sess *session
	}
	add := make(map[place][]held)
	var order []place // each consumer's lane in the order it first comes back: its place in the turns
	for _, e := range es {
		e.call = srv.noteHeld(e.call, true)
		i := h.laneOf(len(e.frame))
		if !e.carried {
			srv.budget.Force(len(e.frame))
		}
		h.armLocked(e.deadline) // before it counts as held (push)
		h.addLocked(i, e)
		e.carried = false
		k := place{i, e.sess}
		if add[k] == nil {
			order = append(order, k)
		}
		add[k] = append(add[k], e)
		srv.m.holdOutcome[why].Inc()
	}
	for _, k := range order {
		h.lanes[k.lane].merge(k.sess, add[k], arrivedBefore)
	}
	h.mu.Unlock()
	if h.pool.usable() > 0 {
		h.dispatch()
	}
}

// arrivedBefore orders a consumer's held requests: by arrival, a request that comes back
// after one that arrived at the same time.
func arrivedBefore(a, b *held) bool { return a.arrived < b.arrived }

func (h *HoldQueue) addLocked(lane int, e held) {
	h.bytes += len(e.frame)
	h.n[lane].Add(1)
	h.pool.srv.m.held.Inc()
	if !e.carried {
		e.sess.addWaiting(len(e.frame))
	}
}

// dropCarried gives back the charge of a carried entry that rehold answers instead
// of keeping.
func (h *HoldQueue) dropCarried(e held) {
	if e.carried {
		h.pool.srv.budget.Release(len(e.frame))
		e.sess.doneWaiting(len(e.frame))
	}
}

// dropLocked does the accounting of an entry that leaves lane.
func (h *HoldQueue) dropLocked(lane int, e held) {
	h.bytes -= len(e.frame)
	h.n[lane].Add(-1)
	srv := h.pool.srv
	srv.m.held.Dec()
	srv.budget.Release(len(e.frame))
	e.sess.doneWaiting(len(e.frame))
}

// armLocked makes sure the expiry timer fires by deadline.
func (h *HoldQueue) armLocked(deadline int64) {
	if h.armedAt == 0 || deadline < h.armedAt {
		h.armedAt = deadline
		h.pool.srv.wheel.ScheduleAt(&h.timer, time.Unix(0, deadline))
	}
}

// popLocked takes the request whose turn it is in lane, which is not empty.
func (h *HoldQueue) popLocked(lane int) held {
	e, _ := h.lanes[lane].pop()
	h.dropLocked(lane, e)
	return e
}

// dispatch sends held requests in turn, lane by lane, while a connection takes them.
func (h *HoldQueue) dispatch() {
	srv := h.pool.srv
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range h.lanes {
		if !h.dispatchLaneLocked(i) {
			return // paused or warming: a timer dispatches again
		}
	}
	if h.dubboLen() == 0 {
		srv.wheel.Stop(&h.timer)
		h.armedAt = 0
	}
}

// dispatchLaneLocked sends a lane's requests in turn while a connection takes them;
// false when sending waits for a pause or the warm-up (retry is armed).
func (h *HoldQueue) dispatchLaneLocked(lane int) bool {
	srv := h.pool.srv
	for {
		p := h.lanes[lane].peek()
		if p == nil {
			return true
		}
		e := *p
		if e.sess.closing.Load() {
			h.popLocked(lane)
			srv.m.holdOutcome[HoldConsumerGone].Inc()
			srv.settleGone(e.request) // counted as late: the consumer is gone
			continue
		}
		if pastDeadline(&e.request, srv.now()) {
			h.popLocked(lane)
			srv.m.holdOutcome[HoldDeadline].Inc()
			srv.refuse(e.request, wire.FailDeadline, deadlineMsg, ReplyDeadline)
			continue
		}
		if until, ok := h.pool.paused(); ok {
			srv.wheel.ScheduleAt(&h.retry, time.Unix(0, until))
			return false
		}
		if h.pool.warming() && !h.pool.warmAllow() {
			srv.wheel.Schedule(&h.retry, WarmRetry)
			return false
		}
		if !h.pool.dubbo.send(e.request, e.frame) {
			if h.pool.usable() > 0 {
				// Every connection's queue is full while the provider serves. A queue that
				// drains reports it to no one (its writer only tells a sender that waited on
				// it), and the consumers may be paused or done: look again a tick later.
				srv.wheel.Schedule(&h.retry, roomRetry)
			}
			return true // a connection coming back dispatches at once
		}
		h.popLocked(lane)
		srv.m.holdOutcome[HoldSent].Inc()
	}
}

// expire answers every held request whose wait has ended. Waits end in no particular
// order (each request's consumer has its own timeout), so it looks at all of them.
func (h *HoldQueue) expire() {
	srv := h.pool.srv
	now := srv.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.armedAt = 0
	for i := range h.lanes {
		ended := h.lanes[i].removeIf(func(e *held) bool {
			if e.deadline > now {
				h.armLocked(e.deadline)
				return false
			}
			return true
		})
		for _, e := range ended {
			h.dropLocked(i, e)
			switch {
			case pastDeadline(&e.request, now):
				srv.m.holdOutcome[HoldDeadline].Inc() // counted before the consumer can see the reply
				srv.refuse(e.request, wire.FailDeadline, deadlineMsg, ReplyDeadline)
			case h.pool.sendToDrainingProvider(e.request, e.frame):
				srv.m.holdOutcome[HoldSentDraining].Inc()
			case h.pool.usable() > 0:
				// Held because every connection's queue was full (upstream.max_queued_bytes):
				// the provider serves, but slower than requests arrive.
				srv.m.holdOutcome[HoldExpired].Inc()
				srv.refuse(e.request, wire.FailOverloaded, "stormgate: the provider is serving but did not take this request "+
					"within the hold time (hold.timeout, or hold.max_timeout for a request that carries its own timeout): "+
					"it is not keeping up with what consumers send", ReplyHoldTimeout)
			default:
				srv.m.holdOutcome[HoldExpired].Inc()
				srv.refuse(e.request, wire.FailNoUpstream, "stormgate: no usable provider connection within the hold time "+
					"(hold.timeout, or hold.max_timeout for a request that carries its own timeout)", ReplyHoldTimeout)
			}
		}
	}
}

// rearm works out every held request's end again from its arrival under cfg (a live
// change from old of hold.timeout, hold.max_timeout, hold.deadline_margin or
// limits.max_request_age, rearm.go) and re-arms the expiry timer for the earliest.
func (h *HoldQueue) rearm(old, cfg *Config) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.armedAt = 0
	h.eachLocked(func(e *held) {
		if e.sendBy != NoDeadline && e.sendBy != 0 { // arrival + the consumer's timeout - the margin
			if e.sendBy += int64(old.DeadlineMargin - cfg.DeadlineMargin); e.sendBy == 0 {
				e.sendBy = -1 // 0 means "not worked out yet"
			}
		}
		e.deadline = holdUntil(&e.request, cfg)
		h.armLocked(e.deadline)
	})
}

// each calls f for every held request, lane by lane, each consumer's in arrival order.
// Called with mu held (a handover's snapshot).
func (h *HoldQueue) eachLocked(f func(*held)) {
	for i := range h.lanes {
		h.lanes[i].each(f)
	}
}

// failAll refuses every held request (shutdown).
func (h *HoldQueue) failAll(msg string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	srv := h.pool.srv
	srv.wheel.Stop(&h.timer)
	srv.wheel.Stop(&h.retry)
	h.armedAt = 0
	for i := range h.lanes {
		for _, e := range h.lanes[i].takeAll() {
			h.dropLocked(i, e)
			srv.refuse(e.request, wire.FailNoUpstream, msg, ReplyDrain)
		}
	}
}
