package proxy

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudwego/netpoll"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/stormgate/stormgate/keepalive"
)

// Upstream connection states.
const (
	stateReady    int32 = iota // takes new requests
	stateReadonly              // provider sent READONLY, or the slot is retiring: in-flight only
	stateClosed                // dead; pending entries have been answered
)

// pendingEntry is one request Stormgate forwarded and still owes an answer for.
type pendingEntry struct {
	sess   *Session // nil for Stormgate's own heartbeats
	origID int64
	serial byte
	start  int64 // unix nanos at arrival at Stormgate
}

// upConn is one provider connection. Lock order: Pool.hold.mu -> upConn.mu -> Session.wmu.
//
//	| step        | who runs it                          | notes
//	| send        | consumer onRequest, hold dispatcher  | registers pending + appends to out under mu; the
//	|             |                                      | goroutine that finds no writer writes (writeOut)
//	| flushLoop   | its own goroutine                    | takes over writing when the socket is full
//	| onRequest   | netpoll, one at a time               | routes responses, answers provider heartbeats, READONLY
//	| onBeat      | keepalive wheel goroutine            | sends a heartbeat when idle; declares death after max missed
//	| fail        | anyone, once                         | answers every pending request with an error, closes
type upConn struct {
	pool *Pool
	conn netpoll.Connection
	slot int

	state    atomic.Int32
	npending atomic.Int32
	lastRead atomic.Int64
	beat     keepalive.Timer
	done     chan struct{}

	mu      sync.Mutex
	pending map[int64]pendingEntry
	out     []byte
	frames  int
	writing bool // a goroutine owns writing to the socket (inline writer or flushLoop)

	fd       int           // the socket, for non-blocking direct writes
	kick     chan struct{} // hands the writer role to flushLoop when the socket is full
	tail     []byte        // bytes the kernel did not take, for flushLoop; guarded by the writer role
	spare    []byte        // guarded by the writer role
	wmu      sync.Mutex    // held around every direct write(2); guards fdClosed
	fdClosed bool          // no more writes: set before netpoll closes the fd
	nmu      sync.Mutex    // held by flushLoop while it uses netpoll's Writer; the close callback waits on it
	once     sync.Once
}

func newUpConn(p *Pool, conn netpoll.Connection, slot int) *upConn {
	uc := &upConn{
		pool:    p,
		conn:    conn,
		slot:    slot,
		fd:      -1,
		done:    make(chan struct{}),
		pending: make(map[int64]pendingEntry, 256),
		kick:    make(chan struct{}, 1),
	}
	if c, ok := conn.(interface{ Fd() int }); ok {
		uc.fd = c.Fd()
	}
	uc.lastRead.Store(time.Now().UnixNano())
	uc.beat.Init(uc.onBeat)
	return uc
}

// send registers a pending entry under a fresh upstream id and queues the frame
// with that id. It returns false when the connection takes no new requests.
func (uc *upConn) send(s *Session, f Frame, frame []byte, start int64) bool {
	p := uc.pool
	uc.mu.Lock()
	if uc.state.Load() != stateReady {
		uc.mu.Unlock()
		return false
	}
	id := p.ids.Add(1)
	uc.pending[id] = pendingEntry{sess: s, origID: f.ID, serial: f.Serial, start: start}
	uc.npending.Add(1)
	s.inflight.Add(1)
	n := len(uc.out)
	uc.out = append(uc.out, frame...)
	p.srv.codec.SetID(uc.out[n:], id)
	write := uc.claimLocked()
	uc.mu.Unlock()
	p.srv.m.inflight.Inc()
	if write {
		uc.writeOut()
	}
	return true
}

// sendRaw queues a frame that expects no routed answer (one-way requests,
// heartbeat replies). It returns false when the connection is closed.
func (uc *upConn) sendRaw(frame []byte, newID int64) bool {
	uc.mu.Lock()
	if uc.state.Load() == stateClosed {
		uc.mu.Unlock()
		return false
	}
	n := len(uc.out)
	uc.out = append(uc.out, frame...)
	if newID != 0 {
		uc.pool.srv.codec.SetID(uc.out[n:], newID)
	}
	write := uc.claimLocked()
	uc.mu.Unlock()
	if write {
		uc.writeOut()
	}
	return true
}

