package loadgen

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/stormgate/stormgate/peer"
	"github.com/stormgate/stormgate/proxy/dubbo"
)

// Consumer connection states, read by the scheduler without the lock.
const (
	stateDown uint32 = iota
	stateOpen
	stateReadonly
	stateLeaving // LeaveOnReadonly: READONLY received; closed once nothing is outstanding
)

var (
	errProtocol = errors.New("protocol error")
	errLeft     = errors.New("left after READONLY")
	errGoAway   = errors.New("left after the server's GOAWAY")
)

// consumer is one simulated Dubbo consumer: one connection slot whose goroutine (run) dials, reads,
// closes and, if configured, redials. It is the only closer of its connection.
//
// Sending: producers append frames to out under mu. Requests (from the scheduler) and heartbeat
// replies (from the reader) are then written at once with a non-blocking write(2), with no goroutine
// hand-off; heartbeats, which come in bursts, are left to the shard writer. Whatever cannot be written
// at once (socket buffer full, or another writer busy) stays in out and the consumer goes on its
// shard's dirty list; the shard writer finishes it with a bounded blocking write. wmu is held by whoever is writing, so bytes leave in the order they were queued.
// Lock order: wmu, then mu.
type consumer struct {
	r     *runner
	idx   int
	shard *shard
	src   netip.Addr
	phase int64 // heartbeat phase, ns
	state atomic.Uint32

	mu         sync.Mutex
	nc         net.Conn // nil while down
	rc         syscall.RawConn
	out, spare []byte // frames not yet written; spare is a buffer to swap in
	queued     bool   // on the shard's dirty list
	werr       error  // write error, reported by the reader
	ring       pendingRing
	oneWayNext int64 // one-way requests sent on this connection (their ids are oneWayIDs+n)
	dialStart  int64 // for FirstReply; -1 once the first reply was seen

	h2       *h2state     // Triple: the connection's HTTP/2 state (guarded by mu); nil for Dubbo
	lastRead atomic.Int64 // Triple: when a frame other than a PING answer last arrived (ns since the run's start), for idle PINGs

	wmu     sync.Mutex // held while writing to the socket
	wbuf    []byte     // argument and results of rawWriteFn, guarded by wmu
	wn      int
	werrRaw error
	rawFn   func(fd uintptr) bool // c.rawWrite, bound once so that writing does not allocate
}

// usable reports whether the scheduler may pick this consumer for a request.
func (c *consumer) usable() bool {
	s := c.state.Load()
	return s == stateOpen || (s == stateReadonly && !c.r.cfg.HonorReadonly)
}

// oneWayIDs is where a connection's one-way request ids start: far above the ring's ids, so an
// answer to a one-way request (there must be none) counts as an unknown id.
const oneWayIDs = 1 << 62

// sendRequest queues one request scheduled at sched and writes it if it can. With size > 0 it
// carries the checked body (key, size), one-way if oneWay is set; otherwise it is the Method(Arg)
// template. It returns false (Unsent) if the connection is down or its backlog is over maxQueued.
func (c *consumer) sendRequest(sched int64, key uint64, size int, oneWay bool) bool {
	if c.h2 != nil {
		return c.sendCall(sched, key, size)
	}
	c.mu.Lock()
	if c.nc == nil || len(c.out) > maxQueued {
		c.mu.Unlock()
		return false
	}
	switch {
	case size == 0:
		id := c.ring.push(slotRequest, sched)
		n := len(c.out)
		c.out = append(c.out, c.r.reqFrame...)
		dubbo.SetID(c.out[n:], id)
	case oneWay:
		c.oneWayNext++
		c.out = appendBodyRequest(c.out, oneWayIDs+c.oneWayNext, false, key, size)
	default:
		id := c.ring.pushSlot(slot{at: sched, kind: slotRequest, key: key, size: int32(size)})
		c.out = appendBodyRequest(c.out, id, true, key, size)
	}
	queued := c.queued
	c.mu.Unlock()
	if !oneWay {
		c.r.cnt.inflight.Add(1)
	}
	if !queued {
		c.tryWrite()
	}
	return true
}

