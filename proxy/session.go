package proxy

import (
	"context"
	"errors"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/cloudwego/netpoll"
	"go.uber.org/zap"

	"github.com/stormgate/stormgate/keepalive"
)

// session is one consumer connection. Its lifecycle:
//
//	| step        | who runs it                    | what it does
//	|-------------|--------------------------------|-------------------------------------------------------------
//	| ServeFD     | admission goroutine            | wraps the fd, sets the handlers, arms the timer; closes a
//	|             |                                | consumer that left before its handlers were set
//	| onRequest   | netpoll, one at a time         | gives the bytes to the connection's protocol, its Downstream
//	|             |                                | (Dubbo's: dubboconsumer.go; HTTP/2's: proxy/triple), once the
//	|             |                                | first bytes have decided which (sniff.go)
//	| write       | any goroutine                  | through the session's writer: never blocks the caller
//	| onTimer     | keepalive wheel goroutine      | the idle timeout (a protocol keeps its own timers)
//	| closeWith   | anyone, the first caller wins  | records the reason, shuts the socket down (writer.close)
//	| onClosed    | netpoll close callback, once   | on the poller that saw the hangup: closes the writer (no byte
//	|             |                                | reaches a reused fd), unregisters, counts; before netpoll closes
//	|             |                                | the fd, never during onRequest
//
// The session keeps no index of its requests: they live in the hold queue or in
// upstream pending tables and are settled there (see pending.go).
//
// Every consumer connection holds one, so its size is part of what an idle consumer
// costs (docs/benchmarks.md, ≤ 4 KiB with netpoll's share): the fd lives in w, and
// heartbeat replies are built in pooled buffers (replyBufs).
type session struct {
	srv    *Server
	pool   *pool
	conn   netpoll.Connection
	remote netip.AddrPort

	w        Writer
	idle     keepalive.Idle
	timer    keepalive.Timer
	inflight atomic.Int32 // accepted two-way requests not yet answered
	counts   sessionCounters

	wait    consumerWait  // its requests waiting for the provider; backpressure (backpressure.go)
	proto   atomic.Uint32 // protoUnknown until decided, once: by ServeFD (a Dubbo-only provider) or the first bytes (sniff.go)
	down    Downstream    // its protocol's side, set once before proto (sniff.go); nil until the first bytes decide
	dubbo   dubboConsumer // Dubbo's Downstream, in place: down points at it when the consumer speaks Dubbo
	closing atomic.Bool
	closed  atomic.Bool
	reason  atomic.Uint32             // CloseReason+1; 0 until closeWith
	linger  atomic.Pointer[lingering] // set once by Consumer.Linger: the lingering close under way
}

// lingering is a consumer connection's lingering close (Consumer.Linger): its input is dropped, its
// write side shut once the writer has written everything, and the socket closed when the consumer closes
// its side, or at the timer.
type lingering struct {
	reason CloseReason
	timer  keepalive.Timer
}

func newSession(srv *Server, p *pool, conn netpoll.Connection, fd int, remote netip.AddrPort) *session {
	s := &session{srv: srv, pool: p, conn: conn, remote: remote}
	s.w = Writer{fd: fd, env: &srv.wenv, owner: s}
	s.dubbo.init(s)
	s.idle.Touch(srv.now())
	s.timer.Init(s.onTimer)
	return s
}

func (s *session) onRequest(_ context.Context, conn netpoll.Connection) error {
	r := conn.Reader()
	if s.srv.handover.holding() { // a handover: keep the bytes for whoever serves next
		s.srv.handover.stash(s, r)
		s.srv.handover.park()
		return nil
	}
	s.input(r)
	_ = r.Release()
	return nil
}

// input gives r to the connection's protocol, once its first bytes have decided it (sniff.go).
func (s *session) input(r ByteSource) {
	if s.down == nil && !s.sniff(r) {
		return
	}
	s.down.Input(r, s.srv.now())
}

// write sends b to the consumer without ever blocking the caller. A consumer whose
// unread responses pass limits.max_queued_bytes_per_connection, or that would take
// the process over its buffer budget, is closed.
func (s *session) write(b []byte) {
	_, _, err := s.w.Send(b, s.srv.cfg.Load().MaxQueuedBytesPerConn)
	switch {
	case err == nil, errors.Is(err, errWriterClosed):
	case errors.Is(err, errQueueFull), errors.Is(err, errOverBudget):
		s.srv.log.Warn("closing consumer that does not read its responses",
			zap.Stringer("peer", s.remote), zap.Int("queued_bytes", s.w.Queued()), zap.Error(err))
		s.closeWith(CloseSlowReader)
	default:
		s.closeWith(ClosePeer)
	}
}