// claimLocked counts a queued frame and reports whether the caller must write
// the batch: true when no other goroutine is writing to this connection.
func (uc *upConn) claimLocked() bool {
	uc.frames++
	if uc.writing {
		return false
	}
	uc.writing = true
	return true
}

// writeOut is write combining: the goroutine that found the connection idle
// writes the batch itself with a non-blocking write(2); frames queued by others
// meanwhile go out with the next write of the same loop. Under load many frames
// share one system call (stormgate_upstream_write_batch_frames); at low load a
// request costs no goroutine hand-off. When the kernel's send buffer is full the
// rest goes to flushLoop, which waits for writability through netpoll, so a
// consumer's goroutine never blocks on the provider.
func (uc *upConn) writeOut() {
	m := uc.pool.srv.m
	for {
		uc.mu.Lock()
		if len(uc.out) == 0 || uc.state.Load() == stateClosed {
			uc.writing = false
			uc.mu.Unlock()
			return
		}
		buf, frames := uc.out, uc.frames
		uc.out, uc.frames = uc.spare[:0], 0
		uc.mu.Unlock()
		m.upBatch.Observe(float64(frames))

		uc.wmu.Lock()
		if uc.fdClosed || uc.fd < 0 {
			uc.wmu.Unlock()
			uc.releaseWriter()
			return
		}
		n, err := writeFD(uc.fd, buf)
		uc.wmu.Unlock()
		if n == len(buf) {
			uc.spare = buf[:0]
			continue
		}
		if err != nil && err != unix.EAGAIN {
			uc.releaseWriter()
			go uc.fail("write failed: " + err.Error())
			return
		}
		// Socket full: flushLoop keeps the writer role and finishes through netpoll.
		uc.tail = buf[n:]
		select {
		case uc.kick <- struct{}{}:
		default:
		}
		return
	}
}

func (uc *upConn) releaseWriter() {
	uc.mu.Lock()
	uc.writing = false
	uc.mu.Unlock()
}

// flushLoop takes over the writer role when the socket was full: it writes the
// tail and every batch queued meanwhile through netpoll's Writer, whose Flush
// waits for writability, then hands the role back to the direct path.
func (uc *upConn) flushLoop() {
	m := uc.pool.srv.m
	for {
		select {
		case <-uc.kick:
		case <-uc.done:
			return
		}
		buf := uc.tail
		uc.tail = nil
		for len(buf) > 0 {
			// Not under wmu: Flush may wait long for writability, and close must not wait
			// for it (netpoll wakes a waiting Flush before it runs close callbacks).
			uc.nmu.Lock()
			uc.wmu.Lock()
			closed := uc.fdClosed
			uc.wmu.Unlock()
			var err error
			if !closed && uc.state.Load() != stateClosed && uc.conn.IsActive() {
				w := uc.conn.Writer()
				if _, err = w.WriteBinary(buf); err == nil {
					err = w.Flush()
				}
			} else {
				err = netpoll.ErrConnClosed
			}
			uc.nmu.Unlock()
			if err != nil {
				uc.releaseWriter()
				uc.fail("write failed: " + err.Error())
				return
			}
			// netpoll may keep a reference to buf until Flush returns; it has.
			uc.mu.Lock()
			if len(uc.out) == 0 {
				uc.writing = false
				uc.mu.Unlock()
				break
			}
			next, frames := uc.out, uc.frames
			uc.out, uc.frames = buf[:0], 0
			uc.mu.Unlock()
			m.upBatch.Observe(float64(frames))
			buf = next
		}
	}
}

