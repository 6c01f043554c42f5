package proxy

import (
	"context"
	"errors"
	"math"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudwego/netpoll"
	"go.uber.org/zap"

	"github.com/stormgate/stormgate/keepalive"
	"github.com/stormgate/stormgate/proxy/wire"
)

// session is one consumer connection. Its lifecycle:
//
//	| step        | who runs it                    | what it does
//	|-------------|--------------------------------|-------------------------------------------------------------
//	| ServeFD     | admission goroutine            | wraps the fd, sets the handlers, arms the timer; closes a
//	|             |                                | consumer that left before its handlers were set
//	| onRequest   | netpoll, one at a time         | cuts frames without waiting for bytes that have not arrived;
//	|             |                                | answers heartbeats; forwards requests to the pool (an HTTP/2
//	|             |                                | consumer's bytes go to sniff.go and proxy/triple/session.go instead)
//	| write       | any goroutine                  | through the session's writer: never blocks the caller
//	| onTimer     | keepalive wheel goroutine      | idle timeout; a frame left unfinished for frame_read_timeout
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

	rd       frameReader
	w        Writer
	idle     keepalive.Idle
	timer    keepalive.Timer
	inflight atomic.Int32 // accepted two-way requests not yet answered
	counts   sessionCounters

	wait    consumerWait  // its requests waiting for the provider; backpressure (backpressure.go)
	proto   atomic.Uint32 // protoUnknown until decided, once: by ServeFD (a Dubbo-only provider) or the first bytes (sniff.go)
	down    Downstream    // the protocol state of a consumer Server.plugin claimed, set by the handler before proto; nil for Dubbo
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
	if s.proto.Load() != protoDubbo && s.otherProtocol(r) {
		_ = r.Release()
		return nil
	}
	s.consume(r, true)
	_ = r.Release()
	return nil
}

// consume handles every whole frame available in r and keeps a partial one; with
// canPause (r is netpoll's, which keeps what is left) it stops after a frame that put
// the consumer over its backpressure bound, once reading is paused.
func (s *session) consume(r ByteSource, canPause bool) {
	srv := s.srv
	cfg := srv.cfg.Load()
	now := srv.now()
	s.idle.Touch(now)
	wasPartial := s.rd.partialSince() != 0
	for !s.closing.Load() {
		f, frame, res, err := s.rd.next(r, srv.codec, cfg.MaxFrameBytes, false, &srv.budget, now)
		if res == readMore {
			break
		}
		switch res {
		case readFrame:
			s.handle(f, frame, cfg, now)
			if canPause && s.shouldPause(cfg) && s.pauseRead() {
				return // the rest stays in netpoll's buffer until ResumeRead
			}
		case readSkipped: // no budget to reassemble it: its bytes are discarded as they come
			srv.log.Warn("refusing a request: out of buffer memory (limits.max_buffered_bytes)",
				zap.Stringer("peer", s.remote), zap.Int("frame_bytes", f.Len))
			if f.Kind == wire.FrameRequest {
				s.replyError(f, callRef{}, now, wire.FailOverloaded, "stormgate: out of buffer memory (limits.max_buffered_bytes)", ReplyOverloaded)
			}
		case readBad:
			s.badInput(f, err)
		}
	}
	if s.closing.Load() {
		_ = r.Skip(r.Len()) // the connection is going away: nothing more is read
	}
	if !wasPartial && s.rd.partialSince() != 0 && cfg.FrameReadTimeout > 0 &&
		(cfg.DownstreamIdleTimeout == 0 || cfg.FrameReadTimeout < cfg.DownstreamIdleTimeout) {
		srv.wheel.Schedule(&s.timer, cfg.FrameReadTimeout) // onTimer re-arms for whatever comes first
	}
}

func (s *session) handle(f wire.Frame, frame []byte, cfg *Config, now int64) {
	m := s.srv.m
	switch f.Kind {
	case wire.FrameEventTwoWay:
		buf := replyBufs.Get().(*[32]byte)
		s.counts.heartbeats.Add(1) // counted before the consumer can see the reply
		s.write(s.srv.codec.AppendHeartbeatReply(buf[:0], f))
		replyBufs.Put(buf) // the writer copied what it did not write
	case wire.FrameRequest:
		s.counts.requests.Add(1)
		call := s.srv.identify(frame, cfg) // per-method metrics, access log (methods.go)
		if int(s.inflight.Load()) >= cfg.MaxInflightPerConn {
			s.replyError(f, call, now, wire.FailOverloaded, "stormgate: too many in-flight requests on this connection (limits.max_inflight_per_connection)", ReplyInflight)
			return
		}
		s.pool.forward(request{sess: s, id: f.ID, serial: f.Serial, call: call, arrived: now}, frame)
	case wire.FrameOneWay:
		s.counts.requests.Add(1)
		s.pool.forwardOneWay(s, frame)
	case wire.FrameEventOneWay:
		m.dropped[dropEventOneWay].Inc()
	default: // responses from a consumer answer nothing Stormgate forwarded
		m.dropped[dropConsumerResponse].Inc()
	}
}