// sendHeartbeat queues one heartbeat for the shard writer; false if the connection is down.
// Heartbeats come in bursts (thousands per second at 10,000 connections) and are not latency
// critical, so the scheduler leaves their writes to the shards, several per wake-up.
func (c *consumer) sendHeartbeat(now int64) bool {
	if c.h2 != nil {
		return c.sendPing(now, false)
	}
	c.mu.Lock()
	if c.nc == nil || len(c.out) > maxQueued || c.state.Load() == stateLeaving {
		c.mu.Unlock()
		return false
	}
	id := c.ring.push(slotHeartbeat, now)
	c.out = dubbo.AppendHeartbeatRequest(c.out, id)
	dirty := c.markDirtyLocked()
	c.mu.Unlock()
	c.r.cnt.inflight.Add(1)
	c.r.cnt.hbSent.Add(1)
	if dirty {
		c.shard.add(c)
	}
	return true
}

// sendHeartbeatReply answers a server's two-way event request (Java form).
func (c *consumer) sendHeartbeatReply(id int64, serial byte) {
	c.mu.Lock()
	if c.nc == nil {
		c.mu.Unlock()
		return
	}
	c.out = dubbo.AppendHeartbeatReply(c.out, id, serial)
	queued := c.queued
	c.mu.Unlock()
	if !queued {
		c.tryWrite()
	}
}

// markDirtyLocked puts the consumer on its shard's list unless it is there; the caller holds mu and,
// when it returns true, calls c.shard.add(c) after unlocking.
func (c *consumer) markDirtyLocked() bool {
	if c.queued {
		return false
	}
	c.queued = true
	return true
}

// takeLocked swaps out the pending bytes for writing.
func (c *consumer) takeLocked() (net.Conn, syscall.RawConn, []byte) {
	nc, rc, buf := c.nc, c.rc, c.out
	if nc == nil || len(buf) == 0 {
		return nil, nil, nil
	}
	c.out, c.spare = c.spare[:0], nil
	return nc, rc, buf
}

// restoreLocked settles a write of buf to nc that wrote n bytes: the unwritten tail goes back in front
// of out (returns true: the shard must finish it), a hard error is handed to the reader.
func (c *consumer) restoreLocked(nc net.Conn, buf []byte, n int, err error) (requeue bool) {
	switch {
	case c.nc != nc || n == len(buf): // done, or the connection it was for is gone
		c.spare = buf[:0]
	case err == nil || errors.Is(err, syscall.EAGAIN) || errors.Is(err, os.ErrDeadlineExceeded):
		rest := append(buf[:0], buf[n:]...)
		rest = append(rest, c.out...)
		c.spare, c.out = c.out[:0], rest
		return c.markDirtyLocked()
	default:
		// Let the reader, the connection's only closer, see and classify the error.
		c.werr = err
		c.spare = buf[:0]
		_ = nc.SetReadDeadline(time.Unix(1, 0))
	}
	return false
}

// tryWrite writes what is queued with one non-blocking write(2), unless another writer is busy (then
// the shard finishes the job).
func (c *consumer) tryWrite() {
	if !c.wmu.TryLock() {
		c.mu.Lock()
		dirty := c.markDirtyLocked()
		c.mu.Unlock()
		if dirty {
			c.shard.add(c)
		}
		return
	}
	c.mu.Lock()
	var nc net.Conn
	var rc syscall.RawConn
	var buf []byte
	if !c.queued {
		nc, rc, buf = c.takeLocked()
	}
	c.mu.Unlock()
	if nc == nil {
		c.wmu.Unlock()
		return
	}
	c.wbuf, c.wn, c.werrRaw = buf, 0, nil
	n, err := c.writeNonBlocking(rc, buf)
	c.mu.Lock()
	requeue := c.restoreLocked(nc, buf, n, err)
	c.mu.Unlock()
	c.wmu.Unlock()
	if requeue {
		c.shard.add(c)
	}
}

