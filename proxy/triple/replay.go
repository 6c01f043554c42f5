package triple

import (
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/stormgate/stormgate/proxy"
	"github.com/stormgate/stormgate/proxy/h2"
)

// Sending an HTTP/2 call again (issue 27): a call whose provider stream ended in a way that
// proves the provider never processed it goes back to the waiting list and is sent again on a fresh
// stream, as Dubbo's re-holds do (proxy/hold.go, proxy/notrun.go). Only these prove it:
//
//	| what happened to the provider stream             | rule                        | outcome label      | pause
//	|--------------------------------------------------|-----------------------------|--------------------|-------------------
//	| reset by the provider with REFUSED_STREAM        | RFC 9113 §8.7: not processed| reheld_refused     | backoff_base,
//	|                                                  |                             |                    | doubling per try
//	| above the last stream id of the provider's GOAWAY| RFC 9113 §6.8: not processed| reheld_refused     | none
//	| its connection died before any of its bytes      | never left Stormgate        | reheld_unsent      | none
//	| reached the kernel                               |                             |                    |
//	| its connection died, and the provider's kernel   | proxy.ReadProof: none of it | reheld_unseen      | none
//	| says its application read none of the call       | reached the application     |                    |
//	| answered with a not-executed head (h2.NotRun)    | the provider's own words,   | reheld_not_executed| backoff_base,
//	| within hold.not_executed_window of the           | within the window only      |                    | doubling per try
//	| connection's SETTINGS, or of such an answer for  | (hold.not_executed_retries) |                    |
//	| a path it served on the connection (unexporting) |                             |                    |
//
// and only while all of this holds: all of the request that came so far was kept (at most ReplaySize
// bytes of DATA, charged to limits.max_buffered_bytes while kept requests use less than half of it), no
// answer head came from the provider, the call has time left of hold.timeout counted from its arrival,
// the waiting list has room (hold.max_requests), and the pool is not closing. Anything else ends as
// before: the provider's reset, or grpc-status 14 with a message.
//
// The request need not be whole: a call refused while the rest of its body is still on its way goes
// out again with what came, and the rest follows as the consumer sends it (on the new stream, or behind
// the copy while the call waits), its windows handed back as a first send's are. A refusal proves the
// provider never processed any of the stream, so this holds for streaming calls too; what bounds them is
// the kept size, which a long stream passes soon after it starts.
//
// The kept request is the consumer's head and DATA as they arrived (request trailers only end it: they are
// not forwarded, session.go), kept from the head's arrival until the provider's answer head (or the
// call's end). A call sent again carries a copy of it in c.in (resendLocked), whose leading c.inFree bytes
// do not touch the consumer's flow-control windows when they leave: they were handed back when the bytes
// first went out. Only what the consumer sends after that is its to get back.

// h2Kept is a call's request as its consumer sent it. Under the pool's mu.
type h2Kept struct {
	head     []h2.HeaderField
	body     []byte
	complete bool // END_STREAM seen
	lost     bool // too large, or the budget refused it: the call cannot be sent again
}

// h2MaxResends bounds how often one call is sent again, whatever proves it unprocessed: a provider that
// refuses every stream must not keep a call circling until its hold ends.
const h2MaxResends = 10

// keepHeadLocked starts keeping a call's request at its head.
func (hp *h2Pool) keepHeadLocked(c *h2Call, fields []h2.HeaderField, end bool) {
	c.req.head, c.req.complete = slices.Clone(fields), end
}

// keepBodyLocked keeps request DATA (end: END_STREAM came with it).
func (hp *h2Pool) keepBodyLocked(c *h2Call, data []byte, end bool) {
	k := &c.req
	if k.lost || c.answered {
		return
	}
	if len(k.body)+len(data) > proxy.ReplaySize || len(data) > 0 && !hp.keepable(len(data)) { // an empty END_STREAM keeps nothing
		hp.forgetLocked(c)
		k.lost = true
		return
	}
	k.body = append(k.body, data...)
	k.complete = end
}

