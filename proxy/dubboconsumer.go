package proxy

import (
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/stormgate/stormgate/keepalive"
	"github.com/stormgate/stormgate/proxy/wire"
)

// dubboConsumer is Dubbo's side of one consumer connection, its Downstream (protocol.go): the core's
// session hands it the consumer's bytes and its lifecycle, and it knows frames.
//
//	| Downstream      | Dubbo
//	|-----------------|-----------------------------------------------------------------------------------
//	| Input           | cuts frames without waiting for bytes that have not arrived (framereader.go);
//	|                 | answers heartbeats; forwards requests to the pool; stops reading a consumer over its
//	|                 | backpressure bound (backpressure.go); a malformed frame closes it (badInput)
//	| Closed          | frees a frame left unfinished; cutShort when there was one
//	| Announce        | READONLY: the consumer opens its next calls elsewhere
//	| Drain           | nothing more (READONLY said it)
//	| TimeoutsChanged | re-arms the frame_read_timeout timer
//	| Snapshot        | the unfinished frame, as bytes to read again and a body to skip
//
// It lives inside its session (no allocation of its own per connection, DESIGN §8's bytes per idle
// consumer) and is its Downstream from the moment the connection is known to speak Dubbo: at ServeFD
// when the provider speaks Dubbo only, else when the first bytes are not another protocol's (sniff.go).
type dubboConsumer struct {
	s  *session
	rd frameReader
	// frame closes a consumer that left a frame unfinished for limits.frame_read_timeout; armed when a
	// frame begins to arrive in pieces, on the session's wheel.
	frame keepalive.Timer
}

// init ties d to its session, once, before the session is shared.
func (d *dubboConsumer) init(s *session) {
	d.s = s
	d.frame.Init(d.onFrameTimer)
}

// Input handles every whole frame available in r and keeps a partial one. From netpoll's reader it stops
// after a frame that put the consumer over its backpressure bound, once reading is paused (netpoll keeps
// the rest until ResumeRead); a handover's stash (sliceSource) keeps nothing, so it is read whole.
func (d *dubboConsumer) Input(r ByteSource, now int64) {
	_, stash := r.(*sliceSource)
	d.consume(r, !stash, now)
}

func (d *dubboConsumer) consume(r ByteSource, canPause bool, now int64) {
	s := d.s
	srv := s.srv
	cfg := srv.cfg.Load()
	s.idle.Touch(now)
	wasPartial := d.rd.partialSince() != 0
	for !s.closing.Load() {
		f, frame, res, err := d.rd.next(r, srv.codec, cfg.MaxFrameBytes, false, &srv.budget, now)
		if res == readMore {
			break
		}
		switch res {
		case readFrame:
			d.handle(f, frame, cfg, now)
			if canPause && s.shouldPause(cfg) && s.pauseRead() {
				return // the rest stays in netpoll's buffer until ResumeRead
			}
		case readSkipped: // no budget to reassemble it: its bytes are discarded as they come
			srv.log.Warn("refusing a request: out of buffer memory (limits.max_buffered_bytes)",
				zap.Stringer("peer", s.remote), zap.Int("frame_bytes", f.Len))
			if f.Kind == wire.FrameRequest {
				d.replyError(f, callRef{}, now, wire.FailOverloaded, "stormgate: out of buffer memory (limits.max_buffered_bytes)", ReplyOverloaded)
			}
		case readBad:
			d.badInput(f, err)
		}
	}
	if s.closing.Load() {
		_ = r.Skip(r.Len()) // the connection is going away: nothing more is read
	}
	if !wasPartial && d.rd.partialSince() != 0 && cfg.FrameReadTimeout > 0 {
		srv.wheel.Schedule(&d.frame, cfg.FrameReadTimeout)
	}
}

func (d *dubboConsumer) handle(f wire.Frame, frame []byte, cfg *Config, now int64) {
	s := d.s
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
			d.replyError(f, call, now, wire.FailOverloaded, "stormgate: too many in-flight requests on this connection (limits.max_inflight_per_connection)", ReplyInflight)
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

// replyBufs holds the buffers heartbeat replies are built in (17 bytes in Dubbo): a
// stack buffer escapes (through the Codec call and the writer) and costs an
// allocation per heartbeat, and a buffer in the session costs every idle consumer.
var replyBufs = sync.Pool{New: func() any { return new([32]byte) }}

// badInput answers BAD_REQUEST when the header carried a usable id (everything but
// bad magic), then closes this consumer only. Nothing of the frame reaches an
// upstream connection.
func (d *dubboConsumer) badInput(f wire.Frame, err error) {
	s := d.s
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
		d.replyError(f, callRef{}, s.srv.now(), wire.FailBadRequest, "stormgate: malformed frame: "+reason.String(), ReplyBadRequest)
	case errors.As(err, &fe) && fe.Reply != nil && s.counts.requests.Load() == 0 && s.counts.heartbeats.Load() == 0:
		s.write(fe.Reply) // the first bytes it sent: a person at a terminal, an HTTP client
	}
	s.srv.log.Warn("closing consumer after malformed input",
		zap.Stringer("peer", s.remote), zap.Stringer("reason", reason), zap.Error(err))
	s.closeWith(reason)
}