func (uc *upConn) onRequest(_ context.Context, conn netpoll.Connection) error {
	p := uc.pool
	srv := p.srv
	cfg := srv.cfg.Load()
	r := conn.Reader()
	hl := srv.codec.HeaderLen()
	now := time.Now().UnixNano()
	uc.lastRead.Store(now)
	for r.Len() > 0 {
		hdr, err := r.Peek(hl)
		if err != nil {
			uc.fail("truncated frame from provider")
			return nil
		}
		f, err := srv.codec.ParseHeader(hdr, cfg.MaxFrameBytes)
		if err != nil {
			_ = r.Skip(r.Len())
			srv.log.Error("malformed frame from provider; closing that connection", zap.Error(err))
			uc.fail("malformed frame from provider")
			return nil
		}
		frame, err := r.Next(f.Len)
		if err != nil {
			uc.fail("truncated frame from provider")
			return nil
		}
		switch f.Kind {
		case FrameResponse:
			uc.route(f, frame, now)
		case FrameEventResponse:
			uc.mu.Lock()
			if _, ok := uc.pending[f.ID]; ok {
				delete(uc.pending, f.ID)
				uc.npending.Add(-1)
			}
			uc.mu.Unlock()
		case FrameEventTwoWay:
			// The provider's heartbeat: its ids are its own id space; answer with its id.
			var buf [64]byte
			uc.sendRaw(srv.codec.AppendHeartbeatReply(buf[:0], f), 0)
			srv.m.hbAnsweredUp.Inc()
		case FrameEventOneWay:
			switch srv.codec.EventOf(frame, f) {
			case EventReadonly:
				uc.onReadonly()
			case EventWriteable:
				uc.onWriteable()
			default:
				srv.m.dropped.WithLabelValues("provider_event").Inc()
			}
		default:
			srv.m.dropped.WithLabelValues("provider_request").Inc()
		}
	}
	_ = r.Release()
	return nil
}

// route hands a provider response back to its consumer with the original id.
func (uc *upConn) route(f Frame, frame []byte, now int64) {
	m := uc.pool.srv.m
	uc.mu.Lock()
	e, ok := uc.pending[f.ID]
	if ok {
		delete(uc.pending, f.ID)
	}
	uc.mu.Unlock()
	if !ok {
		m.unknownIDs.Inc()
		return
	}
	uc.npending.Add(-1)
	if e.sess == nil {
		return // a heartbeat answered with a plain response
	}
	m.inflight.Dec()
	e.sess.inflight.Add(-1)
	if e.sess.closing.Load() {
		m.lateResponses.Inc()
		return
	}
	uc.pool.srv.codec.SetID(frame, e.origID)
	m.responses.Inc() // counted before the consumer can see the response
	m.duration.Observe(float64(now-e.start) / 1e9)
	e.sess.write(frame)
	if uc.state.Load() == stateReadonly && uc.npending.Load() == 0 {
		uc.pool.readonlyDrained(uc)
	}
}

func (uc *upConn) onReadonly() {
	p := uc.pool
	p.srv.m.readonly.WithLabelValues("readonly", "received").Inc()
	if uc.state.CompareAndSwap(stateReady, stateReadonly) {
		p.srv.log.Info("provider sent READONLY; connection takes no new requests", zap.Int("slot", uc.slot))
		p.updateGauges()
		p.onReadonlyChange()
	}
}

func (uc *upConn) onWriteable() {
	p := uc.pool
	p.srv.m.readonly.WithLabelValues("writeable", "received").Inc()
	if !p.retiring(uc.slot) && uc.state.CompareAndSwap(stateReadonly, stateReady) {
		p.srv.log.Info("provider sent WRITEABLE; connection takes requests again", zap.Int("slot", uc.slot))
		p.updateGauges()
		p.onReadonlyChange()
		p.dispatchHeld()
	}
}

// onBeat runs on the wheel: heartbeat when nothing was read for an interval,
// death after max_missed intervals of silence.
func (uc *upConn) onBeat() {
	if uc.state.Load() == stateClosed {
		return
	}
	p := uc.pool
	cfg := p.srv.cfg.Load()
	interval := cfg.UpstreamInterval
	silent := time.Duration(time.Now().UnixNano() - uc.lastRead.Load())
	if silent > time.Duration(cfg.UpstreamMaxMissed)*interval {
		go uc.fail("no heartbeat answer from the provider within " + (time.Duration(cfg.UpstreamMaxMissed) * interval).String())
		return
	}
	if silent >= interval-interval/10 {
		id := p.ids.Add(1)
		var buf [64]byte
		hb := p.srv.codec.AppendHeartbeatRequest(buf[:0], id)
		uc.mu.Lock()
		if uc.state.Load() != stateClosed {
			uc.pending[id] = pendingEntry{start: time.Now().UnixNano()}
			uc.npending.Add(1)
		}
		uc.mu.Unlock()
		if uc.sendRaw(hb, 0) {
			p.srv.m.hbSent.Inc()
		}
	}
	p.srv.wheel.Schedule(&uc.beat, keepalive.Jitter(interval, cfg.UpstreamJitter, nil))
}

