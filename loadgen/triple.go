package loadgen

import (
	"bytes"
	"net"
	"strconv"

	"github.com/stormgate/stormgate/peer"
	"github.com/stormgate/stormgate/proxy/h2"
)

// Triple consumers (Config.Protocol "triple"): h2c with prior knowledge, one stream per unary call,
// the Triple request dubbo-go v3.3.0 sends without IDL (peer.AppendTripleBody, peer.AppendTripleString:
// a gRPC message holding a hessian2 TripleRequestWrapper, content-type application/grpc+hessian2).
// The HTTP/2 state machine is proxy/h2's Conn in the client role, the codec Stormgate itself runs: it
// keeps the server's SETTINGS_MAX_CONCURRENT_STREAMS and both flow-control windows, answers the server's
// PINGs and SETTINGS, and says when to send WINDOW_UPDATEs for what this side consumed.
//
// Everything here runs under consumer.mu (the reader, the scheduler and the sweeper take turns) and
// writes through the consumer's send buffer (out), so the Dubbo path's writers serve both protocols.
// The Conn's own frames (Output) are moved to out before anything this side appends after them.
//
// A call is a ring slot like a Dubbo request (same timeouts, same accounting). It waits in waiting
// until the Conn may open a stream (the server's SETTINGS arrived, fewer streams open than its limit);
// a call that expired meanwhile is never sent. A call that times out on an open stream is reset
// (RST_STREAM CANCEL), as gRPC clients do at their deadline. PINGs are heartbeats: each carries its
// ring id in a peer.LoadPing payload, and is sent only on a connection that received nothing but PING
// answers for a heartbeat interval (as x/net's ReadIdleTimeout, which dubbo-go v3.3.0 sets to 10 s).

const (
	// maxWaiting bounds the calls one connection holds while waiting for a stream (a few words each:
	// their bodies are built when their streams open); more count as Unsent.
	maxWaiting = 4096
	// The consumer's receive windows: answers are copied out of the read buffer at once, so a window
	// bounds only what is in flight, not memory.
	h2StreamWindow = 1 << 20
	h2ConnWindow   = 16 << 20
	// minReadBuf is where a Triple connection's read buffer starts; it grows to the largest frame seen
	// (16 KiB + 9 at most: this side announces the default SETTINGS_MAX_FRAME_SIZE).
	minReadBuf = 512
)

// h2state is one Triple consumer connection's HTTP/2 state; consumer.mu guards it.
type h2state struct {
	conn     *h2.Conn
	ready    bool // the server's first SETTINGS arrived: streams may open
	goAway   bool // the server's GOAWAY arrived: nothing new is sent
	streams  map[uint32]*h2call
	waiting  []*h2call // calls waiting for a stream, oldest first from waitHead
	waitHead int
	free     []*h2call
	pings    uint64 // server PINGs the Conn answered, already counted
}

// h2call is one unary call: its ring slot and its bytes both ways.
type h2call struct {
	id   int64 // ring id
	key  uint64
	size int    // checked body (key, size), or 0: the template
	msg  []byte // the request message (buf, or the shared template), built when its stream opens
	buf  []byte
	sent int    // bytes of msg sent
	in   []byte // the answer's message so far
}

// tripleHead is the request head of every call: what dubbo-go v3.3.0's Triple client sends (its grpc
// protocol: user-agent, content-type, accept-encoding, te, grpc-timeout).
func tripleHead(cfg *Config) []h2.HeaderField {
	return []h2.HeaderField{
		{Name: ":method", Value: "POST"},
		{Name: ":scheme", Value: "http"},
		{Name: ":path", Value: "/" + cfg.Service + "/" + cfg.Method},
		{Name: ":authority", Value: cfg.Target},
		{Name: "content-type", Value: peer.TripleContentType},
		{Name: "user-agent", Value: "stormbench"},
		{Name: "accept-encoding", Value: "identity"},
		{Name: "te", Value: "trailers"},
		{Name: "grpc-timeout", Value: strconv.FormatInt(cfg.Timeout.Milliseconds(), 10) + "m"},
	}
}

// open starts a new connection's HTTP/2 state, its preface and SETTINGS queued in out (under mu).
func (h *h2state) open(c *consumer) {
	h.conn = h2.NewConn(h2.Config{Role: h2.RoleClient, InitialWindowSize: h2StreamWindow, ConnWindowSize: h2ConnWindow})
	h.ready, h.goAway, h.pings = false, false, 0
	if h.streams == nil {
		h.streams = make(map[uint32]*h2call)
	}
	c.h2sync()
}

