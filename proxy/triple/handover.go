package triple

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/stormgate/stormgate/proxy"
	"github.com/stormgate/stormgate/proxy/h2"
)

// Handing HTTP/2 over in an upgrade (issue 27 item 5; docs/design.md §14.12): quiesce, then hand over
// connections at rest. A Dubbo connection crosses with everything in flight (proxy/handover.go); an HTTP/2
// connection in the middle of streams would need its whole state machine to cross, and a mistake there
// corrupts a stream. So before the freeze Stormgate stops starting calls on provider streams and waits,
// within h2QuiesceBudget, until no call is on one: then every HTTP/2 consumer connection is at rest, and
// what crosses is small and plain (h2.ConnState, and the calls that wait whole).
//
//	| what, at the freeze                         | crosses as                          | in the new image
//	|---------------------------------------------|-------------------------------------|-------------------------------
//	| a consumer connection (SETTINGS acked)      | h2.ConnState: settings, windows,    | h2.RestoreConn; its guards'
//	|                                             | stream states, last ids, GOAWAYs    | budgets start full
//	| its unread input (a partial frame, and what | SessionSnapshot.In                  | handled first, in order
//	| came during the freeze)                     |                                     |
//	| a consumer whose preface is not whole yet   | In, protocol unknown                | sniffed again
//	| a call that arrived during the quiesce, or  | H2CallSnapshot: head, DATA and      | waits for a provider stream,
//	| was held before it (waiting for a stream)   | trailers so far, its kept request   | as it did (hold.timeout from
//	|                                             | (sending again), its age            | its arrival)
//	| a call on a provider stream                 | never: the quiesce waits for it     | —
//	| answer DATA waiting for a consumer's window | never: the quiesce waits for it     | —
//	| the provider's HTTP/2 connections           | never: idle, they close at the exec | dialled anew (upstream.connections)
//	| a connection ending in a GOAWAY             | never: it closes at the exec        | —
//
// Calls that arrive during the quiesce wait (as they would for a stream), so consumers see the quiesce,
// the freeze and the exec as one pause, and no connection closes. A call still on a provider stream when
// the budget is up (a long stream, a consumer that does not read its answer) makes the upgrade fail:
// Freeze returns an error saying what was open, and everything resumes as before.

// h2QuiesceBudget bounds the wait for HTTP/2 calls on provider streams to end before a freeze: unary
// calls take milliseconds, and consumers' calls wait meanwhile.
const h2QuiesceBudget = time.Second

// h2RestGrace is how long, once no call is on a provider stream, a consumer connection may stay not at
// rest (its SETTINGS ACK not come, a header block begun and not finished) before the quiesce gives up on
// it: the listener is frozen by then, so a live consumer answers within a round trip; one that does not
// is closed with a GOAWAY rather than holding everyone's calls, or the upgrade, any longer.
const h2RestGrace = 100 * time.Millisecond

// h2Busy is what keeps HTTP/2 from being at rest.
type h2Busy struct {
	onStreams int    // calls on provider streams
	paused    int    // calls pausing before being sent again
	answering int    // calls whose answer is still going to their consumer
	notAtRest int    // consumer connections whose h2.Conn cannot be exported yet
	why       string // one of those connections' reasons
}

func (b h2Busy) none() bool { return b.onStreams+b.paused+b.answering+b.notAtRest == 0 }

func (b h2Busy) String() string {
	s := fmt.Sprintf("%d HTTP/2 calls on provider streams (streaming calls, or slow answers), %d pausing before a resend, "+
		"%d answers still going to consumers (consumers not reading), %d connections not at rest", b.onStreams, b.paused,
		b.answering, b.notAtRest)
	if b.why != "" {
		s += " (" + b.why + ")"
	}
	return s
}

