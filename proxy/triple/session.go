package triple

import (
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/stormgate/stormgate/keepalive"
	"github.com/stormgate/stormgate/proxy"
	"github.com/stormgate/stormgate/proxy/h2"
)

// h2Session is the HTTP/2 side of a consumer connection (Triple, gRPC): Stormgate is the HTTP/2 server
// its consumer talks to. The session (proxy/session.go) keeps what every consumer connection has (the
// writer, the idle timer, the close path, the in-flight count Drain waits for); this keeps the HTTP/2
// state: an h2.Conn in the server role, and the consumer's streams (h2Call) while they are open here.
//
//	| what                                | runs on                 | what happens
//	|-------------------------------------|-------------------------|------------------------------------------
//	| consumer bytes                      | netpoll handler         | h2.Conn.Read frame by frame: SETTINGS acked,
//	|                                     |                         | PINGs answered (never forwarded), a request
//	|                                     |                         | head opens an h2Call on the provider side
//	|                                     |                         | (pool.go), its DATA follows it there
//	| the provider's answer               | the provider connection | head, DATA within the consumer's windows
//	|                                     | reader (pool.go)      | (the rest waits in the call), trailers
//	| the consumer's window opens         | netpoll handler         | waiting answer DATA goes out
//	| the provider connection is lost     | its reader              | grpc-status 14 trailers for its calls
//	| the consumer resets a stream        | netpoll handler         | the provider's stream is reset too
//	| the connection closes               | netpoll close callback  | every open call is cancelled upstream
//
// Flow control: the consumer's stream and connection windows are handed back (h2.Conn.Consumed) only
// once its bytes were handed to a provider connection (or dropped), so a consumer can make Stormgate
// hold at most one stream window per open stream. Toward the provider the connection window goes back
// on receipt and a stream's window once its answer bytes were handed to this consumer's writer
// (pool.go): answer bytes its windows do not take yet wait in the call, at most a provider stream
// window each, charged to limits.max_buffered_bytes and bounded per consumer by
// limits.max_queued_bytes_per_connection, past which the consumer is closed as a slow reader.
//
// Locks: mu guards conn, calls, closed and a call's consumer-side fields. Nothing holds mu and the
// pool's lock at once: each side collects what it owes the other and calls it after unlocking.
type h2Session struct {
	consumer proxy.Consumer
	hp       *h2Pool
	env      proxy.Env

	mu     sync.Mutex
	conn   *h2.Conn                     // nil until the client preface arrived
	calls  proxy.Books[uint32, *h2Call] // by the consumer's stream id (proxy/books.go)
	closed bool
	out    []byte          // frames being built under mu; the writer copies what it cannot write at once
	meter  h2Meter         // what conn counted that the metrics have (metrics.go)
	held   int             // answer bytes kept in calls for the consumer's windows (charged to the budget)
	drain  bool            // Stormgate is draining: the first GOAWAY sent (or due once the preface is in)
	final  bool            // the drain's final GOAWAY sent
	stall  keepalive.Timer // the zero-window stall check (stall.go)

	// Answer frames delivered by a provider connection's reader, written at the end of its read
	// (deliver.go); pendQueued: a delivery will flush them.
	pend       []byte
	pendQueued bool

	in        []byte // the handler's: input not yet a whole frame (at most one frame), or the preface so far
	inCharged int    // the handler's: cap(in) charged to the budget while in holds part of a frame (chargeIn)

	proxy.WaitAccount // its calls' turn and bytes in the hold queue (proxy/holdcalls.go)
}