// WriteStalled implements writerOwner: a consumer that does not read is bounded by
// limits.max_queued_bytes_per_connection (write), not by a deadline.
func (s *session) WriteStalled() {}

// WriteFailed implements writerOwner: the flusher could not write to the consumer.
func (s *session) WriteFailed(error) {
	if l := s.linger.Load(); l != nil {
		s.closeWith(l.reason)
		return
	}
	s.closeWith(ClosePeer)
}

// WriterIdle implements writerOwner: a session has no queue of its own (send never
// refuses for a busy writer), so it asks only to shut the write side of a connection
// in its lingering close once everything is written (Consumer.Linger).
func (s *session) WriterIdle() {
	if s.linger.Load() != nil {
		s.w.ShutdownWrite()
	}
}

// lingerClose begins a lingering close (Consumer.Linger).
func (s *session) lingerClose(reason CloseReason, d time.Duration) {
	l := &lingering{reason: reason}
	l.timer.Init(func() { s.closeWith(reason) })
	if !s.linger.CompareAndSwap(nil, l) {
		return
	}
	s.srv.wheel.Schedule(&l.timer, d)
	if s.w.Claimable() { // nothing waits in the writer: what was written is in the kernel's hands
		s.w.ShutdownWrite()
	}
	// Else writerIdle shuts the write side once the writer is idle.
}

// began counts a call accepted from this consumer: from here on it is in flight, and Drain waits for it.
func (s *session) began() { s.inflight.Add(1) }

// settled counts a call of this consumer ended (answered, refused, or ended by the consumer), and tells
// a waiting Drain when it was the consumer's last.
func (s *session) settled() {
	if s.inflight.Add(-1) == 0 && s.srv.draining.Load() {
		s.srv.signalDrain()
	}
}

// closeWith closes the consumer connection, recording why. The first reason wins.
// It shuts the socket down (writer.close); netpoll's poller runs onClosed when it
// sees the hangup. Safe from any goroutine, a handler of this connection included.
func (s *session) closeWith(reason CloseReason) {
	if !s.closing.CompareAndSwap(false, true) {
		return
	}
	s.reason.Store(uint32(reason) + 1)
	s.w.Close()
}

// onClosed runs once, from netpoll's close callback: before netpoll closes the fd,
// never while onRequest runs.
func (s *session) onClosed(netpoll.Connection) error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	s.closing.Store(true)
	s.w.Close()
	srv := s.srv
	reason, known := ClosePeer, true
	if r := s.reason.Load(); r != 0 {
		reason = CloseReason(r - 1)
	} else if l := s.linger.Load(); l != nil {
		reason = l.reason // it closed its side after what the lingering close let it read
	} else {
		known = false // the consumer closed
	}
	if s.down != nil && s.down.Closed() && !known {
		reason = CloseTruncated
		srv.log.Warn("consumer closed in the middle of a frame", zap.Stringer("peer", s.remote))
	}
	s.forgetPause()
	srv.wheel.Stop(&s.timer)
	if l := s.linger.Load(); l != nil {
		srv.wheel.Stop(&l.timer)
	}
	srv.sessions.remove(s)
	if srv.draining.Load() {
		srv.signalDrain()
	}
	p := s.proto.Load()
	srv.m.downConns[p].Dec()
	srv.m.downClosed[reason][p].Inc()
	if srv.opts.OnConnClosed != nil {
		srv.opts.OnConnClosed()
	}
	return nil
}

// onTimer runs on the wheel goroutine: the idle timeout. It re-arms itself for what is left.
// A consumer waiting for an answer is not idle, whatever its protocol: it sends nothing
// meanwhile (an HTTP/2 consumer has no heartbeat of its own, a Dubbo one may have turned
// its heartbeats off), and closing it would lose the answer.
func (s *session) onTimer() {
	t := s.srv.cfg.Load().DownstreamIdleTimeout
	if s.closing.Load() || t <= 0 {
		return
	}
	rem := s.idle.Remaining(s.srv.now(), t)
	if rem <= 0 && s.inflight.Load() > 0 {
		rem = t
	}
	if rem <= 0 {
		s.closeWith(CloseIdle)
		return
	}
	s.srv.wheel.Schedule(&s.timer, rem)
}