// Quiesce stops HTTP/2 calls from taking provider streams and waits, within parent and h2QuiesceBudget,
// until HTTP/2 is at rest; consumer connections that stay not at rest for h2RestGrace once the calls are
// done are closed (closeRestless). With endOpen, the calls still open when the budget is up are ended
// (endOpenCalls) and the wait goes on for one more budget. On an error quiescing is off again.
func (x *h2Protocol) Quiesce(parent context.Context, endOpen bool) error {
	x.quiescing.Store(true)
	budget := time.NewTimer(h2QuiesceBudget)
	defer budget.Stop()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	var callsDone time.Time // when only connections not at rest were left
	for {
		// The pools' counts first: the scan of every consumer connection only once they are 0.
		if !x.poolsBusy() {
			b := x.busy()
			if b.none() {
				return nil
			}
			switch {
			case b.onStreams+b.paused+b.answering > 0:
				callsDone = time.Time{}
			case callsDone.IsZero():
				callsDone = time.Now()
			case time.Since(callsDone) >= h2RestGrace:
				x.closeRestless()
				continue
			}
		}
		expired := false
		select {
		case <-parent.Done():
			expired = true
		case <-budget.C:
			expired = true
			if endOpen {
				endOpen, expired = false, false
				n := x.endOpenCalls()
				x.env.Log().Warn("upgrade: ended the HTTP/2 calls still open after the quiesce's budget (--end-streams)",
					zap.Int("calls", n), zap.Duration("budget", h2QuiesceBudget))
				budget.Reset(h2QuiesceBudget)
			}
		case <-tick.C:
		}
		if expired {
			b := x.busy()
			x.Resume()
			return fmt.Errorf("HTTP/2 did not come to rest within %v: %v; nothing was handed over, try again, "+
				"or end those calls (sidecar upgrade --end-streams) or restart the sidecar", h2QuiesceBudget, b)
		}
	}
}

// h2EndedByUpgrade is the grpc-message of a call endOpenCalls ended.
const h2EndedByUpgrade = "stormgate: the sidecar is being upgraded and this call was still open after " +
	"the upgrade's 1 s wait (sidecar upgrade --end-streams); the connection stays, open the call again"

// endOpenCalls ends every HTTP/2 call that keeps the quiesce from coming to rest: on a provider stream, or
// with its answer still going to its consumer. The consumer gets grpc-status 14 UNAVAILABLE (after whatever
// answer it had), the provider's stream is reset with CANCEL. It returns how many it ended.
func (x *h2Protocol) endOpenCalls() int {
	var open []*h2Call
	var mine []*h2Call
	x.sessions.each(func(h *h2Session) {
		if h.consumer.Closing() {
			return
		}
		mine = mine[:0]
		h.mu.Lock()
		for c := range h.calls.Values() {
			if !c.done {
				mine = append(mine, c)
			}
		}
		h.mu.Unlock()
		h.hp.mu.Lock()
		for _, c := range mine {
			if c.up != nil && !c.upDone || !c.waiting && !c.paused {
				open = append(open, c)
			}
		}
		h.hp.unlock()
	})
	for _, c := range open {
		c.sess.hp.answerConsumed(c, c.sess.fail(c, proxy.ReplyUpgrade, h2EndedByUpgrade))
		c.sess.hp.cancel(c)
	}
	return len(open)
}

// Resume lets HTTP/2 calls take provider streams again and starts those that waited.
func (x *h2Protocol) Resume() {
	if !x.quiescing.CompareAndSwap(true, false) {
		return
	}
	now := x.env.Now()
	x.pools.each(func(hp *h2Pool) {
		var notes h2Notes
		hp.mu.Lock()
		hp.pumpLocked(now, &notes)
		hp.unlock()
		notes.run()
	})
}

// closeRestless closes, with a GOAWAY saying why, the HTTP/2 consumer connections that are not at rest
// (Quiesce). A consumer that never acknowledged Stormgate's SETTINGS gets SETTINGS_TIMEOUT (RFC 9113
// §6.5.3); one that began a header block and did not finish it, NO_ERROR: it may connect again. Their calls
// that waited are answered UNAVAILABLE as the connection closes (none reached a provider). They are
// counted as any connection closed after a GOAWAY (stormgate_downstream_closed_total{reason="http2_error"}).
func (x *h2Protocol) closeRestless() {
	x.sessions.each(func(h *h2Session) {
		if h.consumer.Closing() {
			return
		}
		h.mu.Lock()
		var err error
		if !h.closed && h.conn != nil {
			err = h.conn.AtRest()
		}
		if err != nil {
			code := h2.ErrCodeNo
			if !h.conn.Acked() {
				code = h2.ErrCodeSettingsTimeout
			}
			h.conn.GoAway(code, "stormgate is upgrading and the connection is not at rest")
			h.flushLocked()
		}
		h.mu.Unlock()
		if err != nil {
			x.env.Log().Warn("closing an HTTP/2 consumer that did not come to rest for an upgrade (GOAWAY sent)",
				zap.Stringer("peer", h.consumer.Remote()), zap.Duration("grace", h2RestGrace), zap.Error(err))
			h.closeAfterGoAway()
		}
	})
}

// poolsBusy reports whether some call is on a provider stream or pausing before a resend.
func (x *h2Protocol) poolsBusy() bool {
	busy := false
	x.pools.each(func(hp *h2Pool) {
		hp.mu.Lock()
		busy = busy || hp.streams > 0 || hp.prov.Hold().PausedCalls() > 0
		hp.unlock()
	})
	return busy
}

