package triple

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/stormgate/stormgate/keepalive"
	"github.com/stormgate/stormgate/proxy"
	"github.com/stormgate/stormgate/proxy/h2"
)

// h2Pool is the provider side of HTTP/2 for one provider address (upstream.protocol triple or both):
// upstream.connections h2c connections (h2Upstream), each an h2.Conn in the client role with
// Stormgate's own SETTINGS, onto which consumer streams are mapped. A consumer stream gets a fresh
// upstream stream id (odd, increasing, never reused: h2.Conn.OpenStream), its head is re-encoded without a
// dynamic table, and its DATA goes within the provider's windows; the answer comes back the same way.
// A request no connection can take now (none is up yet, or every one is at the provider's
// SETTINGS_MAX_CONCURRENT_STREAMS or after its GOAWAY) waits in the pool's hold queue, the one Dubbo's
// held requests wait in (its HTTP/2 lane, proxy/holdcalls.go: hold.max_requests and hold.max_bytes count both
// protocols), up to hold.timeout, then gets UNAVAILABLE; freed streams go to the waiting consumers in
// turn, each one's calls oldest first.
//
//	| event                                  | runs on                  | what happens to its calls
//	|----------------------------------------|--------------------------|-----------------------------------
//	| connected, the provider's SETTINGS came| the slot's goroutine     | usable; waiting requests start
//	| a stream of it ends                    | the connection's reader  | the next waiting request starts
//	| the provider's GOAWAY                  | the connection's reader  | no new streams; streams above its
//	|                                        |                          | last id are refused to the consumer
//	|                                        |                          | (RST_STREAM REFUSED_STREAM: not
//	|                                        |                          | processed, a client may retry); it
//	|                                        |                          | closes when its last stream ends
//	|                                        |                          | and the slot dials a new one
//	| the connection dies (EOF, reset, a     | the connection's reader  | every call on it ends with
//	| connection error, shutdown)            |                          | grpc-status 14 and a message
//
// Locks: mu guards every h2Upstream's h2.Conn and calls, and the provider-side fields of every h2Call of
// the pool; the hold queue's mu is taken inside it (proxy/holdcalls.go). Nothing holds mu and a session's lock at
// once (see session.go). Each connection writes through a writer (proxy/writer.go), as a Dubbo provider connection
// does: frames are taken under mu in the order the Conn produced them (takeCopy), so its output stays in
// order, and the goroutine that claimed the writer role writes them after mu is released (unlock), so no
// write(2) happens under the pool's lock and no goroutine is woken to write. The goroutines are the
// h2Pool's (wg, which pool.close waits for); a handover's freeze leaves them running (handover.go: the
// provider's HTTP/2 connections do not cross, and none has a stream by then).
type h2Pool struct {
	prov  proxy.Provider
	env   proxy.Env
	proto *h2Protocol
	wg    sync.WaitGroup

	mu      sync.Mutex
	ups     []*h2Upstream // connections the provider's SETTINGS made usable, until they die or go away
	streams int           // calls on provider streams, on every connection (a handover waits for 0)
	closed  bool
	// claims are the connections whose writer role a batch claimed under mu: unlock writes them.
	claims  [4]*h2Upstream
	nClaims int
	more    []*h2Upstream // past the array

	calls  proxy.MethodShard // per-method counts of the pool's calls (calls.go); atomics, no lock
	opened atomic.Uint64     // calls given a provider stream, ever (warm-up's rate meter: pool.sentTotal)
	retry  keepalive.Timer   // starts waiting calls again when the warm-up ramp held them back

	slotMu sync.Mutex // around resize
	slots  []*h2Slot  // under slotMu: one per upstream.connections
}

// h2Slot is one slot loop: the connection it serves now, and whether a smaller upstream.connections
// retired it.
type h2Slot struct {
	cancel context.CancelFunc
	retire bool        // under hp.mu: take no new connection; the one it has ends with its last stream
	up     *h2Upstream // under hp.mu: the connection being served; nil while dialing or backing off
}

// newH2Pool is the Upstream of a provider's pool (h2Protocol.NewUpstream), in its protocol's set until
// Close.
func newH2Pool(prov proxy.Provider, proto *h2Protocol) *h2Pool {
	hp := &h2Pool{prov: prov, env: proto.env, proto: proto}
	hp.retry.Init(hp.onRetry)
	proto.pools.add(hp)
	return hp
}

// onRetry starts the calls the warm-up ramp held back, as far as it lets them go now.
func (hp *h2Pool) onRetry() {
	var notes h2Notes
	hp.mu.Lock()
	hp.pumpLocked(hp.env.Now(), &notes)
	hp.unlock()
	notes.run()
}

// warmAllowLocked reports whether one more call may take a provider stream now: always, but during a
// warm-up ramp (proxy/warmup.go), which holds the rest back and tries again in WarmRetry.
func (hp *h2Pool) warmAllowLocked() bool {
	if hp.prov.WarmAllow() {
		return true
	}
	hp.env.Wheel().Schedule(&hp.retry, proxy.WarmRetry)
	return false
}

// Start runs n slot loops.
func (hp *h2Pool) Start(n int) { hp.Resize(n) }