// fail closes the connection once and answers every request in flight on it
// with an error: Stormgate cannot know whether the provider executed them, so
// it never retries them.
func (uc *upConn) fail(why string) {
	uc.once.Do(func() {
		p := uc.pool
		srv := p.srv
		uc.mu.Lock()
		uc.state.Store(stateClosed)
		pending := uc.pending
		uc.pending = nil
		uc.out = nil
		uc.mu.Unlock()
		srv.wheel.Stop(&uc.beat)
		close(uc.done)
		uc.wmu.Lock()
		uc.fdClosed = true
		uc.wmu.Unlock()
		if uc.conn != nil {
			_ = uc.conn.Close() // runs the close callback, which takes wmu and nmu: hold neither here
		}
		p.updateGauges()

		n := 0
		for _, e := range pending {
			uc.npending.Add(-1)
			if e.sess == nil {
				continue
			}
			n++
			srv.m.inflight.Dec()
			e.sess.inflight.Add(-1)
			if e.sess.closing.Load() {
				srv.m.lateResponses.Inc()
				continue
			}
			e.sess.replyError(Frame{ID: e.origID, Serial: e.serial}, FailUpstreamLost,
				"stormgate: provider connection lost while the request was in flight ("+why+"); it may or may not have run",
				replyUpstreamLost)
		}
		srv.log.Warn("provider connection closed", zap.Int("slot", uc.slot), zap.String("why", why),
			zap.Int("failed_in_flight", n))
		if n > 0 || p.wasReadonly(uc) {
			p.onReadonlyChange()
		}
	})
}

// Pool is the set of M connections to one provider address, the id allocator
// for requests on them, and the hold queue used while none is usable.
type Pool struct {
	srv  *Server
	addr string
	port uint16

	ids   atomic.Int64
	rr    atomic.Uint32
	mu    sync.Mutex
	slots []*poolSlot
	hold  HoldQueue

	readonlySent atomic.Bool // PROPAGATE: READONLY broadcast is in effect
	meter        rateMeter
	warm         atomic.Pointer[warmup]
	wasDown      atomic.Bool // no usable connection since the last ready one (warm-up trigger)
	ctx          context.Context
	cancel       context.CancelFunc
	wg           sync.WaitGroup
}

type poolSlot struct {
	uc     atomic.Pointer[upConn]
	retire atomic.Bool
	cancel context.CancelFunc
}

func newPool(srv *Server, addr string, port uint16) *Pool {
	p := &Pool{srv: srv, addr: addr, port: port}
	p.ids.Store(rand.Int64N(1 << 40)) // distinct id ranges across restarts help when reading captures
	p.hold.init(p)
	p.ctx, p.cancel = context.WithCancel(srv.ctx)
	p.resize(srv.cfg.Load().UpstreamConns)
	p.wg.Add(1)
	go p.sweepLoop()
	return p
}

// resize grows or shrinks the number of slots. A shrunk slot retires: its
// connection takes no new requests and closes once its in-flight requests end.
func (p *Pool) resize(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := len(p.slots); i < n; i++ {
		ctx, cancel := context.WithCancel(p.ctx)
		sl := &poolSlot{cancel: cancel}
		p.slots = append(p.slots, sl)
		p.wg.Add(1)
		go p.slotLoop(ctx, i, sl)
	}
	for i := n; i < len(p.slots); i++ {
		sl := p.slots[i]
		sl.retire.Store(true)
		if uc := sl.uc.Load(); uc != nil {
			if uc.state.CompareAndSwap(stateReady, stateReadonly) && uc.npending.Load() == 0 {
				go uc.fail("slot retired")
			}
		}
		sl.cancel()
	}
	p.slots = p.slots[:n]
}

func (p *Pool) retiring(slot int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slot >= len(p.slots)
}