// replyError sends Stormgate's own error response for request f (call, which arrived
// then, for per-method metrics and the access log).
func (d *dubboConsumer) replyError(f wire.Frame, call callRef, arrived int64, why wire.Failure, msg string, reason ReplyReason) {
	var buf [256]byte
	s := d.s
	s.srv.m.localReplies[reason].Inc() // counted before the consumer can see the reply
	b := s.srv.codec.AppendErrorReply(buf[:0], f, why, msg)
	s.srv.callReplied(s, call, arrived, why, reason, b)
	s.write(b)
}

// sendEvent writes a READONLY or WRITEABLE event to the consumer.
func (d *dubboConsumer) sendEvent(ev wire.Event) {
	var buf [64]byte
	s := d.s
	id := s.srv.eventIDs.Add(1)
	s.write(s.srv.codec.AppendEvent(buf[:0], id, ev))
}

// onFrameTimer runs on the wheel goroutine while a frame is unfinished: it closes the consumer once
// limits.frame_read_timeout has passed since the frame began, else re-arms for the rest (the value is
// live: TimeoutsChanged runs it at once).
func (d *dubboConsumer) onFrameTimer() {
	s := d.s
	since := d.rd.partialSince()
	t := s.srv.cfg.Load().FrameReadTimeout
	if s.closing.Load() || since == 0 || t <= 0 {
		return
	}
	rem := t - time.Duration(s.srv.now()-since)
	if rem > 0 {
		s.srv.wheel.Schedule(&d.frame, rem)
		return
	}
	s.srv.log.Warn("closing consumer that left a frame unfinished for limits.frame_read_timeout",
		zap.Stringer("peer", s.remote), zap.Duration("frame_read_timeout", t))
	s.closeWith(CloseFrameTimeout)
}

// Closed frees a frame left unfinished; cutShort reports there was one (the close counts as truncated).
// From the session's close callback, once.
func (d *dubboConsumer) Closed() (cutShort bool) {
	srv := d.s.srv
	cutShort = d.rd.partial()
	d.rd.reset(&srv.budget)
	srv.wheel.Stop(&d.frame)
	return cutShort
}

// Announce sends READONLY: a Dubbo consumer then opens its next calls on other providers, while the
// calls under way are served.
func (d *dubboConsumer) Announce() {
	d.sendEvent(wire.EventReadonly)
	d.s.srv.m.readonlyOut[0].Inc()
}

// Drain adds nothing to Announce's READONLY: Dubbo has no second step.
func (d *dubboConsumer) Drain() {}

// TimeoutsChanged re-arms the frame_read_timeout timer from the new value (onFrameTimer does nothing
// when no frame is unfinished).
func (d *dubboConsumer) TimeoutsChanged() { d.s.srv.wheel.Schedule(&d.frame, 0) }

// Snapshot copies the unfinished frame for an upgrade: what was read of it, and stash (read during the
// freeze), are read again by whoever serves next; a body being discarded is skipped there.
func (d *dubboConsumer) Snapshot(st *SessionSnapshot, stash []byte, now int64) (bool, error) {
	in, skip := d.rd.exportPartial()
	st.Proto, st.In, st.Skip = SnapDubbo, append(in, stash...), skip
	if since := d.rd.partialSince(); since != 0 {
		st.Partial = time.Duration(now - since)
	}
	return true, nil
}

// restore takes back a snapshot's unfinished frame's body still to skip; its bytes are read again
// (Input), then partialAgain says since when it is unfinished.
func (d *dubboConsumer) restore(st *SessionSnapshot) { d.rd.skip = st.Skip }

// partialAgain sets when the restored unfinished frame began (st.Partial before now), after its bytes
// were read again, and re-arms the frame_read_timeout timer for what is left of it.
func (d *dubboConsumer) partialAgain(st *SessionSnapshot, now int64) {
	if st.Partial > 0 {
		d.rd.since.Store(now - int64(st.Partial))
		d.s.srv.wheel.Schedule(&d.frame, 0)
	}
}