// h2Call is one consumer stream and the provider stream that carries it: the HTTP/2 form of a
// forwarded Dubbo request. It ends exactly once toward the consumer (finish): with the provider's
// whole answer, a reset, or Stormgate's own error trailers.
type h2Call struct {
	sess *h2Session
	down uint32 // the consumer's stream id

	// Consumer side, under sess.mu.
	headSent bool             // a response head went to the consumer
	done     bool             // ended toward the consumer
	out      []byte           // answer DATA waiting for the consumer's window
	outEnd   bool             // END_STREAM after out
	trailers []h2.HeaderField // trailers waiting behind out

	// Per-method metrics and the access log (calls.go): method is set before the call is shared,
	// waited by the pool, the rest under sess.mu.
	method     uint32      // index into the call table
	waited     atomic.Bool // it waited for a provider stream
	counted    bool        // its end was counted
	httpStatus int         // the answer head's :status
	reqBytes   uint64      // request DATA from the consumer
	respBytes  uint64      // answer DATA from the provider

	// Provider side, under the pool's mu (pool.go).
	up           *h2Upstream // nil while waiting for a stream
	upID         uint32
	waiting      bool
	upDone       bool             // nothing more goes to or comes from the provider
	head         []h2.HeaderField // the request head while waiting
	headEnd      bool
	in           []byte // request DATA waiting for the provider's window or a stream
	inFree       int    // of in, the leading bytes of a request sent again: their windows went back when they first left
	inBack       int    // of in after inFree, the leading bytes kept while waiting: their connection window went back on receipt
	inEnd        bool   // END_STREAM after in
	arrived      int64
	path         string          // the request's :path (replay.go: a path the connection served)
	sendBy       int64           // past it the call is never sent (deadline.go); NoDeadline without grpc-timeout
	hold         keepalive.Timer // the hold timeout while waiting
	proxy.Waiter                 // its place in the hold queue (proxy/holdcalls.go)
	upOff        uint64          // where its head went in the connection's byte stream (h2Upstream.w's offsets)

	// Sending it again (replay.go), under the pool's mu.
	req         h2Kept          // the request as the consumer sent it, until the provider's answer head
	answered    bool            // the provider's answer head came: the provider has it
	resends     int             // times sent again
	notRunTries int             // of those, after not-executed answers
	paused      bool            // waiting for retry before it may take a stream
	retry       keepalive.Timer // ends the pause
	timers      bool            // hold and retry are initialised
}

// newH2Session is the Downstream of a consumer connection HTTP/2 claimed (h2Protocol.NewDownstream), in
// its protocol's set until it closes.
func newH2Session(c proxy.Consumer, hp *h2Pool) *h2Session {
	h := &h2Session{consumer: c, hp: hp, env: hp.env}
	h.calls.Init(0)
	h.stall.Init(h.onStall)
	hp.proto.sessions.add(h)
	return h
}

// TimeoutsChanged re-arms the zero-window stall check: it works the rest out from the values in force.
func (h *h2Session) TimeoutsChanged() { h.env.Wheel().Schedule(&h.stall, 0) }

// start answers the client preface: Stormgate's SETTINGS (SETTINGS_HEADER_TABLE_SIZE 0, and http2.* as
// in force now: the connection keeps them) go out, and the frames after the preface are read.
func (h *h2Session) start(now int64) {
	h.consumer.Decided()
	cfg := h.env.Config()
	h.mu.Lock()
	h.conn = h2.NewConn(h2ConnConfig(cfg, h2.RoleServer))
	if h.drain || h.env.Announced() {
		h.drain = true
		h.conn.GoAwayGracefully(h2DrainDebug, h2DrainPing)
		if h.env.Draining() { // the drain proper has begun: no waiting for the PING's answer
			h.final = true
			h.conn.GoAway(h2.ErrCodeNo, h2DrainDebug)
		}
	}
	h.flushLocked()
	h.mu.Unlock()
	h.process(h.in, now)
}

// sniff takes the first bytes of a connection that began with 'P': once they are the HTTP/2 client
// preface the session speaks HTTP/2; until then they are kept (at most the preface's 24 bytes); bytes
// that stop matching get the Dubbo path's answer to foreign bytes, as before Triple.
func (h *h2Session) sniff(b []byte, now int64) {
	h.in = append(h.in, b...)
	if _, err := h2.CheckPreface(h.in); err != nil {
		h.consumer.Foreign(h.in)
		h.in = nil
		return
	}
	if len(h.in) >= len(h2.ClientPreface) {
		h.start(now)
	}
}

// Input takes what netpoll read (handler only); the first bytes are sniffed (sniff).
func (h *h2Session) Input(r proxy.ByteSource, now int64) {
	h.consumer.Touch(now)
	b, _ := r.Next(r.Len())
	switch {
	case h.consumer.Closing():
	case h.conn == nil:
		h.sniff(b, now)
	default:
		h.input(b, now)
	}
	h.chargeIn()
}

