package proxy

import (
	"context"
	"net/netip"
	"time"

	"go.uber.org/zap"

	"github.com/stormgate/stormgate/keepalive"
	"github.com/stormgate/stormgate/proxy/wire"
)

// The protocol plug-in API (design §14.6, step 5b). A protocol other than the Dubbo 2 codec (HTTP/2 for
// Triple and gRPC today) is handed these types and reaches the core through them alone: the core keeps
// the consumer connections' lifecycle, the pools and their slots, the hold queue, the writers, the
// buffer budget, drain and handover, and the protocol turns bytes into calls and answers into bytes.
// This is the protocol→core half; protocol.go is the core→protocol half (Protocol, Downstream, Upstream).
// The HTTP/2 files (h2*.go) still live in this package; what they still reach past the API is counted
// in §14.6 (go run ./internal/seamcount -v ./proxy).

// Env is the server-wide part of the API: the clock and its timing wheel, the settings in force, the
// log, the buffer budget and the task group Close waits for. One per Server, passed by value; every
// method is safe for concurrent use.
type Env struct{ s *Server }

// Now is the server's clock (the wheel's: a ManualClock in tests), in nanoseconds.
func (e Env) Now() int64 { return e.s.now() }

// Config is the settings in force now. A live change (xDS, file) swaps the whole value; a caller that
// reads several fields takes one Config and reads them from it.
func (e Env) Config() *Config { return e.s.cfg.Load() }

// Log is the server's logger.
func (e Env) Log() *zap.Logger { return e.s.log }

// Wheel is the server's timing wheel: every timer of every connection is on it (keepalive.Timer).
func (e Env) Wheel() *keepalive.Wheel { return e.s.wheel }

// Budget bounds the bytes kept because a peer is slow or absent (limits.max_buffered_bytes).
func (e Env) Budget() *Budget { return &e.s.budget }

// Spawn runs f on its own goroutine, one that Close waits for.
func (e Env) Spawn(f func()) { e.s.spawn(f) }

// After is time.After on the server's clock.
func (e Env) After(d time.Duration) <-chan time.Time { return e.s.after(d) }

// Consumer is one consumer connection as a protocol sees it. The core owns its socket and writer (bounded by
// limits.max_queued_bytes_per_connection), its idle timer, its count of calls in flight (what a drain
// waits for) and its close. A Consumer is a handle, passed by value; every method is safe from any
// goroutine.
type Consumer struct{ s *session }

// Write hands b to the connection's writer, which copies what the socket does not take at once. A consumer
// whose unread bytes pass limits.max_queued_bytes_per_connection, or the buffer budget, is closed as a
// slow reader.
func (c Consumer) Write(b []byte) { c.s.write(b) }

// Remote is the consumer's address.
func (c Consumer) Remote() netip.AddrPort { return c.s.remote }

// Closing reports whether the connection is closing or in its lingering close: what it sends from now on
// is not read.
func (c Consumer) Closing() bool { return c.s.closing.Load() || c.s.linger.Load() != nil }

// CloseWith closes the connection at once, counting why (stormgate_downstream_closed_total{reason}). The
// first reason given wins.
func (c Consumer) CloseWith(reason CloseReason) { c.s.closeWith(reason) }

// Linger closes the connection so that what was written last (an HTTP/2 GOAWAY saying why) reaches the
// consumer: a lingering close, as Apache's and nginx's. Its input is dropped from now on; once the writer
// has written everything the write side is shut (FIN after the last bytes); the socket closes when the
// consumer closes its side, or after d on the server's clock if it does not. Either way it counts as
// reason. Closing at once lost the last bytes twice over: the writer drops what it still holds, and
// close(2) with unread input in the receive queue sends RST, which discards what the kernel had not sent.
func (c Consumer) Linger(reason CloseReason, d time.Duration) { c.s.lingerClose(reason, d) }

// Lingering reports whether Linger was called and its bound is armed (the close waits for the consumer,
// or the bound).
func (c Consumer) Lingering() bool {
	l := c.s.linger.Load()
	return l != nil && l.timer.Scheduled()
}

// Touch tells the idle timer that the consumer was heard from at now.
func (c Consumer) Touch(now int64) { c.s.idle.Touch(now) }

// CallBegan counts a call the consumer opened: it is in flight until CallEnded, exactly once.
func (c Consumer) CallBegan() {
	c.s.began()
	c.s.counts.requests.Add(1)
}

// CallEnded counts a call of the consumer ended, whatever ended it.
func (c Consumer) CallEnded() { c.s.settled() }

// Decided says the connection speaks the protocol (its whole greeting came; HTTP/2: the client preface):
// it moves from the unknown series of stormgate_downstream_connections to the protocol's. Once, from Input.
func (c Consumer) Decided() { c.s.decided(protoH2) }

// Foreign answers bytes a connection the protocol claimed began with and that are not its greeting after
// all, as the Dubbo path answers foreign bytes (a log line, an HTTP/1 request's 400, the close). From Input.
func (c Consumer) Foreign(b []byte) {
	err := c.s.srv.notThisCodec(b)
	if err == nil { // bytes both protocols could begin with: not a codec this proxy has (Dubbo's)
		err = wire.ErrBadMagic
	}
	c.s.dubbo.badInput(wire.Frame{}, err)
}

// InitWriter makes w the writer of socket fd (writer.go: its ownership contract), telling owner what the
// caller of Send cannot see. mustTake is for an owner that cannot take a frame back once made (HTTP/2: its
// Conn has counted the frame in its windows): the writer then never refuses one, and charges what waits to
// the budget by force. Before w is used, once.
func (e Env) InitWriter(w *Writer, fd int, owner WriterOwner, mustTake bool) {
	*w = Writer{fd: fd, env: &e.s.wenv, owner: owner, mustTake: mustTake}
}