// keepable charges n bytes of a kept request to the budget, while kept requests leave at least half of it
// to what must be buffered (answers for slow consumers, requests for a slow provider).
func (hp *h2Pool) keepable(n int) bool {
	b := hp.env.Budget()
	if b.InUse()+int64(n) > b.Limit()/2 {
		return false
	}
	return b.TryReserve(n)
}

// forgetLocked drops what a call kept: the provider answered it, or it ended. A call sent again carries
// its own copy of the kept body (c.in, resendLocked), so what the provider is still owed of it goes on
// being sent: dropping the kept body with it ended a request early, the provider getting the first bytes
// and END_STREAM (TestH2AdvResentBodyCutAtTheAnswerHead).
func (hp *h2Pool) forgetLocked(c *h2Call) {
	hp.env.Budget().Release(len(c.req.body))
	c.req = h2Kept{lost: true}
}

// answerHeadLocked notes the provider's answer head for c; true when it proved the call unprocessed
// and the call went back to waiting (the head is not delivered).
func (u *h2Upstream) answerHeadLocked(c *h2Call, fields []h2.HeaderField, now int64, notes *h2Notes) bool {
	hp := u.hp
	env := hp.env
	why := h2.NotRun(fields)
	if why == "" {
		c.answered = true
		if st, _ := h2.HTTPStatus(fields); st == 200 {
			u.servedLocked(c.path)
		}
		hp.forgetLocked(c)
		return false
	}
	if _, ok := u.served[c.path]; ok {
		// It served the path on this connection and now says it does not: it is unexporting it (a
		// dubbo-go provider's last instant, a Java 3.3 provider from its unexport to its GOAWAY). The
		// window opens from here, as at Dubbo's READONLY.
		u.notRunFrom = now
	}
	cfg := env.Config()
	outcome := proxy.NotRunPassedOn
	switch d := resendPause(cfg, c.notRunTries); {
	case cfg.NotExecutedWindow <= 0 || now-u.notRunFrom >= int64(cfg.NotExecutedWindow):
		outcome = proxy.NotRunOutsideWindow
	case c.notRunTries < cfg.NotExecutedRetries && hp.canResendLocked(c, now, d):
		u.detachLocked(c, notes)
		hp.resendLocked(c, now, d, proxy.HoldReheldNotRun)
		c.notRunTries++
		env.CountNotRun(why, proxy.NotRunReheld)
		if c.notRunTries == 1 {
			env.Log().Debug("the provider answered that it does not serve the call's path yet; holding it and retrying",
				zap.String("provider", hp.prov.Addr()), zap.String("answer", why), zap.Duration("pause", d))
		}
		return true
	}
	env.CountNotRun(why, outcome)
	c.answered = true
	hp.forgetLocked(c)
	return false
}

// maxServedPaths bounds the paths a provider connection remembers having served (answerHeadLocked): a
// provider's services and methods, not its consumers' mistakes.
const maxServedPaths = 256

// servedLocked notes that the provider answered path on this connection (:status 200, not a
// not-executed form).
func (u *h2Upstream) servedLocked(path string) {
	if _, ok := u.served[path]; ok || path == "" || len(u.served) >= maxServedPaths {
		return
	}
	if u.served == nil {
		u.served = make(map[string]struct{})
	}
	u.served[path] = struct{}{}
}

// resendPause is the pause before the n+1st try after a refusal: backoff_base, doubling, capped at
// backoff_max.
func resendPause(cfg *proxy.Config, n int) time.Duration {
	d := cfg.BackoffBase << min(n, 20)
	if d > cfg.BackoffMax || d <= 0 {
		d = cfg.BackoffMax
	}
	return d
}