// chargeIn charges the budget for the frame a consumer has begun and not finished (h.in, at most one frame:
// 16 KiB and its header with the frame size Stormgate announces), as a Dubbo frame being reassembled is
// charged (proxy/framereader.go), and gives the charge back once the frame is whole. It is forced, not reserved:
// the bytes are already here, and what one connection can hold this way is bounded by the frame size; the
// charge makes the rest of Stormgate (the hold queue, kept answers and requests) refuse what no longer fits.
// Handler only; the atomic is touched only when a partial frame begins, grows or ends.
func (h *h2Session) chargeIn() {
	want := 0
	if len(h.in) > 0 {
		want = cap(h.in)
	}
	h.env.Budget().Recharge(&h.inCharged, want)
}

// input processes what the handler read (b, valid until the next read): a frame begun in an earlier read
// is completed from b's first bytes and processed alone, and the rest of b is processed where it lies. So
// h.in holds at most one frame (its header, then its payload), never a whole read behind it.
func (h *h2Session) input(b []byte, now int64) {
	for len(h.in) > 0 && len(b) > 0 && !h.consumer.Closing() {
		need := h2.FrameHeaderLen - len(h.in)
		if need <= 0 {
			fh, _ := h2.ParseFrameHeader(h.in)
			need = h2.FrameHeaderLen + int(fh.Length) - len(h.in)
		}
		take := min(need, len(b))
		h.in = append(h.in, b[:take]...)
		b = b[take:]
		if len(h.in) >= h2.FrameHeaderLen {
			h.process(h.in, now) // the frame whole (or refused from its header), or still partial
		}
	}
	if len(b) > 0 && len(h.in) == 0 {
		h.process(b, now)
	}
}

// process reads whole frames from buf and keeps the rest (less than one frame) in h.in.
func (h *h2Session) process(buf []byte, now int64) {
	off := 0
	for !h.consumer.Closing() {
		h.mu.Lock()
		n, ev, err := h.conn.Read(now, buf[off:])
		h.flushLocked() // counts what the frame changed (a PING answered, a guard tripped) before the consumer can see it
		h.mu.Unlock()
		off += n
		if err != nil {
			h.env.Log().Warn("closing HTTP/2 consumer after a connection error (GOAWAY sent)",
				zap.Stringer("peer", h.consumer.Remote()), zap.Error(err))
			h.closeAfterGoAway()
			break
		}
		if n == 0 {
			break
		}
		h.event(ev, now)
	}
	rest := buf[off:]
	switch {
	case h.consumer.Closing():
		rest = nil
	case len(rest) > 0 && len(h.in) > 0 && &rest[0] == &h.in[0]:
		return // a frame still partial in h.in, where it is
	}
	if cap(h.in) > h2BufKeep && cap(h.in) >= 2*len(rest) {
		h.in = nil // what a frame of a big request made it grow to
	}
	h.in = append(h.in[:0], rest...) // less than a frame: Split bounds a frame by SETTINGS_MAX_FRAME_SIZE
}

// event acts on what one frame meant. Fields and Data are valid until the next Read (the handler's).
func (h *h2Session) event(ev h2.Event, now int64) {
	switch ev.Kind {
	case h2.EventHeaders:
		if ev.Trailers { // the request's end (END_STREAM: h2.Conn checked); its fields are not forwarded
			if c := h.call(ev.Stream); c != nil {
				h.hp.data(c, nil, true)
			}
			return // a call Stormgate has already ended (answered early, or failed): nothing to forward
		}
		c := &h2Call{sess: h, down: ev.Stream, arrived: now, method: identifyH2(h.env, ev.Fields)}
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			return
		}
		h.calls.Add(ev.Stream, c)
		h.mu.Unlock()
		h.consumer.CallBegan()
		h.hp.open(c, ev.Fields, ev.EndStream, now)
	case h2.EventData:
		if c := h.dataCall(ev.Stream, len(ev.Data)); c != nil {
			h.hp.data(c, ev.Data, ev.EndStream)
			return
		}
		h.consumed(ev.Stream, len(ev.Data)) // a stream Stormgate already ended: dropped
	case h2.EventReset:
		h.mu.Lock()
		c, _ := h.calls.Get(ev.Stream)
		dropped := 0
		if c != nil {
			dropped = h.discardLocked(c)
			h.finishLocked(c)
		}
		h.mu.Unlock()
		if c != nil {
			h.hp.cancel(c)
			h.hp.answerConsumed(c, dropped)
		}
	case h2.EventWindow, h2.EventSettings:
		h.flushWaiting(ev.Stream)
	case h2.EventPingAck:
		if ev.Ping == h2DrainPing {
			h.Drain()
		}
	}
}