// close forgets the connection's calls (their ring slots are dropped by the caller) (under mu).
func (h *h2state) close() {
	for id, k := range h.streams {
		h.put(k)
		delete(h.streams, id)
	}
	for i := h.waitHead; i < len(h.waiting); i++ {
		h.put(h.waiting[i])
	}
	clear(h.waiting)
	h.waiting, h.waitHead = h.waiting[:0], 0
	h.conn = nil
}

func (h *h2state) get() *h2call {
	if n := len(h.free); n > 0 {
		k := h.free[n-1]
		h.free = h.free[:n-1]
		return k
	}
	return new(h2call)
}

// put recycles k, keeping its buffers unless they grew large.
func (h *h2state) put(k *h2call) {
	if cap(k.buf) > 1<<20 {
		k.buf = nil
	}
	if cap(k.in) > 1<<20 {
		k.in = nil
	}
	*k = h2call{buf: k.buf[:0], in: k.in[:0]}
	h.free = append(h.free, k)
}

// h2sync moves the Conn's own frames to out (under mu).
func (c *consumer) h2sync() {
	if o := c.h2.conn.Output(); len(o) > 0 {
		c.out = append(c.out, o...)
		c.h2.conn.ClearOutput()
	}
}

// sendCall queues a Triple call scheduled at sched (checked body (key, size), or the template when
// size is 0) and opens its stream if it can. False (Unsent) if the connection is down, going away,
// or its backlog is over its bounds.
func (c *consumer) sendCall(sched int64, key uint64, size int) bool {
	r := c.r
	c.mu.Lock()
	h := c.h2
	if c.nc == nil || h.conn == nil || h.goAway || len(c.out) > maxQueued || len(h.waiting)-h.waitHead >= maxWaiting {
		c.mu.Unlock()
		return false
	}
	k := h.get()
	k.id = c.ring.pushSlot(slot{at: sched, kind: slotRequest, key: key, size: int32(size)})
	k.key, k.size = key, size
	if len(h.waiting) > h.waitHead || !h.ready || !h.conn.CanOpenStream() {
		r.cnt.streamsWaited.Add(1)
	}
	h.waiting = append(h.waiting, k)
	c.pumpLocked(r.now())
	queued := c.queued
	c.mu.Unlock()
	r.cnt.inflight.Add(1)
	if !queued {
		c.tryWrite()
	}
	return true
}

// pumpLocked opens streams for waiting calls while the Conn allows, oldest first; calls that expired
// while they waited are dropped unsent (the sweeper counted them).
func (c *consumer) pumpLocked(now int64) {
	h := c.h2
	for h.waitHead < len(h.waiting) && h.ready && h.conn.CanOpenStream() {
		k := h.waiting[h.waitHead]
		h.waiting[h.waitHead] = nil
		h.waitHead++
		if !c.ring.pending(k.id, slotRequest) {
			h.put(k)
			continue
		}
		sid, err := h.conn.OpenStream()
		if err != nil { // CanOpenStream said yes; cannot happen
			h.put(k)
			continue
		}
		// The message is built only now: waiting calls hold no body bytes.
		if k.size > 0 {
			k.buf = peer.AppendTripleBody(k.buf[:0], k.key, k.size)
			k.msg = k.buf
		} else {
			k.msg = c.r.tripleMsg
		}
		h.streams[sid] = k
		c.h2sync()
		c.out, _ = h.conn.AppendHeaders(c.out, sid, c.r.tripleHead, false)
		c.sendDataLocked(now, sid, k)
		c.r.raiseOpenStreams(int64(h.conn.OpenStreams()))
	}
	if h.waitHead == len(h.waiting) {
		h.waiting, h.waitHead = h.waiting[:0], 0
	} else if h.waitHead >= 64 && 2*h.waitHead >= len(h.waiting) {
		n := copy(h.waiting, h.waiting[h.waitHead:])
		clear(h.waiting[n:])
		h.waiting, h.waitHead = h.waiting[:n], 0
	}
}

// sendDataLocked sends as much of k's message as the windows allow; the rest goes when they open.
func (c *consumer) sendDataLocked(now int64, sid uint32, k *h2call) {
	c.h2sync()
	var n int
	c.out, n, _ = c.h2.conn.AppendData(now, c.out, sid, k.msg[k.sent:], true)
	k.sent += n
}