// Resize runs n slot loops (upstream.connections, live). A slot over n retires as a Dubbo slot does
// (dubboUpstream.Resize): its connection takes no new stream, as after a provider's GOAWAY, and closes once its
// last stream has ended; a slot still dialing or backing off stops at once.
func (hp *h2Pool) Resize(n int) {
	hp.slotMu.Lock()
	defer hp.slotMu.Unlock()
	for i := len(hp.slots); i < n; i++ {
		ctx, cancel := context.WithCancel(hp.prov.Context())
		sl := &h2Slot{cancel: cancel}
		hp.slots = append(hp.slots, sl)
		hp.wg.Add(1)
		go func() {
			defer hp.wg.Done()
			defer cancel()
			proxy.RunSlot(ctx, hp.prov, i, &h2SlotKind{hp, sl, i, ctx})
		}()
	}
	if n >= len(hp.slots) {
		return
	}
	var closing []*h2Upstream
	hp.mu.Lock()
	for _, sl := range hp.slots[n:] {
		sl.retire = true
		u := sl.up
		if u == nil {
			sl.cancel()
			continue
		}
		u.away = true
		hp.ups = slices.DeleteFunc(hp.ups, func(x *h2Upstream) bool { return x == u })
		if u.calls.Len() == 0 {
			closing = append(closing, u)
		}
	}
	hp.unlock()
	hp.slots = slices.Clip(hp.slots[:n])
	for _, u := range closing {
		u.shut()
	}
	hp.env.Spawn(hp.prov.ConnChanged) // the gauges
}

// Close waits for the pool's goroutines (the pool's context ended its connections) and ends the calls
// still waiting.
func (hp *h2Pool) Close() {
	hp.wg.Wait()
	hp.proto.pools.remove(hp)
	hp.mu.Lock()
	hp.closed = true
	waiting := hp.prov.Hold().TakeCalls()
	var notes h2Notes
	for _, w := range waiting {
		c := w.(*h2Call)
		hp.unpauseLocked(c)
		hp.unwaitLocked(c, &notes)
	}
	hp.unlock()
	hp.env.Wheel().Stop(&hp.retry)
	for _, w := range waiting {
		c := w.(*h2Call)
		c.sess.fail(c, proxy.ReplyNoUpstream, "stormgate: shutting down")
	}
	notes.run()
}

// Opened is how many calls took a provider stream, ever.
func (hp *h2Pool) Opened() uint64 { return hp.opened.Load() }

// Calls is the pool's per-method counts.
func (hp *h2Pool) Calls() *proxy.MethodShard { return &hp.calls }

// Conns counts the usable connections that are not hung, and the hung ones (the upstream gauges).
func (hp *h2Pool) Conns() (ready, hung int) { return hp.readyConns(), hp.hungConns() }

// SettingsChanged re-arms, after a live settings change, the connections' beats and stall timers
// (keepalive.upstream_interval, keepalive.upstream_jitter, upstream.write_timeout) and the waiting calls'
// ends (hold.*, limits.max_request_age).
func (hp *h2Pool) SettingsChanged(old, cfg *proxy.Config) {
	if cfg.UpstreamInterval != old.UpstreamInterval || cfg.UpstreamJitter != old.UpstreamJitter || cfg.WriteTimeout != old.WriteTimeout {
		hp.rearmBeats(old, cfg)
	}
	if cfg.HoldTimeout != old.HoldTimeout || cfg.HoldMaxTimeout != old.HoldMaxTimeout ||
		cfg.DeadlineMargin != old.DeadlineMargin || cfg.MaxRequestAge != old.MaxRequestAge {
		hp.rearm(cfg)
	}
}

// readyConns is the number of usable connections that are not hung (the upstream gauges).
func (hp *h2Pool) readyConns() int {
	hp.mu.Lock()
	defer hp.unlock()
	n := 0
	for _, u := range hp.ups {
		if !u.hung.Load() {
			n++
		}
	}
	return n
}

// h2CallSize is what a call waiting with head and in counts in hold.max_bytes.
func h2CallSize(head []h2.HeaderField, in []byte) int { return h2.ListSize(head) + len(in) }

// h2SlotKind is an HTTP/2 slot for RunSlot (proxy/slot.go).
type h2SlotKind struct {
	hp  *h2Pool
	sl  *h2Slot
	idx int
	ctx context.Context
}

func (k *h2SlotKind) Protocol() proxy.Protocols    { return proxy.ProtoTriple }
func (k *h2SlotKind) Current() (*h2Upstream, bool) { return nil, false }
func (k *h2SlotKind) DialFailed()                  {}

func (k *h2SlotKind) Dial(ctx context.Context, _ int) (*h2Upstream, error) {
	hp := k.hp
	d := net.Dialer{Timeout: hp.env.Config().ConnectTimeout}
	nc, err := d.DialContext(ctx, "tcp", hp.prov.Addr())
	if err != nil {
		return nil, err
	}
	u, err := hp.newUpstream(nc)
	if err != nil {
		_ = nc.Close()
		return nil, err
	}
	return u, nil
}

func (k *h2SlotKind) Install(u *h2Upstream) bool {
	k.hp.mu.Lock()
	retired := k.sl.retire
	if !retired {
		k.sl.up = u
	}
	k.hp.unlock()
	if retired {
		u.shut()
	}
	return !retired
}