// busy counts what keeps HTTP/2 from being at rest, consumer connection by consumer connection.
func (x *h2Protocol) busy() h2Busy {
	var b h2Busy
	var calls []*h2Call
	var answering []bool
	x.sessions.each(func(h *h2Session) {
		if h.consumer.Closing() {
			return
		}
		calls, answering = calls[:0], answering[:0]
		h.mu.Lock()
		if h.closed || h.conn == nil {
			h.mu.Unlock()
			return
		}
		for c := range h.calls.Values() {
			calls = append(calls, c)
			answering = append(answering, h.answering(c))
		}
		if len(h.pend) > 0 {
			b.answering++
		}
		if err := h.conn.AtRest(); err != nil {
			b.notAtRest++
			b.why = err.Error()
		}
		h.mu.Unlock()
		h.hp.mu.Lock()
		for i, c := range calls {
			switch {
			case c.up != nil && !c.upDone:
				b.onStreams++
			case c.paused:
				b.paused++
			case answering[i] || !c.waiting: // its answer is on its way to the consumer
				b.answering++
			}
		}
		h.hp.unlock()
	})
	return b
}

// answering reports whether a call's answer has begun toward the consumer (under mu).
func (h *h2Session) answering(c *h2Call) bool {
	return c.headSent || len(c.out) > 0 || c.outEnd || c.trailers != nil
}

// errH2NotAtRest: a connection moved after the quiesce found everything at rest (ErrNotAtRest).
var errH2NotAtRest = proxy.ErrNotAtRest

// snapshot copies an HTTP/2 consumer connection at rest (the data plane frozen). in is what it read and
// did not handle (the stash). ok is false for a connection that does not cross (it ends in a GOAWAY).
func (h *h2Session) Snapshot(st *proxy.SessionSnapshot, in []byte, now int64) (ok bool, err error) {
	h.mu.Lock()
	if h.closed || h.consumer.Closing() {
		h.mu.Unlock()
		return false, nil
	}
	st.In = append(append([]byte(nil), h.in...), in...)
	if h.conn == nil { // the preface is not whole yet: sniffed again
		h.mu.Unlock()
		st.Proto = proxy.SnapUnknown
		return true, nil
	}
	cs, err := h.conn.Export()
	if err != nil {
		h.mu.Unlock()
		return false, fmt.Errorf("%w: %v", errH2NotAtRest, err)
	}
	hs := &proxy.H2SessionSnapshot{Conn: cs, Drain: h.drain, Final: h.final}
	calls := make([]*h2Call, 0, h.calls.Len())
	for c := range h.calls.Values() {
		if h.answering(c) || len(h.pend) > 0 {
			h.mu.Unlock()
			return false, fmt.Errorf("%w: an answer is still going to the consumer", errH2NotAtRest)
		}
		calls = append(calls, c)
	}
	reqBytes := make([]uint64, len(calls))
	for i, c := range calls {
		reqBytes[i] = c.reqBytes
	}
	h.mu.Unlock()
	slices.SortFunc(calls, func(a, b *h2Call) int { return int(a.down) - int(b.down) })
	hp := h.hp
	hp.mu.Lock()
	defer hp.unlock()
	for i, c := range calls {
		if !c.waiting || c.paused || c.up != nil {
			return false, fmt.Errorf("%w: a call is on a provider stream", errH2NotAtRest)
		}
		// The snapshot tells a call's In apart only whole: its consumer's bytes (Resending false), or a
		// request sent again (true: every window went back). Both at once, a call refused mid-body with
		// more of it come since, waits until it leaves the waiting list.
		if c.inFree > 0 && c.inFree < len(c.in) {
			return false, fmt.Errorf("%w: a call sent again is taking the rest of its body", errH2NotAtRest)
		}
		x := proxy.H2CallSnapshot{Stream: c.down, Age: time.Duration(now - c.arrived), Head: c.head, HeadEnd: c.headEnd,
			In: c.in, InEnd: c.inEnd, Resending: c.inFree > 0, Resends: c.resends,
			NotRunTries: c.notRunTries, ReqBytes: reqBytes[i]}
		if k := &c.req; !k.lost {
			x.Kept = &proxy.H2KeptSnapshot{Head: k.head, Body: k.body, Complete: k.complete}
		}
		hs.Calls = append(hs.Calls, x)
	}
	st.Proto, st.H2 = proxy.SnapH2, hs
	return true, nil
}