// writeNonBlocking makes one write(2) attempt; the caller holds wmu.
func (c *consumer) writeNonBlocking(rc syscall.RawConn, buf []byte) (int, error) {
	c.wbuf, c.wn, c.werrRaw = buf, 0, nil
	if err := rc.Write(c.rawFn); err != nil {
		c.werrRaw = err
	}
	c.wbuf = nil
	return c.wn, c.werrRaw
}

// rawWrite is the RawConn callback: one non-blocking write(2), never waiting for writability.
func (c *consumer) rawWrite(fd uintptr) bool {
	n, err := syscall.Write(int(fd), c.wbuf)
	if n < 0 {
		n = 0
	}
	c.wn, c.werrRaw = n, err
	return true
}

// flush runs on the shard writer: write everything queued, first without blocking, then (if the
// socket buffer is full) blocking at most writeSlice.
func (c *consumer) flush() {
	c.wmu.Lock()
	c.mu.Lock()
	c.queued = false
	nc, rc, buf := c.takeLocked()
	c.mu.Unlock()
	if nc == nil {
		c.wmu.Unlock()
		return
	}
	n, err := c.writeNonBlocking(rc, buf)
	if n < len(buf) && (err == nil || errors.Is(err, syscall.EAGAIN)) {
		_ = nc.SetWriteDeadline(time.Now().Add(writeSlice))
		var m int
		m, err = nc.Write(buf[n:])
		n += m
		// Clear it: a deadline left in the past fails every later write on this connection at
		// once (the non-blocking path too), and the connection would never write again.
		_ = nc.SetWriteDeadline(time.Time{})
	}
	c.mu.Lock()
	requeue := c.restoreLocked(nc, buf, n, err)
	c.mu.Unlock()
	c.wmu.Unlock()
	if requeue {
		c.shard.add(c)
	}
}

// run owns this consumer's connection for the whole run.
func (c *consumer) run(ctx context.Context, connectDone func()) {
	r := c.r
	first := true
	for {
		if !first {
			if r.cfg.Reconnect <= 0 || !sleepCtx(ctx, r.cfg.Reconnect) {
				return
			}
		} else if r.cfg.ConnectRate > 0 {
			at := time.Duration(float64(c.idx) / r.cfg.ConnectRate * 1e9)
			if !sleepCtx(ctx, at-time.Since(r.t0)) {
				connectDone()
				return
			}
		}
		nc, err := c.dial(ctx)
		redial := !first
		if first {
			connectDone()
			first = false
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			r.countDialError(err)
			continue
		}
		if redial {
			r.cnt.reconnects.Add(1)
		}
		c.serve(ctx, nc)
		if ctx.Err() != nil {
			return
		}
	}
}

func (c *consumer) dial(ctx context.Context) (net.Conn, error) {
	r := c.r
	select {
	case r.dialSem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-r.dialSem }()
	d := net.Dialer{Timeout: r.cfg.ConnectTimeout, KeepAlive: -1}
	if c.src.IsValid() {
		d.LocalAddr = &net.TCPAddr{IP: c.src.AsSlice()}
	}
	start := r.now()
	nc, err := d.DialContext(ctx, "tcp", r.cfg.Target)
	if err != nil {
		return nil, err
	}
	r.connectHist.Record(time.Duration(r.now() - start))
	c.mu.Lock()
	c.dialStart = start
	c.mu.Unlock()
	return nc, nil
}