// serve runs the connection on a goroutine of the pool's. The slot may redial at the provider's
// GOAWAY: the connection finishes the streams below its last id on its own and closes after the
// last one; the slot opens a new connection meanwhile (RFC 9113 §6.8), so that new calls need not
// wait for the old streams to end.
func (k *h2SlotKind) Serve(ctx context.Context, u *h2Upstream) (ended, away <-chan struct{}) {
	k.hp.wg.Add(1)
	go func() {
		defer k.hp.wg.Done()
		u.endErr = u.serve(ctx)
		close(u.ended)
	}()
	return u.ended, u.goneAway
}

// stop: the connection closes itself when ctx ends (serve).
func (k *h2SlotKind) Stop(*h2Upstream) { k.leave() }

func (k *h2SlotKind) Forget(u *h2Upstream) {
	if k.leave() || k.ctx.Err() != nil {
		return
	}
	err := errProviderGoAway
	select {
	case <-u.ended:
		err = u.endErr
	default:
	}
	k.hp.env.Log().Info("HTTP/2 provider connection ended; reconnecting", zap.String("provider", k.hp.prov.Addr()),
		zap.Int("slot", k.idx), zap.Error(err))
}

// leave empties the slot and reports whether it was retired.
func (k *h2SlotKind) leave() (retired bool) {
	k.hp.mu.Lock()
	defer k.hp.unlock()
	k.sl.up = nil
	return k.sl.retire
}

func (k *h2SlotKind) Retired() bool {
	k.hp.mu.Lock()
	defer k.hp.unlock()
	return k.sl.retire
}

// errProviderGoAway is why a slot reconnects while its connection still finishes the streams a provider's
// GOAWAY let it keep.
var errProviderGoAway = errors.New("the provider sent GOAWAY; its streams below the last id finish on the old connection")

// h2Upstream is one h2c connection to the provider.
type h2Upstream struct {
	hp *h2Pool
	nc net.Conn

	// Under hp.mu.
	conn  *h2.Conn
	calls proxy.Books[uint32, *h2Call] // by upstream stream id: the connection's pending books (proxy/books.go)
	ready bool                         // the provider's first SETTINGS arrived
	away  bool                         // the provider's GOAWAY: no new streams, closed when the last one ends
	// goneAway is closed at the provider's first GOAWAY (awaySeen): the slot dials a new connection meanwhile.
	goneAway chan struct{}
	awaySeen bool
	ended    chan struct{} // closed when serve returned, with endErr (h2SlotKind)
	endErr   error
	dead     bool
	// The not-executed window (replay.go) opens when the provider's first SETTINGS come, and again when
	// it answers not-exported for a path it served on this connection (served: at most maxServedPaths).
	notRunFrom int64
	served     map[string]struct{}
	proof      proxy.ReadProof // what the provider read, at the end (proxy/readproof.go)
	scratch    []byte
	// Liveness (keepalive.go), under hp.mu but lastRead.
	beat       keepalive.Timer
	stall      keepalive.Timer // upstream.write_timeout, armed when the writer stalls
	lastRead   atomic.Int64    // when bytes last came from the provider (the server's clock)
	pingSeq    uint64
	pingSent   int64  // when the outstanding PING went out; 0: none
	quietPings int    // PINGs sent since the provider last sent HEADERS or DATA
	deadWhy    string // set when liveness declared the connection dead
	// Hang detection (hung.go): hung is written under hp.mu; probeAt is the sweep's.
	hung    atomic.Bool
	hungWhy string
	probeAt int64
	meter   h2Meter

	// w owns the socket's writes; its stream offsets say what reached the kernel (c.upOff, die).
	w    proxy.Writer
	idle chan struct{} // the writer role was released while serve waited for it (writerIdle)
}

func (hp *h2Pool) newUpstream(nc net.Conn) (*h2Upstream, error) {
	fd, err := connFD(nc)
	if err != nil {
		return nil, err
	}
	env := hp.env
	u := &h2Upstream{hp: hp, nc: nc, idle: make(chan struct{}, 1),
		goneAway: make(chan struct{}), ended: make(chan struct{})}
	u.calls.Init(0)
	env.InitWriter(&u.w, fd, u, true)
	u.beat.Init(u.onBeat)
	u.stall.Init(u.onStallTimer)
	u.lastRead.Store(env.Now())
	// http2.* as in force at the dial: the connection keeps what it announced.
	u.conn = h2.NewConn(h2ConnConfig(env.Config(), h2.RoleClient))
	u.proof.Connected(env, nc)
	// The preface and Stormgate's SETTINGS: nobody else knows u yet, so no lock.
	u.meter.sync(&hp.proto.m, h2Provider, u.conn.Counters())
	_, _, _ = u.w.Send(u.conn.Output(), 0) // a failure shows in the first read
	u.conn.ClearOutput()
	return u, nil
}

// connFD is nc's socket, for a writer: unlike ReadProof.control, which runs its function while Go's poller
// holds the descriptor, the number outlives the call, which is safe only because shut closes the writer
// before the socket.
func connFD(nc net.Conn) (int, error) {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return -1, fmt.Errorf("%T is not a socket", nc)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	if err := raw.Control(func(f uintptr) { fd = int(f) }); err != nil {
		return -1, err
	}
	return fd, nil
}

// shut closes the connection from any goroutine: the writer first, so that no write(2) can reach the
// descriptor once the socket closes it (its number may be reused), then the socket, which ends the reader.
func (u *h2Upstream) shut() {
	u.w.Close()
	_ = u.nc.Close()
}