func (h *h2Session) call(id uint32) *h2Call {
	h.mu.Lock()
	defer h.mu.Unlock()
	c, _ := h.calls.Get(id)
	return c
}

// dataCall is call for n bytes of request DATA, which it counts for the access log.
func (h *h2Session) dataCall(id uint32, n int) *h2Call {
	h.mu.Lock()
	defer h.mu.Unlock()
	c, _ := h.calls.Get(id)
	if c != nil {
		c.reqBytes += uint64(n)
	}
	return c
}

// closeAfterGoAway ends the connection after a connection error so that the GOAWAY saying why reaches
// the consumer: a lingering close (Consumer.Linger), bounded by h2GoAwayLinger.
func (h *h2Session) closeAfterGoAway() { h.consumer.Linger(proxy.CloseH2Error, h2GoAwayLinger) }

// consumed hands n bytes of stream id back to the consumer's windows (WINDOW_UPDATE when due).
func (h *h2Session) consumed(id uint32, n int) { h.handBack(id, n, 0, 0) }

// handBack hands bytes of stream id back to the consumer's windows (WINDOW_UPDATE when due): n to both
// the stream's and the connection's, conn to the connection's alone (request DATA a waiting call keeps),
// stream to the stream's alone (such bytes once they left: their connection share went back already).
func (h *h2Session) handBack(id uint32, n, conn, stream int) {
	if n <= 0 && conn <= 0 && stream <= 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || h.conn == nil {
		return
	}
	// An error ends the connection: its GOAWAY is in Output, and the calls after it do nothing.
	_ = h.conn.Consumed(id, n)
	_ = h.conn.ConsumedConn(conn)
	_ = h.conn.ConsumedStream(id, stream)
	h.flushLocked()
}

// flushLocked writes what the Conn owes the consumer (SETTINGS ACKs, PING answers, WINDOW_UPDATEs,
// RST_STREAM, GOAWAY): before anything else that goes out after it. What the Conn counted goes to the
// metrics first; it runs after every frame read and every reset or GOAWAY this side makes.
func (h *h2Session) flushLocked() {
	h.meter.sync(&h.hp.proto.m, h2Consumer, h.conn.Counters())
	if out := h.conn.Output(); len(out) > 0 {
		h.writeLocked(out, nil)
		h.conn.ClearOutput()
	}
}

// frames starts a batch of frames under mu, behind what the Conn owes the consumer.
func (h *h2Session) frames() []byte {
	b := append(h.out[:0], h.conn.Output()...)
	h.conn.ClearOutput()
	return b
}

// send writes a batch from frames.
func (h *h2Session) send(b []byte) { h.sendVia(b, nil) }

// sendVia is send through a provider read's delivery (d non-nil: written at the end of the read).
func (h *h2Session) sendVia(b []byte, d *h2Delivery) {
	h.writeLocked(b, d)
	if cap(b) <= h2BufKeep {
		h.out = b[:0]
	} else {
		h.out = nil
	}
}

// answerHeaders hands the consumer a response head or trailers (end) from the provider, through the
// provider read's delivery d. It reports whether the consumer's stream was no longer open (it reset the
// stream, or its connection is ending): the call has ended here, and the caller stops its provider side,
// which nothing else would (the call has left the session's books, so neither the consumer's reset nor
// the connection's close finds it).
func (h *h2Session) answerHeaders(c *h2Call, fields []h2.HeaderField, end bool, d *h2Delivery) (gone bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c.done || h.closed {
		return false
	}
	if !c.headSent {
		c.httpStatus, _ = h2.HTTPStatus(fields)
	}
	if c.headSent && (len(c.out) > 0 || c.outEnd) {
		c.trailers = append([]h2.HeaderField(nil), fields...) // behind the DATA still waiting
		return
	}
	b, err := h.conn.AppendHeaders(h.frames(), c.down, fields, end)
	if end && err == nil {
		h.answeredLocked(c, fields)
	}
	h.sendVia(b, d)
	c.headSent = true
	if end || err != nil {
		h.finishLocked(c)
	}
	return err != nil
}

