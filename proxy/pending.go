package proxy

import (
	"time"

	"github.com/stormgate/stormgate/proxy/wire"
)

// Every two-way request Stormgate accepts gets exactly one answer (DESIGN §8a). The
// books that make this true, in one place:
//
//	accept ──▶ held (HoldQueue) ──▶ pending (an upConn's pendingTable) ──▶ answer / refuse
//	             ▲    │ expiry: refuse        │ response: answer
//	             │    ▼                       │ oversize / event frame: refuse
//	             └── unsent when its connection died (never handed to the kernel): re-held
//	                                          │ connection lost after the kernel took it: refuse
//	                                          │ max_request_age: refuse
//
// A request has exactly one owner at a time: the hold queue (under HoldQueue.mu) or
// one pending table (under its upConn.mu). Whoever removes it from its owner either
// moves it to the other owner or settles it with answer or refuse, which are the
// only two ways a request leaves the books. A request whose consumer has closed is
// still settled the same way (its late answer is counted and dropped): a closed
// consumer's entries leave when their answer, expiry or connection loss comes, so
// that no path needs an index of requests by consumer.

// request is a two-way request Stormgate owes one answer.
type request struct {
	sess    *session
	id      int64   // the consumer's id, restored on the answer
	serial  byte    // the consumer's serialization id, echoed in Stormgate's own replies
	tries   uint8   // times a not-executed answer sent it back to the hold queue (notrun.go)
	call    callRef // what it calls, its size, whether it was held (methods.go)
	arrived int64   // when it reached Stormgate, unix nanos on the server's clock
	// sendBy is the latest time it may be handed to the provider (deadline.go): 0
	// until a wait needs it, NoDeadline when its consumer's timeout is unknown.
	sendBy int64
}

// pending is a frame on an upstream connection that expects an answer: a
// consumer's request, or Stormgate's own heartbeat (sess nil).
type pending struct {
	request
	off uint64 // the frame's offset in the connection's output stream
	n   int    // the frame's length
}

func (p *pending) heartbeat() bool { return p.sess == nil }

// pendingTable is one Dubbo connection's pending books (books.go): upstream id → what it answers.
// Guarded by its upConn's mu.
type pendingTable = Books[int64, pending]

// takeExpired removes from t and appends to dst every entry that arrived before cutoff and whose
// frame was fully handed to the kernel (ends at or before written). stalled reports such an old
// entry still queued in Stormgate; it stays.
func takeExpired(t *pendingTable, cutoff int64, written uint64, dst []pending) (_ []pending, stalled bool) {
	dst = t.TakeIf(dst, func(p pending) bool {
		if p.arrived >= cutoff {
			return false
		}
		if p.off+uint64(p.n) > written {
			stalled = true
			return false
		}
		return true
	})
	return dst, stalled
}

// accept enters r in the books: from here on exactly one answer or refuse settles it.
func (s *Server) accept(r request) { r.sess.began() }

// answer settles r with the provider's response; its id is restored in place. c
// counts it (the provider connection's counters). r leaves the in-flight count only
// after its answer is in the writer: a drain that sees the last call settled finds
// its answer written, and its lingering close delivers it.
func (s *Server) answer(r request, resp []byte, now int64, c *upCounters) {
	if s.settleGone(r) {
		return
	}
	s.codec.SetID(resp, r.id)
	c.responses.Add(1) // counted before the consumer can see the response
	c.duration.observe(time.Duration(now - r.arrived))
	s.callAnswered(&r, resp, now, &c.calls)
	r.sess.write(resp)
	r.sess.settled()
}

// refuse settles r with Stormgate's own error response, written before r leaves the
// in-flight count (as answer).
func (s *Server) refuse(r request, why wire.Failure, msg string, reason ReplyReason) {
	if s.settleGone(r) {
		return
	}
	r.sess.dubbo.replyError(wire.Frame{ID: r.id, Serial: r.serial}, r.call, r.arrived, why, msg, reason)
	r.sess.settled()
}

// settleGone settles r, counted as a late response, when its consumer is gone, and
// reports whether it was.
func (s *Server) settleGone(r request) bool {
	if !r.sess.closing.Load() {
		return false
	}
	r.sess.settled()
	s.m.lateResponses.Inc()
	return true
}
