package proxy

import (
	"time"

	"github.com/stormgate/stormgate/proxy/wire"
)

// Isolation (DESIGN §2, §8a): a provider connection is shared by many consumers, so a
// request must not queue behind megabytes of one neighbour, and one consumer's flood
// must not fill the connection for everyone. A connection therefore keeps the requests
// its writer cannot take at once (the writer is busy with a full batch, stalled on a
// provider that reads slowly, or held by a handover) in a send queue, one FIFO per
// consumer, and hands them to the writer in deficit round robin by bytes: each turn a
// consumer may send up to sendQuantum bytes (a frame larger than that waits for the
// deficit it has saved up over its turns), so a request waits behind at most about one
// quantum of each other consumer with requests waiting, never behind the whole backlog
// of one. What the writer holds at once is bounded by writeBatch (plus one frame), so
// the order is decided here, late, not when a request arrives.
//
// Requests wait here with their books: a queued request is owned by the send queue
// (under upConn.mu) until it is handed to the writer, when it gets its upstream id and
// its pending entry. Each one's deadline (deadline.go) is checked when it leaves: one
// whose consumer no longer waits is answered by Stormgate and never sent. When the
// connection dies every queued request goes back to the hold queue (it never left).
//
//	| event                                   | what happens
//	|-----------------------------------------|-----------------------------------------------------------
//	| send finds the writer idle, queue empty | straight to the writer (no copy): the common case
//	| send finds the writer writing, a batch  | appended to the writer's batch (write combining)
//	| of under writeBatch queued              |
//	| otherwise                               | a copy queued here, in its consumer's FIFO
//	| the writer's role is released           | refill: the next batch, up to writeBatch, in DRR order
//	| the connection dies                     | every queued request re-held (never sent)

const (
	// writeBatch bounds what a connection's writer holds beyond the frame being written
	// while senders queue: larger batches save system calls, smaller ones let the send
	// queue's order apply sooner. 64 KiB is about 60 typical requests.
	writeBatch = 64 << 10
	// sendQuantum is a consumer's share of one round of the send queue.
	sendQuantum = 16 << 10
)

// queued is a request waiting in a send queue, with a copy of its frame. One-way
// requests wait here too (oneWay): no pending entry, no answer.
type queued struct {
	request
	frame  []byte
	oneWay bool
	at     int64 // when it was queued (stormgate_send_queue_wait_seconds)
}

// sendQueue is the deficit round robin over the consumers of one connection, by bytes
// (turns.go). Guarded by its upConn's mu.
type sendQueue struct {
	turns[*session, queued, queuedTurns]
}

// queuedTurns: a send queue's turns are by consumer, in bytes.
type queuedTurns struct{}

func (queuedTurns) key(e queued) *session { return e.sess }
func (queuedTurns) cost(e queued) int     { return len(e.frame) }
func (queuedTurns) quantum() int          { return sendQuantum }

// oldest is the arrival of the oldest queued request (each consumer's are in arrival
// order); false when none.
func (s *sendQueue) oldest() (int64, bool) {
	var o int64
	s.eachFirst(func(e *queued) {
		if o == 0 || e.arrived < o {
			o = e.arrived
		}
	})
	return o, s.len() > 0
}

// enqueueLocked queues a request the writer could not take at once; called with mu
// held, it releases it. The frame is copied; its deadline is worked out now (the
// request waits), and one whose consumer no longer waits is answered at once.
func (uc *upConn) enqueueLocked(r request, frame []byte, oneWay bool) bool {
	srv := uc.pool.srv
	cfg := srv.cfg.Load()
	// upstream.max_queued_bytes bounds all that waits in Stormgate for this connection:
	// here and in the writer (an empty connection always takes one frame).
	if waiting := uc.sendq.weight() + uc.w.Queued(); waiting > 0 && waiting+len(frame) > cfg.MaxQueuedBytesPerUpstream ||
		!srv.budget.TryReserve(len(frame)) {
		uc.mu.Unlock()
		return false
	}
	if oneWay {
		r.arrived = srv.now() // for max_request_age, which looks at the oldest queued request
	} else {
		srv.sendByOf(&r, frame, cfg)
		if pastDeadline(&r, srv.now()) {
			uc.mu.Unlock()
			srv.budget.Release(len(frame))
			srv.refuse(r, wire.FailDeadline, deadlineMsg, ReplyDeadline)
			return true
		}
	}
	uc.sendq.push(queued{request: r, frame: append([]byte(nil), frame...), oneWay: oneWay, at: srv.now()})
	uc.nqueued.Add(1)
	r.sess.addWaiting(len(frame))
	if !oneWay && r.sendBy != NoDeadline {
		uc.armQueueLocked(r.sendBy)
	}
	uc.mu.Unlock()
	if !oneWay {
		uc.pool.armSweep()
	}
	return true
}

// WriterIdle implements writerOwner: the flusher finished while requests waited.
func (uc *upConn) WriterIdle() { uc.refill() }