// answerData hands the consumer DATA from the provider, as much as its windows take; the rest waits in
// the call. It returns how many bytes left the call now (handed to the writer, or to d, which hands them
// to the writer at the end of the provider's read, or dropped), for the provider's windows. d is the
// provider read's delivery.
func (h *h2Session) answerData(c *h2Call, data []byte, end bool, d *h2Delivery) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c.done || h.closed {
		return len(data)
	}
	c.respBytes += uint64(len(data))
	if len(c.out) > 0 {
		if !h.keepLocked(c, data) {
			return len(data)
		}
		c.outEnd = end
		return 0
	}
	b, n, err := h.conn.AppendData(h.env.Now(), h.frames(), c.down, data, end)
	if end && err == nil && n == len(data) {
		h.answeredLocked(c, nil)
	}
	h.sendVia(b, d)
	switch {
	case err != nil: // the consumer reset the stream meanwhile: its EventReset ends the call
		return len(data)
	case n < len(data):
		if !h.keepLocked(c, data[n:]) {
			return len(data)
		}
		c.outEnd = end
		h.armStallLocked()
	case end:
		h.finishLocked(c)
	}
	return n
}

// keepLocked keeps answer bytes the consumer's windows do not take yet, charged to the process budget
// and to the consumer's bound (limits.max_queued_bytes_per_connection, as for a Dubbo consumer's unread
// answers); past either the consumer is closed as a slow reader and false returned (b is dropped).
func (h *h2Session) keepLocked(c *h2Call, b []byte) bool {
	env := h.env
	if h.held+len(b) > env.Config().MaxQueuedBytesPerConn || !env.Budget().TryReserve(len(b)) {
		env.Log().Warn("closing HTTP/2 consumer that does not read its answers",
			zap.Stringer("peer", h.consumer.Remote()), zap.Int("held_bytes", h.held))
		h.consumer.CloseWith(proxy.CloseSlowReader)
		return false
	}
	h.held += len(b)
	c.out = append(c.out, b...)
	return true
}

// discardLocked drops what a call kept for the consumer and returns how many bytes that was.
func (h *h2Session) discardLocked(c *h2Call) int {
	n := len(c.out)
	h.dropLocked(n)
	c.out, c.trailers = nil, nil
	return n
}

// dropLocked forgets n bytes kept in calls (sent or dropped).
func (h *h2Session) dropLocked(n int) {
	h.held -= n
	h.env.Budget().Release(n)
}

// flushWaiting sends answer DATA that waited for the consumer's window (stream 0: every stream), and
// then the trailers behind it.
func (h *h2Session) flushWaiting(stream uint32) {
	type handed struct {
		c *h2Call
		n int
	}
	var notes []handed
	flush := func(id uint32, c *h2Call) {
		if len(c.out) == 0 && !c.outEnd && c.trailers == nil {
			return
		}
		b, n, err := h.conn.AppendData(h.env.Now(), h.frames(), id, c.out, c.outEnd && c.trailers == nil)
		if err != nil {
			h.send(b)
			notes = append(notes, handed{c, len(c.out)})
			h.dropLocked(len(c.out))
			c.out = nil
			h.finishLocked(c)
			return
		}
		if n > 0 {
			notes = append(notes, handed{c, n})
			h.dropLocked(n)
		}
		c.out = c.out[n:]
		if len(c.out) == 0 {
			c.out = nil
			if c.trailers != nil {
				if b, err = h.conn.AppendHeaders(b, id, c.trailers, true); err == nil {
					h.answeredLocked(c, c.trailers)
				}
				h.finishLocked(c)
			} else if c.outEnd {
				h.answeredLocked(c, nil)
				h.finishLocked(c)
			}
		}
		h.send(b)
	}
	h.mu.Lock()
	if stream != 0 { // one stream's window: looked up, not searched for among every call
		if c, ok := h.calls.Get(stream); ok {
			flush(stream, c)
		}
	} else {
		for id, c := range h.calls.All() {
			flush(id, c)
		}
	}
	h.mu.Unlock()
	for _, x := range notes {
		h.hp.answerConsumed(x.c, x.n)
	}
}

// fail ends a call with Stormgate's own gRPC status (14 UNAVAILABLE) and msg: a trailers-only response
// when no head went out yet, else trailers after what was sent; DATA that waited is dropped. A consumer
// still sending the request is told to stop (RST_STREAM NO_ERROR, RFC 9113 §8.1). It returns the bytes
// dropped, for the provider's windows.
func (h *h2Session) fail(c *h2Call, reason proxy.ReplyReason, msg string) int {
	return h.failStatus(c, h2.GRPCUnavailable, reason, msg)
}