// The writer's owner (proxy/writer.go). A failed write is not acted on: the reader sees the broken connection
// too, after reading what the provider sent before it broke (closing the socket at the write's failure lost
// a provider's last answers, TestH2ResendAboveGoAway).
func (u *h2Upstream) WriteFailed(err error) { u.WriterIdle() }
func (u *h2Upstream) WriterIdle() {
	select {
	case u.idle <- struct{}{}:
	default:
	}
}

// serve runs the connection until it ends, then ends every call still on it.
func (u *h2Upstream) serve(ctx context.Context) error {
	hp := u.hp
	stop := context.AfterFunc(ctx, u.shut)
	err := u.readLoop()
	u.proof.End(u.nc)
	stop()
	// Let the writer finish what is queued (a GOAWAY after a connection error), but not wait on a
	// provider that does not read.
	if u.w.Busy() {
		t := time.NewTimer(time.Second)
		select {
		case <-u.idle:
		case <-t.C:
		}
		t.Stop()
	}
	u.shut()
	hp.env.Wheel().Stop(&u.beat)
	hp.env.Wheel().Stop(&u.stall)
	why := "stormgate: provider connection lost"
	hp.mu.Lock()
	deadWhy := u.deadWhy
	hp.unlock()
	switch {
	case ctx.Err() != nil:
		why = "stormgate: shutting down"
	case deadWhy != "":
		why += " (" + deadWhy + ")"
	case err != nil:
		why += " (" + err.Error() + ")"
	}
	u.die(why, ctx.Err() != nil)
	return err
}

// readLoop reads the provider's frames until the connection fails.
func (u *h2Upstream) readLoop() error {
	buf := make([]byte, 0, 64<<10) // more than a frame: Stormgate announces the default 16 KiB maximum
	var d h2Delivery               // what this read owes consumers, written once at its end
	for {
		n, rerr := u.nc.Read(buf[len(buf):cap(buf)])
		if n > 0 {
			u.lastRead.Store(u.hp.env.Now())
		}
		buf = buf[:len(buf)+n]
		off := 0
		for {
			k, err := u.step(buf[off:], &d)
			if err != nil {
				d.flush()
				return err
			}
			if k == 0 {
				break
			}
			off += k
		}
		d.flush()
		buf = buf[:copy(buf, buf[off:])]
		if rerr != nil {
			return rerr
		}
	}
}

// step handles one frame from the provider: the books under the pool's lock, then the delivery to the
// consumer outside it, through d (written when the read's frames are all handled).
func (u *h2Upstream) step(b []byte, d *h2Delivery) (int, error) {
	hp := u.hp
	now := hp.env.Now()
	var notes h2Notes
	var refused []*h2Call
	var c *h2Call
	hp.mu.Lock()
	n, ev, err := u.conn.Read(now, b)
	heard := n > 0 && u.hung.Load() && u.heardLocked(now, &notes)
	if err == nil && n > 0 {
		c, refused = u.eventLocked(ev, now, &notes)
	}
	u.flushLocked()
	closeNow := u.away && u.calls.Len() == 0
	hp.unlock()
	if heard {
		hp.env.Log().Info("HTTP/2 provider connection heard again: it opens streams again", zap.String("provider", hp.prov.Addr()))
		hp.prov.ConnChanged()
	}
	if c != nil {
		switch ev.Kind {
		case h2.EventHeaders:
			if c.sess.answerHeaders(c, ev.Fields, ev.EndStream, d) {
				hp.cancel(c) // the consumer's stream is gone: reset the provider's
			}
		case h2.EventData:
			hp.answerConsumed(c, c.sess.answerData(c, ev.Data, ev.EndStream, d))
		case h2.EventReset:
			if ev.ByPeer {
				hp.answerConsumed(c, c.sess.reset(c, ev.Code))
			} else {
				hp.answerConsumed(c, c.sess.fail(c, proxy.ReplyBadResponse,
					"stormgate: the provider's answer broke HTTP/2's rules: "+ev.Code.String()))
			}
		}
	}
	for _, r := range refused {
		hp.answerConsumed(r, r.sess.fail(r, proxy.ReplyUpstreamLost, "stormgate: the provider is going away (GOAWAY) and "+
			"did not process the request, which could not be sent again (not complete, larger than 64 KiB, or "+
			"its hold.timeout is up); safe to retry"))
	}
	notes.run()
	if closeNow {
		u.shut()
	}
	return n, err
}