// slotLoop keeps one connection up: dial, serve until it dies, back off, redial.
// Backoff is exponential with full jitter so a fleet of sidecars never redials in step.
func (p *Pool) slotLoop(ctx context.Context, idx int, sl *poolSlot) {
	defer p.wg.Done()
	srv := p.srv
	bo := keepalive.Backoff{Base: srv.cfg.Load().BackoffBase, Max: srv.cfg.Load().BackoffMax}
	connected := false
	for ctx.Err() == nil && !sl.retire.Load() {
		cfg := srv.cfg.Load()
		bo.Base, bo.Max = cfg.BackoffBase, cfg.BackoffMax
		conn, err := netpoll.DialConnection("tcp", p.addr, cfg.ConnectTimeout)
		if err != nil {
			d := bo.Next()
			if bo.Attempt() == 1 || bo.Attempt()%20 == 0 {
				srv.log.Warn("cannot connect to provider", zap.String("addr", p.addr), zap.Int("slot", idx),
					zap.Int("attempt", bo.Attempt()), zap.Duration("retry_in", d), zap.Error(err))
			}
			if !sleepCtx(ctx, d) {
				return
			}
			continue
		}
		uc := newUpConn(p, conn, idx)
		_ = conn.AddCloseCallback(func(netpoll.Connection) error {
			// Synchronously, before netpoll closes the fd: no direct write may reach a
			// reused fd number, and netpoll's writer is left before its buffers go.
			uc.wmu.Lock()
			uc.fdClosed = true
			uc.wmu.Unlock()
			uc.nmu.Lock()
			uc.nmu.Unlock() //nolint:staticcheck // waiting for flushLoop to leave the writer
			go uc.fail("closed by provider")
			return nil
		})
		_ = conn.SetOnRequest(uc.onRequest)
		if !conn.IsActive() {
			uc.fail("closed during connect")
			continue
		}
		if connected {
			srv.m.upReconnects.Inc()
		}
		connected = true
		bo.Reset()
		p.wg.Add(1)
		go func() { defer p.wg.Done(); uc.flushLoop() }()
		sl.uc.Store(uc)
		srv.wheel.Schedule(&uc.beat, keepalive.Jitter(cfg.UpstreamInterval, cfg.UpstreamJitter, nil))
		srv.log.Info("connected to provider", zap.String("addr", p.addr), zap.Int("slot", idx))
		p.updateGauges()
		if p.wasDown.CompareAndSwap(true, false) {
			p.startWarmup()
		}
		p.onReadonlyChange()
		p.dispatchHeld()

		select {
		case <-uc.done:
		case <-ctx.Done():
			if sl.retire.Load() {
				// Retiring: let in-flight requests finish (bounded by max_request_age).
				p.waitIdle(uc, cfg.MaxRequestAge)
			}
			uc.fail("shutting down")
			sl.uc.CompareAndSwap(uc, nil)
			p.updateGauges()
			return
		}
		sl.uc.CompareAndSwap(uc, nil)
		p.updateGauges()
		if p.usable() == 0 {
			p.wasDown.Store(true)
		}
		// Reconnect after a short jittered pause, then with growing backoff.
		if !sleepCtx(ctx, bo.Next()) {
			return
		}
	}
}