// Restore rebuilds an HTTP/2 consumer connection from a handover: its h2.Conn, and its waiting calls
// back in their pool's waiting list (their hold timers from their arrival).
func (x *h2Protocol) Restore(cons proxy.Consumer, up proxy.Upstream, st *proxy.SessionSnapshot, now int64) (proxy.Downstream, error) {
	hs := st.H2
	cfg := x.env.Config()
	hp, _ := up.(*h2Pool)
	if hp == nil {
		return nil, errors.New("an HTTP/2 consumer, but upstream.protocol no longer includes triple")
	}
	if hs == nil {
		return nil, errors.New("an HTTP/2 consumer without its HTTP/2 state")
	}
	conn, err := h2.RestoreConn(h2ConnConfig(cfg, h2.RoleServer), hs.Conn)
	if err != nil {
		return nil, err
	}
	h := newH2Session(cons, hp)
	h.conn, h.drain, h.final = conn, hs.Drain, hs.Final
	back := waitingConnBack(hs.Calls, conn.ConnHeld())
	for _, cs := range hs.Calls {
		c := &h2Call{sess: h, down: cs.Stream, arrived: now - int64(cs.Age), reqBytes: cs.ReqBytes,
			method: identifyH2(h.env, cs.Head)}
		h.calls.Add(c.down, c)
		h.consumer.CallBegan()
		inBack := 0
		if !cs.Resending {
			inBack = int(min(int64(len(cs.In)), back))
			back -= int64(inBack)
		}
		hp.adoptWaiting(c, cs, now, cfg, inBack)
	}
	return h, nil
}

// waitingConnBack is how many bytes of the waiting calls' request DATA (In, their consumer's own: not a
// request sent again) had their connection window handed back already, given held, what the restored
// connection's window still owes (h2.Conn.ConnHeld). At rest nothing but those calls holds consumer
// bytes, so held is the part of their In whose connection share did not go back: all of it from a build
// that kept both windows shut while a call waited, none from this one (h2Pool.data). Reading it off the
// connection's windows, not from a field of the snapshot, needs no change of the handover format and
// hands nothing back twice, nor loses any, whichever build wrote the snapshot. A build before this one
// restoring this one's snapshot hands those bytes' connection share back a second time when they leave:
// at most the waiting bytes (hold.max_bytes) more window, once.
func waitingConnBack(calls []proxy.H2CallSnapshot, held int64) int64 {
	var kept int64
	for _, x := range calls {
		if !x.Resending {
			kept += int64(len(x.In))
		}
	}
	return max(kept-held, 0)
}

// adoptWaiting puts a call from a handover in the waiting list, as open and resendLocked leave one, and
// starts it if a provider connection can take it: the pool dials as it is restored, so one may be up
// already, and nothing else would start the call until another stream ended (calls waited up to 0.8 s).
// inBack is how much of its In had its connection window handed back (waitingConnBack).
func (hp *h2Pool) adoptWaiting(c *h2Call, x proxy.H2CallSnapshot, now int64, cfg *proxy.Config, inBack int) {
	env := hp.env
	c.sendBy = h2SendBy(x.Head, c.arrived, cfg)
	var notes h2Notes
	// In a closure: a deferred notes.run() would copy notes now, empty, and the call started below
	// would never hand its consumer's windows back (nor a call found late be answered).
	defer func() { notes.run() }()
	hp.mu.Lock()
	defer hp.unlock()
	defer hp.pumpLocked(now, &notes)
	// InTrail and Kept.Trailers come only from a build before request trailers stopped being forwarded:
	// they ended the request, and end it here.
	c.head, c.headEnd, c.inEnd = x.Head, x.HeadEnd, x.InEnd || x.InTrail != nil
	c.resends, c.notRunTries = x.Resends, x.NotRunTries
	c.req = h2Kept{lost: true}
	if k := x.Kept; k != nil {
		c.req = h2Kept{head: k.Head, body: k.Body, complete: k.Complete || k.Trailers != nil}
		env.Budget().Force(len(k.Body))
	}
	// A request sent again: all of In went back to the consumer's windows when it first left (a build
	// before this one wrote In as the kept body itself, the same bytes).
	c.in, c.inBack = x.In, inBack
	if x.Resending {
		c.inFree, c.inBack = len(x.In), 0
	}
	env.Budget().Force(len(c.in))
	c.waiting = true
	c.waited.Store(true)
	hp.prov.Hold().ReholdCall(c, &c.sess.WaitAccount, h2CallSize(c.head, c.in), false)
	hp.initTimersLocked(c)
	env.Wheel().Schedule(&c.hold, max(time.Duration(h2HoldUntil(c, cfg)-now), time.Millisecond))
}