// badInput answers BAD_REQUEST when the header carried a usable id (everything but
// bad magic), then closes this consumer only. Nothing of the frame reaches an
// upstream connection.
func (s *session) badInput(f wire.Frame, err error) {
	reason := CloseBadLength
	switch {
	case errors.Is(err, wire.ErrBadMagic):
		reason = CloseBadMagic
	case errors.Is(err, wire.ErrFrameTooLarge):
		reason = CloseOversize
	}
	var fe *wire.ForeignError
	switch {
	case reason != CloseBadMagic:
		s.replyError(f, callRef{}, s.srv.now(), wire.FailBadRequest, "stormgate: malformed frame: "+reason.String(), ReplyBadRequest)
	case errors.As(err, &fe) && fe.Reply != nil && s.counts.requests.Load() == 0 && s.counts.heartbeats.Load() == 0:
		s.write(fe.Reply) // the first bytes it sent: a person at a terminal, an HTTP client
	}
	s.srv.log.Warn("closing consumer after malformed input",
		zap.Stringer("peer", s.remote), zap.Stringer("reason", reason), zap.Error(err))
	s.closeWith(reason)
}

// replyError sends Stormgate's own error response for request f (call, which arrived
// then, for per-method metrics and the access log).
func (s *session) replyError(f wire.Frame, call callRef, arrived int64, why wire.Failure, msg string, reason ReplyReason) {
	var buf [256]byte
	s.srv.m.localReplies[reason].Inc() // counted before the consumer can see the reply
	b := s.srv.codec.AppendErrorReply(buf[:0], f, why, msg)
	s.srv.callReplied(s, call, arrived, why, reason, b)
	s.write(b)
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

// replyBufs holds the buffers heartbeat replies are built in (17 bytes in Dubbo): a
// stack buffer escapes (through the Codec call and the writer) and costs an
// allocation per heartbeat, and a buffer in the session costs every idle consumer.
var replyBufs = sync.Pool{New: func() any { return new([32]byte) }}

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
	reason := ClosePeer
	if r := s.reason.Load(); r != 0 {
		reason = CloseReason(r - 1)
	} else if l := s.linger.Load(); l != nil {
		reason = l.reason // it closed its side after what the lingering close let it read
	} else if s.rd.partial() {
		reason = CloseTruncated
		srv.log.Warn("consumer closed in the middle of a frame", zap.Stringer("peer", s.remote))
	}
	s.rd.reset(&srv.budget)
	if s.down != nil {
		s.down.Closed()
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

// onTimer runs on the wheel goroutine: the idle timeout, and frame_read_timeout for
// a frame left unfinished. It re-arms itself for whichever comes first.
func (s *session) onTimer() {
	if s.closing.Load() {
		return
	}
	cfg := s.srv.cfg.Load()
	now := s.srv.now()
	next := time.Duration(math.MaxInt64)
	if t := cfg.FrameReadTimeout; t > 0 {
		if since := s.rd.partialSince(); since != 0 {
			rem := t - time.Duration(now-since)
			if rem <= 0 {
				s.srv.log.Warn("closing consumer that left a frame unfinished for limits.frame_read_timeout",
					zap.Stringer("peer", s.remote), zap.Duration("frame_read_timeout", t))
				s.closeWith(CloseFrameTimeout)
				return
			}
			next = min(next, rem)
		}
	}
	if t := cfg.DownstreamIdleTimeout; t > 0 {
		rem := s.idle.Remaining(now, t)
		if rem <= 0 && s.proto.Load() == protoH2 && s.inflight.Load() > 0 {
			rem = t // an HTTP/2 consumer waiting for an answer sends nothing meanwhile: not idle
		}
		if rem <= 0 {
			s.closeWith(CloseIdle)
			return
		}
		next = min(next, rem)
	}
	if next != time.Duration(math.MaxInt64) {
		s.srv.wheel.Schedule(&s.timer, next)
	}
}

// sendEvent writes a READONLY or WRITEABLE event to the consumer.
func (s *session) sendEvent(ev wire.Event) {
	var buf [64]byte
	id := s.srv.eventIDs.Add(1)
	s.write(s.srv.codec.AppendEvent(buf[:0], id, ev))
}