// refill hands the send queue to the writer, a batch of up to writeBatch bytes at a
// time in DRR order, while the writer is free; when it is not, the writer tells it
// when it is (claimable). Requests whose consumer is gone or no longer waits are
// answered here instead.
func (uc *upConn) refill() {
	srv := uc.pool.srv
	type part struct {
		r        request
		pos, n   int
		id       int64
		isOneWay bool
	}
	for {
		uc.mu.Lock()
		if uc.sendq.len() == 0 || uc.state.Load() == stateClosed || !uc.w.Claimable() {
			uc.mu.Unlock()
			return
		}
		now := srv.now()
		var buf []byte
		var parts []part
		var late []queued
		for len(buf) < writeBatch {
			e, ok := uc.sendq.pop()
			if !ok {
				break
			}
			uc.nqueued.Add(-1)
			srv.budget.Release(len(e.frame))
			e.sess.doneWaiting(len(e.frame))
			srv.m.bp.queueWait.Observe(float64(now-e.at) / 1e9)
			if !e.oneWay && (e.sess.closing.Load() || pastDeadline(&e.request, now)) {
				late = append(late, e)
				continue
			}
			uc.nextID++
			srv.codec.SetID(e.frame, uc.nextID)
			parts = append(parts, part{r: e.request, pos: len(buf), n: len(e.frame), id: uc.nextID, isOneWay: e.oneWay})
			buf = append(buf, e.frame...)
		}
		var off uint64
		claimed, ok := false, len(buf) > 0
		if ok {
			off, claimed, ok, _ = uc.w.take(buf, 0)
		}
		sent := 0
		for _, pt := range parts {
			if !ok || pt.isOneWay {
				continue
			}
			o := off + uint64(pt.pos)
			uc.pending.Add(pt.id, pending{request: pt.r, off: o, n: pt.n})
			uc.npending.Add(1)
			uc.ring.put(o, buf[pt.pos:pt.pos+pt.n])
			sent++
		}
		uc.mu.Unlock()
		for _, e := range late {
			if e.sess.closing.Load() {
				srv.settleGone(e.request) // counted as late: the consumer is gone
			} else {
				srv.refuse(e.request, wire.FailDeadline, deadlineMsg, ReplyDeadline)
			}
		}
		if len(buf) > 0 && !ok { // closed under us: they never left
			var back []held
			for _, pt := range parts {
				if !pt.isOneWay {
					back = append(back, held{request: pt.r, frame: buf[pt.pos : pt.pos+pt.n]})
				}
			}
			uc.pool.hold.rehold(back, HoldReheld)
			return
		}
		for _, pt := range parts {
			if pt.isOneWay {
				pt.r.sess.counts.oneway.Add(1)
			}
		}
		if sent > 0 {
			uc.written(request{}, false, sent)
		}
		if claimed {
			err, _ := uc.w.writeClaimed(buf) // idle or not, the loop looks at the queue again
			if err != nil {
				srv.spawn(func() { uc.fail("write failed: " + err.Error()) })
				return
			}
		}
	}
}

// takeQueued empties the send queue (the connection died, or takes no new requests):
// the two-way requests in it never left Stormgate and go to rehold carrying their
// budget charge and waiting bytes (released here, the room could go to others before
// rehold charges them again); the one-way ones are dropped and counted. Called with
// mu held.
func (uc *upConn) takeQueuedLocked() []held {
	es := uc.sendq.takeAll()
	uc.nqueued.Store(0)
	srv := uc.pool.srv
	var back []held
	for _, e := range es {
		if e.oneWay {
			srv.budget.Release(len(e.frame))
			e.sess.doneWaiting(len(e.frame))
			srv.m.dropped[dropOneWayNoUpstream].Inc()
			continue
		}
		back = append(back, held{request: e.request, frame: e.frame, carried: true})
	}
	return back
}

// requeue moves the send queue to the hold queue: the connection stopped taking new
// requests (READONLY, hung), and what waited here never left, so it may go elsewhere.
func (uc *upConn) requeue() {
	uc.mu.Lock()
	back := uc.takeQueuedLocked()
	uc.mu.Unlock()
	uc.pool.hold.rehold(back, HoldReheld)
}

// armQueueLocked makes sure expireQueued runs by deadline. Called with mu held.
func (uc *upConn) armQueueLocked(deadline int64) {
	if uc.sqArmed == 0 || deadline < uc.sqArmed {
		uc.sqArmed = deadline
		uc.pool.srv.wheel.ScheduleAt(&uc.sqTimer, time.Unix(0, deadline))
	}
}

// expireQueued answers the queued requests whose consumer no longer waits (a wheel
// timer, armed for the earliest deadline in the queue: a stalled writer may not take
// from the queue for a while), and re-arms for the next.
func (uc *upConn) expireQueued() {
	now := uc.pool.srv.now()
	uc.mu.Lock()
	uc.sqArmed = 0
	late := uc.sendq.removeIf(func(e *queued) bool { return !e.oneWay && pastDeadline(&e.request, now) })
	uc.nqueued.Add(-int32(len(late)))
	uc.sendq.each(func(e *queued) {
		if !e.oneWay && e.sendBy != NoDeadline {
			uc.armQueueLocked(e.sendBy)
		}
	})
	uc.mu.Unlock()
	srv := uc.pool.srv
	for _, e := range late {
		srv.budget.Release(len(e.frame))
		e.sess.doneWaiting(len(e.frame))
		srv.refuse(e.request, wire.FailDeadline, deadlineMsg, ReplyDeadline)
	}
}

// queuedBytes is the bytes waiting in Stormgate to be written on this connection: in
// the send queue and in the writer.
func (uc *upConn) queuedBytes() int {
	uc.mu.Lock()
	n := uc.sendq.weight()
	uc.mu.Unlock()
	return n + uc.w.Queued()
}

// queuedRequests is the number of requests waiting in the send queue.
func (uc *upConn) queuedRequests() int { return int(uc.nqueued.Load()) }
