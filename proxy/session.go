package proxy

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudwego/netpoll"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/stormgate/stormgate/keepalive"
)

// Session is one consumer connection. Its lifecycle:
//
//	| step                      | who runs it                      | notes
//	| Server.ServeFD            | admission goroutine              | wraps the fd, registers, arms idle timer
//	| onRequest                 | netpoll, one at a time           | decodes frames, answers heartbeats, forwards requests
//	| write                     | any goroutine (upstream readers, | direct non-blocking write under wmu; the remainder
//	|                           | hold queue, wheel, onRequest)    | goes to out and one drain goroutine flushes it
//	| onIdleTimer               | keepalive wheel goroutine        | closes after DownstreamIdleTimeout with nothing read
//	| closeWith                 | anyone, first caller wins        | records the reason, closes the netpoll connection
//	| onClosed                  | netpoll close callback, once     | stops writes, unregisters, counts; runs before netpoll
//	|                           |                                  | closes the fd, so no write can reach a reused fd
//
// Pending requests are not indexed by session: when a session closes, its
// entries stay in the upstream pending tables until the provider answers (the
// answer is discarded and counted as late) or max_request_age frees them.
type Session struct {
	srv    *Server
	pool   *Pool
	conn   netpoll.Connection
	fd     int
	remote netip.AddrPort

	idle     keepalive.Idle
	timer    keepalive.Timer
	inflight atomic.Int32 // forwarded or held two-way requests not yet answered
	scratch  [32]byte     // heartbeat replies; used only by onRequest (one at a time per connection)

	closing   atomic.Bool
	closedCb  atomic.Bool
	reason    atomic.Pointer[string]
	readonly  atomic.Bool // READONLY sent to this consumer
	closeOnce sync.Once

	wmu      sync.Mutex // guards wclosed, out, flushing, queued and direct fd writes
	wclosed  bool
	out      []byte // bytes waiting for the drain goroutine
	flushing bool   // a drain goroutine owns the netpoll writer
	queued   int    // bytes accepted but not yet handed to the kernel

	nmu sync.Mutex // serializes use of the netpoll Writer (drain goroutine vs close)
}

// errShortWrite marks a consumer whose socket buffer is full.
var errSlowConsumer = errors.New("consumer does not read its responses")

func (s *Session) onRequest(_ context.Context, conn netpoll.Connection) error {
	srv := s.srv
	cfg := srv.cfg.Load()
	r := conn.Reader()
	hl := srv.codec.HeaderLen()
	s.idle.Touch(time.Now().UnixNano())
	for r.Len() > 0 {
		if s.closing.Load() {
			// Discard whatever is left; the connection is going away.
			_ = r.Skip(r.Len())
			break
		}
		hdr, err := r.Peek(hl)
		if err != nil {
			s.closeWith(closeTruncated)
			return nil
		}
		f, err := srv.codec.ParseHeader(hdr, cfg.MaxFrameBytes)
		if err != nil {
			s.badInput(f, err)
			_ = r.Skip(r.Len())
			break
		}
		frame, err := r.Next(f.Len)
		if err != nil {
			s.closeWith(closeTruncated)
			return nil
		}
		s.handle(f, frame, cfg)
	}
	_ = r.Release()
	return nil
}

func (s *Session) handle(f Frame, frame []byte, cfg *Config) {
	m := s.srv.m
	switch f.Kind {
	case FrameEventTwoWay:
		// The reply is built in the session's scratch buffer: a stack buffer would
		// escape through the Codec interface call and cost an allocation per heartbeat.
		s.write(s.srv.codec.AppendHeartbeatReply(s.scratch[:0], f))
		m.hbAnsweredDown.Inc()
	case FrameRequest:
		m.requests.Inc()
		if int(s.inflight.Load()) >= cfg.MaxInflightPerConn {
			s.replyError(f, FailOverloaded, "stormgate: too many in-flight requests on this connection (limits.max_inflight_per_connection)", replyInflight)
			return
		}
		s.pool.forward(s, f, frame, time.Now().UnixNano())
	case FrameOneWay:
		m.requests.Inc()
		s.pool.forwardOneWay(frame)
	case FrameEventOneWay:
		m.dropped.WithLabelValues("event_oneway").Inc()
	case FrameResponse, FrameEventResponse:
		m.dropped.WithLabelValues("consumer_response").Inc()
	default:
		m.dropped.WithLabelValues("unknown").Inc()
	}
}

// badInput answers BAD_REQUEST when the header carried a usable id (everything but
// bad magic), then closes this consumer only. Nothing of the frame reaches an
// upstream connection.
func (s *Session) badInput(f Frame, err error) {
	reason := closeBadLength
	switch {
	case errors.Is(err, ErrBadMagic):
		reason = closeBadMagic
	case errors.Is(err, ErrFrameTooLarge):
		reason = closeOversize
	}
	if reason != closeBadMagic {
		var buf [160]byte
		s.write(s.srv.codec.AppendErrorReply(buf[:0], f, FailBadRequest, "stormgate: malformed frame: "+reason))
		s.srv.m.localReplies.WithLabelValues(replyBadRequest).Inc()
	}
	s.srv.log.Warn("closing consumer after malformed input",
		zap.Stringer("peer", s.remote), zap.String("reason", reason), zap.Error(err))
	s.closeWith(reason)
}