// sendPing queues a PING on an idle connection (nothing but PING answers received for a heartbeat
// interval), or on any open one with force; false if none was sent.
func (c *consumer) sendPing(now int64, force bool) bool {
	r := c.r
	if !force && now-c.lastRead.Load() < int64(r.cfg.HeartbeatInterval) {
		return false
	}
	c.mu.Lock()
	h := c.h2
	if c.nc == nil || h.conn == nil || len(c.out) > maxQueued || c.state.Load() == stateLeaving {
		c.mu.Unlock()
		return false
	}
	id := c.ring.push(slotHeartbeat, now)
	h.conn.Ping(peer.LoadPing(uint32(id)))
	c.h2sync()
	dirty := c.markDirtyLocked()
	c.mu.Unlock()
	r.cnt.inflight.Add(1)
	r.cnt.hbSent.Add(1)
	if dirty {
		c.shard.add(c)
	}
	return true
}

// readLoopH2 reads frames until the connection fails, the server breaks the protocol (errProtocol,
// after this side's GOAWAY is written), or, after the server's GOAWAY, nothing is left in flight.
func (c *consumer) readLoopH2(nc net.Conn) error {
	r := c.r
	buf := make([]byte, minReadBuf)
	w := 0
	for {
		n, rerr := nc.Read(buf[w:])
		w += n
		now := r.now()
		c.mu.Lock()
		rd, perr := c.readFramesLocked(now, buf[:w])
		queued := c.queued
		pending := len(c.out) > 0
		leaving := c.h2.goAway && c.ring.head == c.ring.next
		c.mu.Unlock()
		if pending && !queued {
			c.tryWrite()
		}
		if perr != nil {
			c.flush() // the GOAWAY, as far as the socket takes it
			return errProtocol
		}
		w = copy(buf, buf[rd:w])
		if hdr, ok := h2.ParseFrameHeader(buf[:w]); ok && hdr.FrameLen() > len(buf) {
			grown := make([]byte, hdr.FrameLen()) // bounded by the Conn's SETTINGS_MAX_FRAME_SIZE (checked by Read)
			copy(grown, buf[:w])
			buf = grown
		}
		if rerr != nil {
			return rerr
		}
		if leaving {
			return errGoAway
		}
	}
}

// readFramesLocked hands every whole frame in b to the Conn and handles its events. It returns how
// many bytes it consumed, and the Conn's connection error if the server broke the protocol.
func (c *consumer) readFramesLocked(now int64, b []byte) (int, error) {
	h := c.h2
	rd := 0
	for {
		n, ev, err := h.conn.Read(now, b[rd:])
		if err != nil {
			c.h2sync()
			return rd, err
		}
		if n == 0 {
			break
		}
		rd += n
		if ev.Kind != h2.EventPingAck {
			// Idle means nothing but PING answers: an idle connection PINGs every interval (x/net
			// counts the answer too, and so PINGs every other tick of a fixed schedule).
			c.lastRead.Store(now)
		}
		c.h2event(now, ev)
	}
	if p := h.conn.Counters().PingsAnswered; p > h.pings {
		c.r.cnt.serverHeartbeats.Add(p - h.pings)
		h.pings = p
	}
	c.h2sync()
	return rd, nil
}

func (c *consumer) h2event(now int64, ev h2.Event) {
	r, h := c.r, c.h2
	switch ev.Kind {
	case h2.EventSettings:
		h.ready = true
		c.pumpLocked(now)
	case h2.EventHeaders:
		k := h.streams[ev.Stream]
		if k == nil || !ev.EndStream {
			return // a response head; the trailers decide
		}
		code, _, ok := h2.GRPCStatus(ev.Fields)
		if !ok {
			code = httpToGRPC(ev.Fields)
		}
		c.finishLocked(now, ev.Stream, k, code)
	case h2.EventData:
		_ = h.conn.Consumed(ev.Stream, len(ev.Data)) // copied below, or dropped
		k := h.streams[ev.Stream]
		if k == nil {
			return
		}
		if len(k.in)+len(ev.Data) > r.cfg.MaxFrame {
			// Larger than any answer this run may get (grpc-go: RESOURCE_EXHAUSTED).
			_ = h.conn.Reset(ev.Stream, h2.ErrCodeCancel)
			c.finishLocked(now, ev.Stream, k, h2.GRPCResourceExhausted)
			return
		}
		k.in = append(k.in, ev.Data...)
		if ev.EndStream { // no trailers: the call failed (grpc-go: INTERNAL)
			c.finishLocked(now, ev.Stream, k, h2.GRPCInternal)
		}
	case h2.EventReset:
		if k := h.streams[ev.Stream]; k != nil {
			r.cnt.streamResets.Add(1)
			c.finishLocked(now, ev.Stream, k, resetToGRPC(ev.Code))
		}
	case h2.EventWindow:
		for sid, k := range h.streams {
			if k.sent < len(k.msg) {
				c.sendDataLocked(now, sid, k)
			}
		}
	case h2.EventGoAway:
		r.cnt.goAways.Add(1)
		h.goAway = true
		c.state.Store(stateLeaving)
		// Streams above the last one the server will process, and calls not yet on a stream, were
		// never processed: lost (a client may retry them elsewhere).
		for sid, k := range h.streams {
			if sid > ev.LastStream {
				delete(h.streams, sid)
				c.loseLocked(k)
			}
		}
		for i := h.waitHead; i < len(h.waiting); i++ {
			c.loseLocked(h.waiting[i])
			h.waiting[i] = nil
		}
		h.waiting, h.waitHead = h.waiting[:0], 0
	case h2.EventPingAck:
		if n, ok := peer.IsLoadPing(ev.Ping); ok {
			if s, first, ok := c.matchLocked(int64(n), slotHeartbeat); ok {
				r.answered(now, s, first, slotHeartbeat)
			}
		}
	}
}