// eventLocked does the books of one event: the call to deliver it to (nil: none), and the calls a
// GOAWAY refused.
func (u *h2Upstream) eventLocked(ev h2.Event, now int64, notes *h2Notes) (*h2Call, []*h2Call) {
	hp := u.hp
	switch ev.Kind {
	case h2.EventHeaders, h2.EventData:
		u.quietPings = 0
		c, _ := u.calls.Get(ev.Stream)
		if c == nil {
			_ = u.conn.Consumed(ev.Stream, len(ev.Data)) // a stream Stormgate reset: nobody wants it
			return nil, nil
		}
		if ev.Kind == h2.EventHeaders && !c.answered && u.answerHeadLocked(c, ev.Fields, now, notes) {
			return nil, nil // not run: sent again, the head is not the consumer's
		}
		// The shared connection's window goes back now: the answer's bytes are the consumer's to take,
		// held by Stormgate up to the stream's window (answerConsumed returns that), so a consumer that
		// does not read stalls its own streams at the provider, never the connection (issue 26 item 4).
		_ = u.conn.ConsumedConn(len(ev.Data))
		if ev.EndStream {
			u.endLocked(c, notes)
		}
		return c, nil
	case h2.EventReset:
		c, _ := u.calls.Get(ev.Stream)
		if c == nil {
			return nil, nil
		}
		if ev.ByPeer && ev.Code == h2.ErrCodeRefusedStream && !c.answered {
			u.detachLocked(c, notes)
			if hp.resendOrForgetLocked(c, now, resendPause(hp.env.Config(), c.resends), proxy.HoldReheldRefused) {
				return nil, nil
			}
			return c, nil
		}
		// Any other reset ends the call, never sent again: the provider's own, or this side's stream error
		// for a malformed answer (a bad head, DATA before the head), which the provider sent having seen the
		// request.
		u.endLocked(c, notes)
		return c, nil
	case h2.EventGoAway:
		hp.env.Log().Info("the provider sent GOAWAY: no new streams on this connection",
			zap.String("provider", hp.prov.Addr()), zap.Uint32("last_stream", ev.LastStream), zap.Stringer("code", ev.Code))
		u.goAwayLocked()
		var refused []*h2Call
		for id, c := range u.calls.All() {
			if id > ev.LastStream {
				refused = append(refused, c)
			}
		}
		kept := refused[:0]
		for _, c := range refused {
			u.detachLocked(c, notes)
			if !hp.resendOrForgetLocked(c, now, 0, proxy.HoldReheldRefused) {
				kept = append(kept, c)
			}
		}
		hp.pumpLocked(now, notes)
		return nil, kept
	case h2.EventSettings:
		if !u.ready && !u.away {
			u.ready, u.notRunFrom = true, now
			hp.ups = append(hp.ups, u)
			u.startBeat()
			hp.env.Spawn(hp.prov.ConnChanged) // the gauges; never under mu
		}
		for c := range u.calls.Values() { // SETTINGS_INITIAL_WINDOW_SIZE may have grown the windows
			u.pushLocked(c, now, notes)
		}
		hp.pumpLocked(now, notes)
	case h2.EventPingAck:
		u.pingAnswered(ev)
	case h2.EventWindow:
		if ev.Stream != 0 { // one stream's window: its call alone may send more
			if c, ok := u.calls.Get(ev.Stream); ok {
				u.pushLocked(c, now, notes)
			}
			break
		}
		for c := range u.calls.Values() {
			u.pushLocked(c, now, notes)
		}
	}
	return nil, nil
}

// die ends every call still on a connection that is gone: sent again if none of its bytes reached the
// kernel, or the provider's application provably read none of them (replay.go, proxy/readproof.go), else
// ended with msg. The writer has stopped.
func (u *h2Upstream) die(msg string, shutdown bool) {
	hp := u.hp
	var notes h2Notes
	written := u.w.Close() // closed already: the final count of bytes the kernel took
	read, readOK := u.proof.ProviderRead(written, hp.prov.Context().Done())
	now := hp.env.Now()
	hp.mu.Lock()
	u.dead = true
	hp.ups = slices.DeleteFunc(hp.ups, func(x *h2Upstream) bool { return x == u })
	calls := make([]*h2Call, 0, u.calls.Len())
	for c := range u.calls.Values() {
		u.detachLocked(c, &notes)
		why := proxy.HoldReheld // never written
		if written > c.upOff {
			why = proxy.HoldReheldUnseen // written, but the provider's application read none of it
		}
		unread := written <= c.upOff || readOK && read <= c.upOff
		if shutdown || !unread || !hp.resendOrForgetLocked(c, now, 0, why) {
			hp.forgetLocked(c)
			calls = append(calls, c)
		}
	}
	hp.pumpLocked(now, &notes)
	hp.unlock()
	for _, c := range calls {
		c.sess.fail(c, proxy.ReplyUpstreamLost, msg)
	}
	notes.run()
	if u.ready {
		hp.prov.ConnChanged()
	}
	if len(calls) > 0 {
		hp.env.Log().Warn("HTTP/2 provider connection lost with streams open: each got grpc-status 14",
			zap.String("provider", hp.prov.Addr()), zap.Int("streams", len(calls)), zap.String("why", msg))
	}
}