// failStatus is fail with another gRPC status (DEADLINE_EXCEEDED for a call never sent because its own
// timeout would have passed).
func (h *h2Session) failStatus(c *h2Call, code int, reason proxy.ReplyReason, msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c.done || h.closed {
		return 0
	}
	dropped := h.discardLocked(c)
	b, err := h.conn.AppendHeaders(h.frames(), c.down, h2.ErrorTrailers(c.headSent, code, msg), true)
	h.env.CountLocalReply(reason) // counted before the consumer can see the reply
	h.endedLocked(c, grpcStatus(h.env, code), reason)
	h.send(b)
	if err == nil && h.conn.StreamState(c.down) == h2.StateHalfClosedLocal {
		_ = h.conn.Reset(c.down, h2.ErrCodeNo)
		h.flushLocked()
	}
	h.finishLocked(c)
	return dropped
}

// reset ends a call with RST_STREAM(code) (the provider reset its stream, or refused it in a GOAWAY).
func (h *h2Session) reset(c *h2Call, code h2.ErrCode) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c.done || h.closed {
		return 0
	}
	dropped := h.discardLocked(c)
	h.endedLocked(c, grpcStatus(h.env, h2.GRPCFromReset(code)), proxy.NoLocalReply) // what a gRPC client makes of it
	_ = h.conn.Reset(c.down, code)
	h.flushLocked()
	h.finishLocked(c)
	return dropped
}

// finishLocked ends a call toward the consumer: once, whatever ended it. A call no answer ended is
// counted as its consumer's doing (calls.go).
func (h *h2Session) finishLocked(c *h2Call) {
	if c.done {
		return
	}
	h.endedLocked(c, grpcStatus(h.env, h2.GRPCCancelled), proxy.ConsumerEnded)
	c.done = true
	h.calls.Take(c.down)
	h.consumer.CallEnded()
}

// Announce tells the consumer that Stormgate is draining (Server.Announce), the graceful way (RFC 9113 §6.8):
// GOAWAY NO_ERROR naming the largest stream id, so the streams it is opening right now are still served,
// and a PING; once the PING's answer proves the consumer has seen it, or when the drain proper begins
// (Server.Drain, after drain.min_duration), Drain names the last stream Stormgate will serve. The
// consumer opens its next calls elsewhere; the calls in flight are still answered, and Drain waits for them
// as for Dubbo requests. (One GOAWAY naming the last stream at once refused the streams already on their
// way: a client retries those, but only if it knows they were not processed.)
func (h *h2Session) Announce() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.drain || h.closed {
		return
	}
	h.drain = true
	if h.conn != nil {
		h.conn.GoAwayGracefully(h2DrainDebug, h2DrainPing)
		h.flushLocked()
	}
}

// Drain sends the drain's second GOAWAY, once, after the first.
func (h *h2Session) Drain() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.drain || h.final || h.closed || h.conn == nil {
		return
	}
	h.final = true
	h.conn.GoAway(h2.ErrCodeNo, h2DrainDebug)
	h.flushLocked()
}

// h2DrainDebug is the drain's GOAWAY debug data.
const h2DrainDebug = "stormgate is draining"

// h2DrainPing is the payload of the PING sent with the drain's first GOAWAY.
var h2DrainPing = [8]byte{'s', 'g', '-', 'd', 'r', 'a', 'i', 'n'}

// Closed runs from the session's close callback: every open call is cancelled at the provider. A frame
// cut short is not told apart (cutShort false): the calls it belonged to end as every other open call.
func (h *h2Session) Closed() (cutShort bool) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return false
	}
	h.closed = true
	h.hp.proto.sessions.remove(h)
	h.in = nil // the close path never runs beside the handler (session.onClosed)
	h.chargeIn()
	h.env.Wheel().Stop(&h.stall)
	calls := make([]*h2Call, 0, h.calls.Len())
	dropped := make([]int, 0, h.calls.Len())
	for c := range h.calls.Values() {
		calls = append(calls, c)
		dropped = append(dropped, len(c.out))
		h.dropLocked(len(c.out))
		c.out = nil
	}
	for _, c := range calls {
		h.finishLocked(c)
	}
	h.mu.Unlock()
	for i, c := range calls {
		h.hp.cancel(c)
		h.hp.answerConsumed(c, dropped[i])
	}
	return false
}

// h2GoAwayLinger bounds how long a consumer that ended in a connection error keeps its connection while
// its GOAWAY waits in the writer (x/net's server waits 1 s too).
const h2GoAwayLinger = time.Second