// canResendLocked reports whether the rules above let a call whose provider stream ended unprocessed be
// sent again after pause.
func (hp *h2Pool) canResendLocked(c *h2Call, now int64, pause time.Duration) bool {
	cfg := hp.env.Config()
	k := &c.req
	return !hp.closed && !k.lost && !c.answered && c.resends < h2MaxResends &&
		now+int64(pause) < h2HoldUntil(c, cfg) &&
		hp.prov.Hold().Len() < cfg.HoldMaxRequests
}

// resendLocked puts a call canResendLocked allowed, detached from its provider stream, back to waiting
// with its kept request, after pause.
func (hp *h2Pool) resendLocked(c *h2Call, now int64, pause time.Duration, why proxy.HoldOutcome) {
	env := hp.env
	cfg := env.Config()
	k := &c.req
	until := h2HoldUntil(c, cfg)
	c.resends++
	c.up, c.upID, c.upDone = nil, 0, false
	c.head, c.headEnd = k.head, k.complete && len(k.body) == 0
	// Its own copy: the kept body stays for a further resend, and grows with what the consumer still sends,
	// which waits behind the copy in c.in as a first send's bytes do. Forced: the bytes are in Stormgate
	// already, at most ReplaySize a call, and kept requests use at most half of the budget (keepable).
	c.in, c.inEnd = slices.Clone(k.body), k.complete && len(k.body) > 0
	c.inFree, c.inBack = len(k.body), 0
	env.Budget().Force(len(k.body))
	c.waiting = true
	env.CallHeld(c.method, true)
	env.CountHoldOutcome(why)
	hp.initTimersLocked(c)
	env.Wheel().Schedule(&c.hold, time.Duration(until-now))
	c.paused = pause > 0
	hp.prov.Hold().ReholdCall(c, &c.sess.WaitAccount, h2CallSize(c.head, c.in), c.paused)
	if c.paused {
		env.Wheel().Schedule(&c.retry, pause)
	}
}

// resendOrForgetLocked sends a detached call again if the rules allow (true), else drops its kept
// request (the caller ends the call toward the consumer).
func (hp *h2Pool) resendOrForgetLocked(c *h2Call, now int64, pause time.Duration, why proxy.HoldOutcome) bool {
	if hp.canResendLocked(c, now, pause) {
		hp.resendLocked(c, now, pause, why)
		return true
	}
	hp.forgetLocked(c)
	return false
}

// initTimersLocked sets a call's hold and retry timers up, once.
func (hp *h2Pool) initTimersLocked(c *h2Call) {
	if c.timers {
		return
	}
	c.timers = true
	c.hold.Init(func() { hp.expire(c) })
	c.retry.Init(func() { hp.unpause(c) })
}

// unpause puts a call whose pause ended in the waiting list, and starts what can start.
func (hp *h2Pool) unpause(c *h2Call) {
	var notes h2Notes
	hp.mu.Lock()
	if c.paused {
		hp.unpauseLocked(c)
		hp.prov.Hold().UnpauseCall(c)
		hp.pumpLocked(hp.env.Now(), &notes)
	}
	hp.unlock()
	notes.run()
}

// unpauseLocked ends c's pause, if it has one (the caller moves it in the hold queue).
func (hp *h2Pool) unpauseLocked(c *h2Call) {
	if c.paused {
		c.paused = false
		hp.env.Wheel().Stop(&c.retry)
	}
}

// leftLocked notes that n bytes at the front of c.in left Stormgate's hands (sent, or dropped): released
// from the budget, and handed back to the consumer's windows, but for the bytes of a request sent again
// (c.inFree), whose windows went back when they first left. Of the bytes kept while the call waited
// (c.inBack, next) only the stream's window is left to hand back.
func (hp *h2Pool) leftLocked(c *h2Call, n int, notes *h2Notes) {
	free := min(n, c.inFree)
	c.inFree -= free
	owed := n - free
	back := min(owed, c.inBack)
	c.inBack -= back
	notes.add(c, owed-back, back)
	hp.env.Budget().Release(n)
}