// serve runs one connection: attach, read until it fails, detach. Returns when the connection is closed.
func (c *consumer) serve(ctx context.Context, nc net.Conn) {
	r := c.r
	var rc syscall.RawConn
	if sc, ok := nc.(syscall.Conn); ok {
		rc, _ = sc.SyscallConn()
	}
	if rc == nil {
		_ = nc.Close()
		r.cnt.other.Add(1)
		return
	}
	c.mu.Lock()
	c.nc, c.rc, c.werr = nc, rc, nil
	if c.rawFn == nil {
		c.rawFn = c.rawWrite
	}
	c.ring.reset()
	c.out = c.out[:0]
	if c.h2 != nil {
		c.h2.open(c)
	}
	c.mu.Unlock()
	c.state.Store(stateOpen)
	r.cnt.connsOpened.Add(1)
	r.cnt.connsOpen.Add(1)
	stop := context.AfterFunc(ctx, func() { _ = nc.SetReadDeadline(time.Unix(1, 0)) })
	var err error
	if c.h2 != nil {
		c.lastRead.Store(r.now())
		c.tryWrite() // the preface and SETTINGS
		if r.cfg.ProbeOnConnect {
			c.sendPing(r.now(), true)
		}
		err = c.readLoopH2(nc)
	} else {
		if r.cfg.ProbeOnConnect {
			c.sendHeartbeat(r.now())
		}
		err = c.readLoop(nc)
	}

	stop()
	if ctx.Err() != nil {
		// The run is over: what it queued last (the RST_STREAM of a call its deadline ended) leaves before
		// the close. Dropped, the provider never saw that reset (TestTripleTimeoutsReset: 29 of 30 beside
		// a CPU hog, twice).
		c.flush()
	}
	c.state.Store(stateDown)
	c.mu.Lock()
	c.nc, c.rc = nil, nil
	c.out = c.out[:0]
	werr := c.werr
	reqs, hbs := c.ring.dropAll()
	if c.h2 != nil {
		c.h2.close()
	}
	c.mu.Unlock()
	_ = nc.Close()
	r.cnt.connsOpen.Add(-1)
	r.cnt.inflight.Add(-int64(reqs + hbs))
	if ctx.Err() != nil {
		r.cnt.abandoned.Add(reqs)
		r.cnt.hbAbandoned.Add(hbs)
		return
	}
	r.cnt.lost.Add(reqs)
	r.cnt.hbLost.Add(hbs)
	if werr != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		err = werr
	}
	switch {
	case errors.Is(err, errLeft):
		r.cnt.left.Add(1)
	case errors.Is(err, errGoAway):
		r.cnt.closedByPeer.Add(1)
	case errors.Is(err, errProtocol):
		r.cnt.protocolErrors.Add(1)
	case errors.Is(err, io.EOF):
		r.cnt.closedByPeer.Add(1)
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		r.cnt.resets.Add(1)
	default:
		r.cnt.other.Add(1)
	}
}

// readLoop reads frames until the connection fails. Frames are handled in place; the buffer starts
// small (most consumers receive tiny frames) and grows to the largest frame seen, up to MaxFrame.
func (c *consumer) readLoop(nc net.Conn) error {
	maxFrame := c.r.cfg.MaxFrame
	buf := make([]byte, 512)
	w := 0
	for {
		n, rerr := nc.Read(buf[w:])
		w += n
		rd := 0
		for w-rd >= dubbo.HeaderLen {
			h, fl, err := dubbo.Split(buf[rd:w], maxFrame)
			if err != nil {
				return errProtocol
			}
			if fl == 0 { // incomplete frame
				if need := h.FrameLen(); need > len(buf) {
					grown := make([]byte, max(need, min(2*len(buf), maxFrame)))
					w = copy(grown, buf[rd:w])
					buf, rd = grown, 0
				}
				break
			}
			c.handle(h, buf[rd+dubbo.HeaderLen:rd+fl])
			rd += fl
		}
		if rd > 0 {
			w = copy(buf, buf[rd:w])
		}
		if rerr != nil {
			return rerr
		}
		if c.state.Load() == stateLeaving && c.idle() {
			return errLeft
		}
	}
}