// replyError sends Stormgate's own error response for request f.
func (s *Session) replyError(f Frame, why Failure, msg, reason string) {
	var buf [256]byte
	s.srv.m.localReplies.WithLabelValues(reason).Inc() // counted before the consumer can see the reply
	s.write(s.srv.codec.AppendErrorReply(buf[:0], f, why, msg))
}

// write sends b to the consumer without ever blocking the caller: it tries a
// non-blocking write on the fd; whatever the kernel does not take is queued and
// flushed by one drain goroutine through netpoll. Order is kept because direct
// writes stop while a drain is in progress. A consumer whose queue passes
// limits.max_queued_bytes_per_connection is closed.
func (s *Session) write(b []byte) {
	s.wmu.Lock()
	if s.wclosed {
		s.wmu.Unlock()
		return
	}
	startDrain := false
	if !s.flushing {
		n, err := writeFD(s.fd, b)
		if n == len(b) {
			s.wmu.Unlock()
			return
		}
		if err != nil && err != unix.EAGAIN {
			s.wmu.Unlock()
			s.closeWith(closePeer)
			return
		}
		b = b[n:]
		s.flushing = true
		startDrain = true
	}
	if q := s.queued + len(b); q > s.srv.cfg.Load().MaxQueuedBytesPerConn {
		s.wmu.Unlock()
		s.srv.log.Warn("closing consumer that does not read its responses",
			zap.Stringer("peer", s.remote), zap.Int("queued_bytes", q))
		s.closeWith(closeSlowReader)
		return
	}
	s.out = append(s.out, b...)
	s.queued += len(b)
	s.wmu.Unlock()
	if startDrain {
		go s.drain()
	}
}

func writeFD(fd int, b []byte) (int, error) {
	for {
		n, err := unix.Write(fd, b)
		if err == unix.EINTR {
			continue
		}
		if n < 0 {
			n = 0
		}
		return n, err
	}
}

// drain flushes queued bytes through netpoll (which waits for writability) until
// the queue is empty, then hands writing back to the direct path.
func (s *Session) drain() {
	for {
		s.wmu.Lock()
		if s.wclosed {
			s.wmu.Unlock()
			return
		}
		if len(s.out) == 0 {
			s.flushing = false
			s.queued = 0
			s.out = nil
			s.wmu.Unlock()
			return
		}
		buf := s.out
		s.out = nil
		s.wmu.Unlock()

		s.nmu.Lock()
		var err error
		if s.conn.IsActive() && !s.closedCb.Load() {
			w := s.conn.Writer()
			if _, err = w.WriteBinary(buf); err == nil {
				err = w.Flush()
			}
		} else {
			err = netpoll.ErrConnClosed
		}
		s.nmu.Unlock()

		s.wmu.Lock()
		s.queued -= len(buf)
		s.wmu.Unlock()
		if err != nil {
			s.closeWith(closePeer)
			return
		}
	}
}

// closeWith closes the consumer connection, recording why. The first reason wins.
func (s *Session) closeWith(reason string) {
	if !s.closing.CompareAndSwap(false, true) {
		return
	}
	s.reason.Store(&reason)
	_ = s.conn.Close()
}

// onClosed runs once, from netpoll's close callback (before netpoll closes the fd)
// or from ServeFD when the connection died before its callback was registered.
func (s *Session) onClosed(netpoll.Connection) error {
	if !s.closedCb.CompareAndSwap(false, true) {
		return nil
	}
	s.closing.Store(true)
	s.wmu.Lock()
	s.wclosed = true
	s.out = nil
	s.wmu.Unlock()
	s.nmu.Lock() // wait for a drain goroutine to leave the netpoll writer
	s.nmu.Unlock()

	reason := closePeer
	if r := s.reason.Load(); r != nil {
		reason = *r
	}
	srv := s.srv
	srv.wheel.Stop(&s.timer)
	srv.sessions.remove(s)
	srv.m.downConns.Dec()
	srv.m.downClosed.WithLabelValues(reason).Inc()
	if srv.opts.OnConnClosed != nil {
		srv.opts.OnConnClosed()
	}
	return nil
}

// onIdleTimer runs on the wheel goroutine.
func (s *Session) onIdleTimer() {
	timeout := s.srv.cfg.Load().DownstreamIdleTimeout
	rem := s.idle.Remaining(time.Now().UnixNano(), timeout)
	if rem <= 0 {
		go s.closeWith(closeIdle)
		return
	}
	s.srv.wheel.Schedule(&s.timer, rem)
}

// sendEvent writes a READONLY or WRITEABLE event to the consumer.
func (s *Session) sendEvent(ev Event) {
	var buf [64]byte
	id := s.srv.eventIDs.Add(1)
	s.write(s.srv.codec.AppendEvent(buf[:0], id, ev))
	s.readonly.Store(ev == EventReadonly)
}