// open starts a consumer's request: on a connection that can open a stream now, or in the waiting list.
// fields is valid only during the call.
func (hp *h2Pool) open(c *h2Call, fields []h2.HeaderField, end bool, now int64) {
	env := hp.env
	cfg := env.Config()
	var notes h2Notes
	reason, msg := proxy.ReplyReason(0), ""
	c.sendBy = h2SendBy(fields, c.arrived, cfg)
	c.path, _ = h2.Field(fields, h2.HeaderPath)
	hp.mu.Lock()
	hp.keepHeadLocked(c, fields, end)
	switch u := hp.pickLocked(); {
	case hp.closed:
		reason, msg = proxy.ReplyNoUpstream, "stormgate: shutting down"
	case u != nil && hp.prov.Hold().CallsWaiting() == 0 && hp.warmAllowLocked():
		c.head, c.headEnd = fields, end
		u.startLocked(c, now, &notes)
	case cfg.HoldTimeout <= 0:
		reason, msg = proxy.ReplyNoUpstream, "stormgate: no provider connection can take the request now and hold.timeout is 0"
	default:
		c.head, c.headEnd = slices.Clone(fields), end
		if reason, msg = hp.prov.Hold().HoldCall(c, &c.sess.WaitAccount, h2.ListSize(c.head), cfg, hp.awayLocked()); msg != "" {
			env.CountHoldOutcome(proxy.HoldRejectedFull)
			break
		}
		c.waiting = true
		c.waited.Store(true)
		env.CallHeld(c.method, false)
		hp.initTimersLocked(c)
		env.Wheel().Schedule(&c.hold, time.Duration(h2HoldUntil(c, cfg)-now))
	}
	if msg != "" {
		c.upDone = true
		hp.forgetLocked(c)
	}
	hp.unlock()
	if msg != "" {
		c.sess.fail(c, reason, msg)
	}
	notes.run()
}

// awayLocked reports whether no connection takes new streams (none is up, or every one is hung), as
// pool.usable() == 0 for Dubbo: hold.max_bytes_per_consumer applies then.
func (hp *h2Pool) awayLocked() bool {
	for _, u := range hp.ups {
		if !u.hung.Load() {
			return false
		}
	}
	return true
}

// pickLocked is the usable connection with the fewest streams that can open one more; nil when none, and
// while a handover quiesces HTTP/2 (no call takes a provider stream then: handover.go).
func (hp *h2Pool) pickLocked() *h2Upstream {
	if hp.proto.quiescing.Load() {
		return nil
	}
	var best *h2Upstream
	for _, u := range hp.ups {
		if u.conn.CanOpenStream() && !u.hung.Load() && (best == nil || u.calls.Len() < best.calls.Len()) {
			best = u
		}
	}
	return best
}

// pumpLocked starts waiting requests while a connection can take them.
func (hp *h2Pool) pumpLocked(now int64, notes *h2Notes) {
	for hp.prov.Hold().CallsWaiting() > 0 {
		u := hp.pickLocked()
		if u == nil || !hp.warmAllowLocked() {
			return
		}
		w := hp.prov.Hold().PopCall()
		if w == nil {
			return
		}
		c := w.(*h2Call)
		if c.pastSendBy(now) { // its hold timer has not fired yet: never sent
			hp.unwaitLocked(c, notes)
			notes.late = append(notes.late, c)
			continue
		}
		c.waiting = false
		hp.env.Wheel().Stop(&c.hold)
		u.startLocked(c, now, notes)
		hp.env.CountHoldOutcome(proxy.HoldSent)
	}
}

// expire ends a request that waited hold.timeout.
func (hp *h2Pool) expire(c *h2Call) {
	var notes h2Notes
	hp.mu.Lock()
	if !c.waiting {
		hp.unlock()
		return
	}
	hp.takeOutLocked(c)
	hp.unwaitLocked(c, &notes)
	late := c.pastSendBy(hp.env.Now())
	hp.unlock()
	if late {
		notes.late = append(notes.late, c)
	} else {
		hp.env.CountHoldOutcome(proxy.HoldExpired) // counted before the consumer can see the reply
		c.sess.fail(c, proxy.ReplyHoldTimeout, "stormgate: no provider connection could take the request within hold.timeout")
	}
	notes.run()
}

// takeOutLocked takes a waiting call out of the hold queue, waiting or paused.
func (hp *h2Pool) takeOutLocked(c *h2Call) {
	hp.unpauseLocked(c)
	hp.prov.Hold().RemoveCall(c)
}

// unwaitLocked takes a call out of waiting for good (the caller took it out of its list).
func (hp *h2Pool) unwaitLocked(c *h2Call, notes *h2Notes) {
	c.waiting, c.upDone = false, true
	hp.env.Wheel().Stop(&c.hold)
	hp.leftLocked(c, len(c.in), notes)
	c.in, c.head = nil, nil
	hp.forgetLocked(c)
}

// startLocked opens the provider stream for a call and sends its head and what of its body has come.
func (u *h2Upstream) startLocked(c *h2Call, now int64, notes *h2Notes) {
	id, err := u.conn.OpenStream() // never an id used before: an answer for an old stream finds no call
	if err != nil {                // pickLocked said it could: a bug, not a peer's doing
		panic(fmt.Sprintf("proxy: opening a provider stream: %v", err))
	}
	u.calls.Add(id, c)
	u.hp.streams++
	u.hp.opened.Add(1)
	u.hp.prov.WatchCalls() // hang detection (hung.go) looks at connections with calls on them
	c.up, c.upID = u, id
	if !u.conn.OwnStreamIDsLeft() { // its 2^30th stream: never again on this connection
		u.hp.env.Log().Info("HTTP/2 provider connection used up its stream ids: replacing it",
			zap.String("provider", u.hp.prov.Addr()))
		u.goAwayLocked()
	}
	b, _ := u.conn.AppendHeaders(u.frames(), id, c.head, c.headEnd)
	c.upOff = u.send(b)
	c.head = nil
	u.pushLocked(c, now, notes)
}