func (c *consumer) handle(h dubbo.Header, body []byte) {
	r := c.r
	if h.Flags&dubbo.FlagRequest != 0 {
		if h.Flags&dubbo.FlagEvent == 0 {
			r.cnt.unexpectedRequests.Add(1)
			return
		}
		switch dubbo.EventBody(body) {
		case 'R':
			r.cnt.readonly.Add(1)
			if r.cfg.LeaveOnReadonly {
				c.state.Store(stateLeaving) // final for this connection: WRITEABLE does not undo it
			} else {
				c.state.CompareAndSwap(stateOpen, stateReadonly)
			}
		case 'W':
			r.cnt.writeable.Add(1)
			c.state.CompareAndSwap(stateReadonly, stateOpen)
		default:
			if h.Flags&dubbo.FlagTwoWay == 0 {
				r.cnt.otherEvents.Add(1)
			}
		}
		if h.Flags&dubbo.FlagTwoWay != 0 { // any two-way event is answered as a heartbeat, as Dubbo does
			r.cnt.serverHeartbeats.Add(1)
			c.sendHeartbeatReply(h.ID, h.Serial())
		}
		return
	}
	want := slotRequest
	if h.Flags&dubbo.FlagEvent != 0 {
		want = slotHeartbeat
	}
	now := r.now()
	c.mu.Lock()
	s, first, ok := c.matchLocked(h.ID, want)
	c.mu.Unlock()
	if !ok || !r.answered(now, s, first, want) {
		return
	}
	switch {
	case h.Status != dubbo.StatusOK:
		r.cnt.errors.Add(1)
		r.cnt.byStatus[h.Status].Add(1)
	case s.size > 0:
		if !peer.BodyEqual(body, s.key, int(s.size)) {
			r.cnt.mismatches.Add(1)
			if key, full, err := peer.CheckBody(body); err == nil && full && key != s.key {
				r.cnt.foreign.Add(1)
			}
			break
		}
		r.cnt.ok.Add(1)
	case isException(body):
		r.cnt.exceptions.Add(1)
	default:
		r.cnt.ok.Add(1)
	}
	r.recordLatency(now, s)
}

// matchLocked retires id's slot for an answer of kind want and returns it with the connection's dial
// start (-1 after its first answer). An answer that matches nothing outstanding is counted (late,
// unknown or duplicate) and ok is false. The caller holds mu.
func (c *consumer) matchLocked(id int64, want slotKind) (s slot, first int64, ok bool) {
	r := c.r
	s, res := c.ring.complete(id, want)
	switch res {
	case late:
		r.cnt.lateReplies.Add(1)
		return s, 0, false
	case unknown:
		r.cnt.unknownIDs.Add(1)
		return s, 0, false
	case duplicate:
		r.cnt.duplicates.Add(1)
		return s, 0, false
	}
	first = c.dialStart
	if first >= 0 {
		c.dialStart = -1
	}
	return s, first, true
}

// answered records what every matched answer shares (in flight, longest gap, first reply) and, for a
// heartbeat, its round trip; it returns true for a request, whose outcome the caller counts.
func (r *runner) answered(now int64, s slot, first int64, want slotKind) bool {
	r.cnt.inflight.Add(-1)
	r.noteAnswer(now)
	if first >= 0 {
		r.firstHist.Record(time.Duration(now - first))
	}
	if want == slotHeartbeat {
		r.cnt.hbAnswered.Add(1)
		r.hbHist.Record(time.Duration(now - s.at))
		return false
	}
	return true
}

// recordLatency records an answered request's latency, from its scheduled time.
func (r *runner) recordLatency(now int64, s slot) {
	lat := time.Duration(now - s.at)
	r.latHist.Record(lat)
	r.win.Load().Record(lat)
}

// idle reports whether nothing sent on the connection waits for an answer.
func (c *consumer) idle() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ring.head == c.ring.next
}

// sleepCtx waits d; false if ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