// The core's counters a protocol adds to. Each is counted before the consumer can see what it counts.

// CountLocalReply counts a call Stormgate answered itself (stormgate_local_replies_total{reason}).
func (e Env) CountLocalReply(r ReplyReason) { e.s.m.localReplies[r].Inc() }

// CountHoldOutcome counts how a wait in the hold queue ended (stormgate_hold_outcomes_total{outcome}).
func (e Env) CountHoldOutcome(o HoldOutcome) { e.s.m.holdOutcome[o].Inc() }

// CountNotRun counts a provider's answer that says it did not run a call (why: the answer, one of the
// reasons the protocol listed at start or "unknown"), and what Stormgate did with it
// (stormgate_not_executed_total).
func (e Env) CountNotRun(why string, o NotRunOutcome) { e.s.m.life.notRunCounter(why, o).Inc() }

// CountHeartbeatSent counts a heartbeat Stormgate sent a provider itself (an HTTP/2 PING).
func (e Env) CountHeartbeatSent() { e.s.m.hbSent.Inc() }

// Provider is one provider address's pool as a protocol sees it: the core keeps its slots' lifecycle
// (RunSlot), its hold queue, its warm-up ramp, its readiness and the sweep that finds hung connections.
// A handle, passed by value; every method is safe from any goroutine.
type Provider struct{ p *pool }

// Addr is the provider's address, host:port.
func (pr Provider) Addr() string { return pr.p.addr }

// Hold is the provider's hold queue, one for every protocol.
func (pr Provider) Hold() *HoldQueue { return &pr.p.hold }

// Context ends when the pool closes.
func (pr Provider) Context() context.Context { return pr.p.ctx }

// ConnChanged says that a connection of the protocol became usable, stopped being usable or hung: the
// core counts the provider's connections again (the readiness gauges and /ready), and the first usable
// connection after none starts the warm-up ramp. Never under a lock the core's connection hooks take.
func (pr Provider) ConnChanged() { pr.p.connChanged() }

// WarmAllow reports whether the warm-up ramp (upstream.warmup) lets one more call go to the provider now;
// always true outside a ramp. A call it holds back waits, and the protocol asks again after WarmRetry.
func (pr Provider) WarmAllow() bool { return pr.p.warmAllow() }

// WatchCalls starts the pool's once-a-second sweep (hang detection) if it is not running: calls are on
// the provider's connections. The sweep stops itself when none are.
func (pr Provider) WatchCalls() { pr.p.armSweep() }

// Per-method metrics and the access log (methods.go): a protocol names its calls with Method, counts a
// wait in the hold queue with CallHeld, and each call's end, once, with CallEnded, before the consumer
// can see it.

// Method is the call table's index of the call named service, version, group and method (an HTTP/2
// head's names): the same names intern to the same index whichever protocol called. MethodUnknown
// (the "unknown" row) when per-method metrics are off (limits.max_methods 0), the names are too long, or the
// table is full. No allocation for names seen before.
func (e Env) Method(service, version, group, method string) uint32 {
	if e.s.cfg.Load().MaxMethods == 0 {
		return MethodUnknown
	}
	return indexNames(&e.s.calls.table, names[string]{service, version, group, method})
}

// Status is the status vocabulary's index of status i of protocol p's list (the one it gave New:
// HTTP/2's is h2.StatusNames).
func (e Env) Status(p Protocols, i int) int { return e.s.statuses.index(statusList(p), i) }

// CallHeld counts a call of method entering the hold queue; again: once more, after it was sent.
func (e Env) CallHeld(method uint32, again bool) { e.s.noteHeld(callRef{method: method}, again) }

// CallEnd is how one call ended, for CallEnded.
type CallEnd struct {
	Method    uint32      // from Method
	Status    int         // from Status
	Exception bool        // the answer carries a business exception
	By        ReplyReason // a ReplyReason when Stormgate answered, else NoLocalReply or ConsumerEnded
	Held      bool        // it waited in the hold queue
	Arrived   int64       // when its request began, on the server's clock
	ReqBytes  uint64      // the request's payload bytes
	RespBytes uint64      // the answer's payload bytes
}

// CallEnded counts a call's end, once: on sh (the protocol's shard for the provider's connections)
// when the provider answered or reset it, on the server's own when Stormgate answered; and offers it to
// the access log. Before the consumer can see the end.
func (e Env) CallEnded(sh *MethodShard, c Consumer, end CallEnd) {
	cfg := e.s.cfg.Load()
	if cfg.MaxMethods == 0 && !cfg.AccessLog.Enabled {
		return
	}
	if end.By < nReplyReasons {
		sh = &e.s.calls.local
	}
	call := callRef{method: end.Method, size: uint32(min(end.ReqBytes, 1<<32-1))}
	if end.Held {
		call.hold = callHeld
	}
	e.s.callEnded(cfg, sh, c.s, call, end.Status, end.Exception, end.By, time.Duration(e.s.now()-end.Arrived),
		int(min(end.RespBytes, 1<<31-1)))
}

// Announced reports whether Stormgate has told its consumers that it is draining (Server.Announce, or
// Drain): a consumer connection that begins now is told at once.
func (e Env) Announced() bool { return e.s.announced.Load() }

// Draining reports whether the drain proper has begun (Server.Drain, after drain.min_duration).
func (e Env) Draining() bool { return e.s.draining.Load() }