// goAwayLocked retires the connection as a provider's GOAWAY does: no new streams on it, the slot dials
// a replacement (goneAway), and the connection closes after its last stream (step).
func (u *h2Upstream) goAwayLocked() {
	if !u.awaySeen {
		u.awaySeen = true
		close(u.goneAway)
	}
	u.away = true
	u.hp.ups = slices.DeleteFunc(u.hp.ups, func(x *h2Upstream) bool { return x == u })
}

// pushLocked sends what waits of a call's request, within the provider's windows.
func (u *h2Upstream) pushLocked(c *h2Call, now int64, notes *h2Notes) {
	if c.upDone || len(c.in) == 0 && !c.inEnd {
		return
	}
	b, n, err := u.conn.AppendData(now, u.frames(), c.upID, c.in, c.inEnd)
	if err != nil {
		n = len(c.in)
	}
	u.hp.leftLocked(c, n, notes)
	c.in = c.in[n:]
	if len(c.in) == 0 {
		c.in, c.inEnd = nil, false
	}
	u.send(b)
}

// endLocked ends a call's provider side for good (answered, reset, lost): detached, and its kept
// request dropped.
func (u *h2Upstream) endLocked(c *h2Call, notes *h2Notes) {
	u.detachLocked(c, notes)
	u.hp.forgetLocked(c)
}

// detachLocked ends a call's provider stream (answered, reset, refused or lost): forgotten, its
// unsent request bytes handed back to the consumer's windows, the stream reset if still open, and a
// waiting request started in its place. The call may still be sent again (replay.go).
func (u *h2Upstream) detachLocked(c *h2Call, notes *h2Notes) {
	if c.upDone {
		return
	}
	c.upDone = true
	u.calls.Take(c.upID)
	u.hp.streams--
	u.hp.leftLocked(c, len(c.in), notes)
	c.in, c.inEnd = nil, false
	if !u.dead {
		if st := u.conn.StreamState(c.upID); st != h2.StateClosed && st != h2.StateIdle {
			_ = u.conn.Reset(c.upID, h2.ErrCodeCancel) // the answer ended before the request: stop it
		}
		u.flushLocked()
		u.hp.pumpLocked(u.hp.env.Now(), notes)
	}
}

// data forwards request DATA from the consumer, or keeps it while the call waits or the provider's
// window is closed: at most the consumer's stream window, charged to limits.max_buffered_bytes. A call
// whose bytes the budget refuses ends with grpc-status 14 (its provider stream reset).
//
// What the consumer gets back, and when:
//
//	| the bytes                                  | stream window        | connection window
//	|--------------------------------------------|----------------------|------------------------------------
//	| forwarded, or dropped (the call ended)     | now                  | now
//	| kept while the call waits for a stream     | when they leave      | now (c.inBack): see below
//	| kept behind the provider's closed window   | when they leave      | when they leave
//
// A waiting call's bytes hand the connection window back on receipt, as the provider side does for
// answers. Held until a stream frees, ten waiting calls' 64 KiB stream windows left 384 KiB of a 1 MiB
// connection window, handed back 512 KiB at a time: the one call on the provider's stream could not send
// the rest of its body, so its stream never freed (TestH2AdvWaitingCallsHoldTheConsumerWindow: 29 of 30
// calls ended at hold.timeout). The stream window still bounds each waiting call to one window, and hold.max_bytes
// (hold.max_bytes_per_consumer while the provider is away) and limits.max_buffered_bytes bound them all.
// Bytes behind the provider's window are on a stream already, which the provider frees by reading.
func (hp *h2Pool) data(c *h2Call, data []byte, end bool) {
	var notes h2Notes
	hp.mu.Lock()
	n, back, reason, msg := len(data), 0, proxy.ReplyReason(0), ""
	if !c.upDone {
		hp.keepBodyLocked(c, data, end)
	}
	switch {
	case c.upDone:
	case c.waiting || len(c.in) > 0:
		if c.waiting { // the hold queue counts it, and may refuse it
			reason, msg = hp.prov.Hold().GrowCall(c, len(data), hp.env.Config(), hp.awayLocked())
		}
		if msg == "" && !hp.keepInLocked(c, data) {
			reason, msg = proxy.ReplyOverloaded, h2OutOfBufferMsg
		}
		if msg == "" {
			c.inEnd = end
			n = 0
			if c.waiting {
				back = len(data)
				c.inBack += back // c.in has nothing owed behind them: the call has no stream yet
			}
		}
	default: // nothing waits before data (the case above)
		b, sent, err := c.up.conn.AppendData(hp.env.Now(), c.up.frames(), c.upID, data, end)
		c.up.send(b)
		if err == nil && sent < len(data) {
			if !hp.keepInLocked(c, data[sent:]) {
				reason, msg = proxy.ReplyOverloaded, h2OutOfBufferMsg
			} else {
				c.inEnd = end
				n = sent // the rest is kept: its window goes back when it leaves
			}
		}
	}
	if msg != "" {
		n = len(data)
		if c.waiting {
			hp.env.CountHoldOutcome(proxy.HoldRejectedFull)
			hp.takeOutLocked(c)
			hp.unwaitLocked(c, &notes)
		} else {
			c.up.endLocked(c, &notes)
		}
	}
	hp.unlock()
	if msg != "" {
		c.sess.fail(c, reason, msg)
	}
	c.sess.handBack(c.down, n, back, 0)
	notes.run()
}

