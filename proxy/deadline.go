package proxy

import (
	"math"
	"time"
)

// At most once (DESIGN §8a): a request is never handed to the provider after its
// consumer's own deadline, because by then the consumer has given up and may be
// retrying it on another provider (Java's failover retries twice by default), so
// sending it would run it twice. Consumers say how long they wait in each request (the
// codec's RequestTimeout: Dubbo's `timeout` attachment), so the deadline is known:
//
//	sendBy    = arrived + the consumer's timeout - hold.deadline_margin
//	holdUntil = min(sendBy, arrived + hold.max_timeout,        a request carrying a timeout
//	                arrived + limits.max_request_age)
//	          = arrived + hold.timeout                         one carrying none (sendBy: never)
//
// Requests that go straight to a provider connection never need either: sendBy is
// worked out only when a request has to wait (the hold queue, a connection's send
// queue), from the frame it waits with, once. Every place a request waits checks
// sendBy before the request leaves it; past sendBy the request is answered by
// Stormgate (FailDeadline, local reply "deadline") and never sent. The margin covers
// the provider's network and queueing time and the answer's way back: a request sent
// just before sendBy still has that long to be answered within its consumer's timeout.

// NoDeadline is sendBy for a request whose consumer's deadline is unknown.
const NoDeadline = math.MaxInt64

// sendByOf returns r's sendBy, working it out from frame (r's request frame) and the
// settings the first time; it records it in r.
func (s *Server) sendByOf(r *request, frame []byte, cfg *Config) int64 {
	if r.sendBy == 0 {
		r.sendBy = NoDeadline
		if cfg.HoldMaxTimeout > 0 {
			if t, ok := s.codec.RequestTimeout(frame); ok {
				r.sendBy = r.arrived + int64(min(t, time.Duration(math.MaxInt64-r.arrived))) - int64(cfg.DeadlineMargin)
				if r.sendBy == 0 {
					r.sendBy = -1 // 0 means "not worked out yet"
				}
			}
		}
	}
	return r.sendBy
}

// holdUntil is how long r (its sendBy known) may wait in the hold queue. A request
// with its own timeout waits at most hold.max_timeout, and less than
// limits.max_request_age (which also counts from arrival: held that long, it would be
// answered as too old right after it was sent).
func holdUntil(r *request, cfg *Config) int64 {
	if r.sendBy == NoDeadline {
		return r.arrived + int64(cfg.HoldTimeout)
	}
	return min(r.sendBy, r.arrived+int64(cfg.HoldMaxTimeout), r.arrived+int64(cfg.MaxRequestAge)-1)
}

// pastDeadline reports whether r may no longer be sent at now.
func pastDeadline(r *request, now int64) bool { return r.sendBy != 0 && now >= r.sendBy }

// deadlineMsg is the message of the answer to a request whose consumer's deadline
// passed while it waited.
const deadlineMsg = "stormgate: not sent: the request's own timeout would have passed before the provider could answer " +
	"(hold.deadline_margin before the consumer's deadline); the provider never received it"