func (p *Pool) waitIdle(uc *upConn, max time.Duration) {
	deadline := time.Now().Add(max)
	for uc.npending.Load() > 0 && time.Now().Before(deadline) && uc.state.Load() != stateClosed {
		time.Sleep(10 * time.Millisecond)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// pick returns the ready connection with the fewest requests in flight.
func (p *Pool) pick() *upConn {
	p.mu.Lock()
	slots := p.slots
	p.mu.Unlock()
	n := len(slots)
	if n == 0 {
		return nil
	}
	start := int(p.rr.Add(1))
	var best *upConn
	var bestLoad int32
	for i := 0; i < n; i++ {
		uc := slots[(start+i)%n].uc.Load()
		if uc == nil || uc.state.Load() != stateReady {
			continue
		}
		if l := uc.npending.Load(); best == nil || l < bestLoad {
			best, bestLoad = uc, l
		}
	}
	return best
}

// forward sends a two-way request, or holds it while no connection is usable.
func (p *Pool) forward(s *Session, f Frame, frame []byte, now int64) {
	p.meter.count.Add(1)
	if p.hold.Len() == 0 && (!p.warming() || p.warmAllow()) {
		for range 3 {
			uc := p.pick()
			if uc == nil {
				break
			}
			if uc.send(s, f, frame, now) {
				return
			}
		}
	}
	p.hold.push(s, f, frame, now)
}

// forwardOneWay sends a one-way request under a fresh id; without a usable
// connection it is dropped and counted (there is nobody to answer).
func (p *Pool) forwardOneWay(frame []byte) {
	p.srv.m.oneway.Inc()
	for range 3 {
		uc := p.pick()
		if uc == nil {
			break
		}
		if uc.sendRaw(frame, p.ids.Add(1)) {
			return
		}
	}
	p.srv.m.dropped.WithLabelValues("oneway_no_upstream").Inc()
}

// dispatchHeld sends held requests, oldest first, while a connection is usable.
func (p *Pool) dispatchHeld() { p.hold.dispatch() }

func (p *Pool) usable() int {
	p.mu.Lock()
	slots := p.slots
	p.mu.Unlock()
	n := 0
	for _, sl := range slots {
		if uc := sl.uc.Load(); uc != nil && uc.state.Load() == stateReady {
			n++
		}
	}
	return n
}

func (p *Pool) wasReadonly(uc *upConn) bool { return p.readonlySent.Load() }

// readonlyDrained closes a READONLY connection whose in-flight work is done
// when it is retiring; a provider-initiated READONLY waits for the provider to close.
func (p *Pool) readonlyDrained(uc *upConn) {
	if p.retiring(uc.slot) {
		go uc.fail("slot retired")
	}
}

// onReadonlyChange implements readonly_policy PROPAGATE: consumers get READONLY
// when no connection is usable because the provider said so, WRITEABLE when one is back.
func (p *Pool) onReadonlyChange() {
	if p.srv.cfg.Load().ReadonlyPolicy != ReadonlyPropagate {
		return
	}
	ready := p.usable() > 0
	if !ready && p.anyReadonly() && p.readonlySent.CompareAndSwap(false, true) {
		p.srv.broadcast(p, EventReadonly)
	} else if ready && p.readonlySent.CompareAndSwap(true, false) {
		p.srv.broadcast(p, EventWriteable)
	}
}

func (p *Pool) anyReadonly() bool {
	p.mu.Lock()
	slots := p.slots
	p.mu.Unlock()
	for _, sl := range slots {
		if uc := sl.uc.Load(); uc != nil && uc.state.Load() == stateReadonly {
			return true
		}
	}
	return false
}

func (p *Pool) updateGauges() { p.srv.updateUpstreamGauges() }

// sweepLoop answers requests older than max_request_age so that nothing leaks
// when a provider never answers.
func (p *Pool) sweepLoop() {
	defer p.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-t.C:
		}
		p.meter.sample(time.Second)
		p.sweep(time.Now().UnixNano())
	}
}

func (p *Pool) sweep(now int64) {
	maxAge := p.srv.cfg.Load().MaxRequestAge
	p.mu.Lock()
	slots := append([]*poolSlot(nil), p.slots...)
	p.mu.Unlock()
	for _, sl := range slots {
		uc := sl.uc.Load()
		if uc == nil {
			continue
		}
		var expired []pendingEntry
		uc.mu.Lock()
		for id, e := range uc.pending {
			if time.Duration(now-e.start) > maxAge {
				delete(uc.pending, id)
				uc.npending.Add(-1)
				if e.sess != nil {
					expired = append(expired, e)
				}
			}
		}
		uc.mu.Unlock()
		for _, e := range expired {
			p.srv.m.inflight.Dec()
			e.sess.inflight.Add(-1)
			if e.sess.closing.Load() {
				p.srv.m.lateResponses.Inc()
				continue
			}
			e.sess.replyError(Frame{ID: e.origID, Serial: e.serial}, FailTimeout,
				"stormgate: the provider did not answer within limits.max_request_age", replyMaxAge)
		}
	}
}

func (p *Pool) close() {
	p.cancel()
	p.hold.failAll("stormgate: shutting down")
	p.wg.Wait()
}

// connStates counts connections by state for the gauges.
func (p *Pool) connStates() (ready, readonly int) {
	p.mu.Lock()
	slots := p.slots
	p.mu.Unlock()
	for _, sl := range slots {
		if uc := sl.uc.Load(); uc != nil {
			switch uc.state.Load() {
			case stateReady:
				ready++
			case stateReadonly:
				readonly++
			}
		}
	}
	return
}