// h2OutOfBufferMsg is the message of a call ended because the budget refused its request bytes.
const h2OutOfBufferMsg = "stormgate: out of buffer memory (limits.max_buffered_bytes)"

// keepInLocked keeps request bytes the provider cannot take yet, charged to the process budget; false
// when the budget refuses them.
func (hp *h2Pool) keepInLocked(c *h2Call, b []byte) bool {
	if !hp.env.Budget().TryReserve(len(b)) {
		return false
	}
	c.in = append(c.in, b...)
	return true
}

// cancel ends a call the consumer reset or left: taken out of waiting, or its provider stream reset.
func (hp *h2Pool) cancel(c *h2Call) {
	var notes h2Notes
	hp.mu.Lock()
	switch {
	case c.waiting:
		hp.env.CountHoldOutcome(proxy.HoldConsumerGone)
		hp.takeOutLocked(c)
		hp.unwaitLocked(c, &notes)
	case c.up != nil:
		c.up.endLocked(c, &notes)
	}
	hp.unlock()
	notes.run()
}

// answerConsumed hands n bytes of a call's answer back to the provider's stream window (the connection's
// went back on receipt): they were handed to the consumer's writer, or dropped.
func (hp *h2Pool) answerConsumed(c *h2Call, n int) {
	if n <= 0 {
		return
	}
	hp.mu.Lock()
	defer hp.unlock()
	if u := c.up; u != nil && !u.dead {
		_ = u.conn.ConsumedStream(c.upID, n)
		u.flushLocked()
	}
}

// frames starts a batch of frames under hp.mu, behind what the Conn owes the provider.
func (u *h2Upstream) frames() []byte {
	b := append(u.scratch[:0], u.conn.Output()...)
	u.conn.ClearOutput()
	return b
}

// send queues a batch from frames and returns its offset in the connection's byte stream.
func (u *h2Upstream) send(b []byte) uint64 {
	off := u.queue(b)
	if cap(b) <= proxy.SpareKeep {
		u.scratch = b[:0]
	} else {
		u.scratch = nil
	}
	return off
}

// flushLocked queues what the Conn owes the provider (SETTINGS ACKs, PING answers, WINDOW_UPDATEs,
// RST_STREAM).
func (u *h2Upstream) flushLocked() {
	u.meter.sync(&u.hp.proto.m, h2Provider, u.conn.Counters())
	if out := u.conn.Output(); len(out) > 0 {
		u.queue(out)
		u.conn.ClearOutput()
	}
}

// queue hands b to the writer (copied: the caller reuses it), under hp.mu, and returns b's offset in the
// connection's byte stream; after a close, where the stream ends (nothing of b reaches the kernel). What
// may wait in the writer is bounded by the provider's flow-control windows (DATA) and its stream limit
// (heads), and charged to the budget while the provider does not take it (mustTake). A batch that claims
// the writer role is written by unlock.
func (u *h2Upstream) queue(b []byte) uint64 {
	if len(b) == 0 {
		return u.w.StreamOffset()
	}
	off, claimed, accepted, _ := u.w.TakeCopy(b)
	switch {
	case !accepted:
		return u.w.StreamOffset()
	case claimed:
		hp := u.hp
		if hp.nClaims < len(hp.claims) {
			hp.claims[hp.nClaims] = u
			hp.nClaims++
		} else {
			hp.more = append(hp.more, u)
		}
	}
	return off
}

// unlock releases mu, then writes the batches that claimed a writer role under it.
func (hp *h2Pool) unlock() {
	claims, n, more := hp.claims, hp.nClaims, hp.more
	if n > 0 {
		hp.claims, hp.nClaims, hp.more = [len(hp.claims)]*h2Upstream{}, 0, nil
	}
	hp.mu.Unlock()
	for _, u := range claims[:n] {
		u.writeTaken()
	}
	for _, u := range more {
		u.writeTaken()
	}
}

// writeTaken writes the batch that claimed the writer role. A socket error is the reader's to see.
func (u *h2Upstream) writeTaken() {
	if _, idle := u.w.WriteTaken(); idle {
		u.WriterIdle()
	}
}

// h2Notes is what the pool owes consumers once its lock is released: bytes of their streams that left
// Stormgate's hands (forwarded or dropped), handed back to their windows, and calls to answer because
// their deadline passed while they waited.
type h2Notes struct {
	consumed []h2Note
	late     []*h2Call // calls taken out of waiting past their sendBy: answered DEADLINE_EXCEEDED (deadline.go)
}

// h2Note is a hand-back to a call's consumer: n bytes to both windows, stream to the stream's alone.
type h2Note struct {
	c         *h2Call
	n, stream int
}

func (ns *h2Notes) add(c *h2Call, n, stream int) {
	if n > 0 || stream > 0 {
		ns.consumed = append(ns.consumed, h2Note{c, n, stream})
	}
}

func (ns h2Notes) run() {
	for _, x := range ns.consumed {
		x.c.sess.handBack(x.c.down, x.n, 0, x.stream)
	}
	for _, c := range ns.late {
		c.sess.env.CountHoldOutcome(proxy.HoldDeadline) // counted before the consumer can see the reply
		c.sess.failStatus(c, h2.GRPCDeadlineExceeded, proxy.ReplyDeadline, h2DeadlineMsg)
	}
}