// loseLocked retires a call that will get no answer on this connection.
func (c *consumer) loseLocked(k *h2call) {
	if _, res := c.ring.complete(k.id, slotRequest); res == matched {
		c.r.cnt.inflight.Add(-1)
		c.r.cnt.lost.Add(1)
	}
	c.h2.put(k)
}

// finishLocked ends a call with its gRPC status and counts it: status 0 with a checked body must carry
// exactly the request's message (the echo).
func (c *consumer) finishLocked(now int64, sid uint32, k *h2call, code int) {
	r, h := c.r, c.h2
	delete(h.streams, sid)
	if k.sent < len(k.msg) { // answered before the request was all sent: stop sending it
		_ = h.conn.Reset(sid, h2.ErrCodeCancel)
	}
	if s, first, ok := c.matchLocked(k.id, slotRequest); ok && r.answered(now, s, first, slotRequest) {
		r.cnt.grpcStatus[min(code, 255)].Add(1)
		switch {
		case code != 0:
			r.cnt.errors.Add(1)
			r.cnt.byStatus[min(code, 255)].Add(1)
		case s.size > 0 && !bytes.Equal(k.in, k.msg):
			r.cnt.mismatches.Add(1)
			if body, err := peer.TripleBody(k.in, nil); err == nil {
				if key, full, err := peer.CheckBody(body); err == nil && full && key != s.key {
					r.cnt.foreign.Add(1)
				}
			}
		default:
			r.cnt.ok.Add(1)
		}
		r.recordLatency(now, s)
	}
	h.put(k)
	c.pumpLocked(now)
}

// cancelExpiredLocked resets the streams of calls the sweeper expired (a gRPC client's deadline),
// so they stop counting against the server's stream limit; it reports whether frames were queued.
func (c *consumer) cancelExpiredLocked() bool {
	h := c.h2
	if h == nil || h.conn == nil {
		return false
	}
	reset := false
	for sid, k := range h.streams {
		if !c.ring.pending(k.id, slotRequest) {
			_ = h.conn.Reset(sid, h2.ErrCodeCancel)
			delete(h.streams, sid)
			h.put(k)
			reset = true
		}
	}
	if reset {
		c.h2sync()
		c.pumpLocked(c.r.now())
	}
	return reset
}

// httpToGRPC maps a response without grpc-status to a gRPC code as gRPC clients do (the HTTP status
// mapping of gRPC's http-grpc-status-mapping.md; a 200 without it is INTERNAL).
func httpToGRPC(fields []h2.HeaderField) int {
	s, _ := h2.Field(fields, h2.HeaderStatus)
	switch s {
	case "400":
		return h2.GRPCInternal
	case "401":
		return 16 // UNAUTHENTICATED
	case "403":
		return 7 // PERMISSION_DENIED
	case "404":
		return 12 // UNIMPLEMENTED
	case "429", "502", "503", "504":
		return h2.GRPCUnavailable
	case "200":
		return h2.GRPCInternal
	}
	return 2 // UNKNOWN
}

// resetToGRPC maps a stream's RST_STREAM code to the gRPC code grpc-go reports for it.
func resetToGRPC(code h2.ErrCode) int {
	switch code {
	case h2.ErrCodeRefusedStream:
		return h2.GRPCUnavailable
	case h2.ErrCodeCancel:
		return 1 // CANCELLED
	case h2.ErrCodeEnhanceYourCalm:
		return h2.GRPCResourceExhausted
	}
	return h2.GRPCInternal
}

// raiseOpenStreams keeps the most streams open at once on one connection.
func (r *runner) raiseOpenStreams(n int64) {
	for {
		m := r.cnt.maxOpenStreams.Load()
		if n <= m || r.cnt.maxOpenStreams.CompareAndSwap(m, n) {
			return
		}
	}
}
