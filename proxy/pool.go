package proxy

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudwego/netpoll"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/stormgate/stormgate/keepalive"
	"github.com/stormgate/stormgate/proxy/wire"
)

// pool is the set of M connections to one provider address: the upstream id
// allocator, the choice of a connection per request, the hold queue for requests
// no connection takes, the reconnect loops, the READONLY policy, warm-up and the
// max_request_age sweep.
type pool struct {
	srv  *Server
	addr string
	port uint16 // transparent mode: the original destination port; 0 otherwise

	rr    atomic.Uint32
	slots atomic.Pointer[[]*poolSlot] // copy on write under mu
	mu    sync.Mutex
	hold  HoldQueue

	readonlySent atomic.Bool  // PROPAGATE: READONLY broadcast is in effect
	downSince    atomic.Int64 // when the pool last had no usable connection; 0 while it has one
	wasDown      atomic.Bool  // lost every connection after having one (warm-up trigger)
	meter        rateMeter
	sentRetired  atomic.Uint64 // requests sent on connections that ended (warm-up's rate)
	warm         atomic.Pointer[warmup]
	sweepArmed   atomic.Bool
	frozen       atomic.Bool // a handover stopped the slot loops (handover.go)
	sweep        keepalive.Timer
	dials        dialLog
	pause        notRunPause   // after not-executed answers (notrun.go)
	pdrain       providerDrain // the provider's graceful shutdown (providerdrain.go)
	hang         hungState
	up           Upstream // upstream.protocol triple or both: the HTTP/2 side (Protocol.NewUpstream; nil for Dubbo only)

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

var errClosedAtConnect = errors.New("the provider closed the connection right after accepting it")

type poolSlot struct {
	uc     atomic.Pointer[upConn]
	retire atomic.Bool
	cancel context.CancelFunc
}

func newPool(srv *Server, addr string, port uint16) *pool {
	p := newPoolStopped(srv, addr, port)
	cfg := srv.cfg.Load()
	if cfg.Protocols.Triple() {
		p.up = srv.plugin.NewUpstream(Provider{p}) // before any slot loop reads it (connStates)
	}
	if cfg.Protocols.Dubbo() {
		p.resize(cfg.UpstreamConns)
	}
	if p.up != nil {
		p.up.Start(cfg.UpstreamConns)
	}
	return p
}

// newPoolStopped is a pool with no slots and no loops yet (a handover adopts its
// connections into slots, then starts the loops).
func newPoolStopped(srv *Server, addr string, port uint16) *pool {
	p := &pool{srv: srv, addr: addr, port: port}
	p.slots.Store(&[]*poolSlot{})
	p.hold.init(p)
	p.sweep.Init(p.onSweep)
	p.pdrain.timer.Init(func() { p.endProviderDrain("drain.timeout passed") })
	p.downSince.Store(srv.now())
	p.ctx, p.cancel = context.WithCancel(srv.ctx)
	return p
}

// freezeLoops stops every slot loop for a handover, leaving the connections as they
// are, and waits for them.
func (p *pool) freezeLoops() {
	p.frozen.Store(true)
	p.mu.Lock()
	for _, sl := range p.slotList() {
		sl.cancel()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// startLoops starts a loop for every slot (after a handover, adopting its
// connection), and slots up to upstream.connections.
func (p *pool) startLoops() {
	p.frozen.Store(false)
	p.mu.Lock()
	for i, sl := range p.slotList() {
		ctx, cancel := context.WithCancel(p.ctx)
		sl.cancel = cancel
		p.wg.Add(1)
		go func() { defer p.wg.Done(); RunSlot(ctx, Provider{p}, i, dubboSlot{p, sl}) }()
	}
	p.mu.Unlock()
	if cfg := p.srv.cfg.Load(); cfg.Protocols.Dubbo() {
		p.resize(max(cfg.UpstreamConns, len(p.slotList())))
	}
	p.connChanged()
}

// adopt puts a provider connection from a handover into its slot: registered with
// netpoll, its writer held, no handler yet (upConn.serve).
func (p *pool) adopt(cs UpConnSnapshot) (*upConn, error) {
	conn, err := netpoll.NewFDConnection(cs.FD)
	if err != nil {
		return nil, err
	}
	uc := newUpConn(p, conn, cs.FD, cs.Slot)
	uc.w.held = true
	uc.state.Store(cs.State)
	uc.nextID = cs.NextID
	uc.rd.skip = cs.Skip
	p.mu.Lock()
	next := append([]*poolSlot(nil), p.slotList()...)
	for len(next) <= cs.Slot {
		next = append(next, &poolSlot{cancel: func() {}})
	}
	next[cs.Slot].uc.Store(uc)
	p.slots.Store(&next)
	p.mu.Unlock()
	return uc, nil
}

func (p *pool) slotList() []*poolSlot { return *p.slots.Load() }

// resize grows or shrinks the number of slots. A shrunk slot retires: its
// connection takes no new requests and closes once its in-flight requests end.
func (p *pool) resize(n int) {
	p.mu.Lock()
	old := p.slotList()
	next := append([]*poolSlot(nil), old...)
	for i := len(old); i < n; i++ {
		ctx, cancel := context.WithCancel(p.ctx)
		sl := &poolSlot{cancel: cancel}
		next = append(next, sl)
		p.wg.Add(1)
		go func() { defer p.wg.Done(); RunSlot(ctx, Provider{p}, i, dubboSlot{p, sl}) }()
	}
	for i := n; i < len(old); i++ {
		old[i].retire.Store(true)
		old[i].cancel()
	}
	if n < len(next) {
		next = next[:n]
	}
	p.slots.Store(&next)
	p.mu.Unlock()
	if n < len(old) {
		p.connChanged()
	}
}

func (p *pool) retiring(slot int) bool { return slot >= len(p.slotList()) }

// dubboSlot is a Dubbo slot for RunSlot (slot.go).
type dubboSlot struct {
	p  *pool
	sl *poolSlot
}

func (k dubboSlot) Protocol() Protocols { return ProtoDubbo }
func (k dubboSlot) Retired() bool       { return k.sl.retire.Load() }
func (k dubboSlot) DialFailed()         { k.p.dialFailed() }

// current is the connection a handover left in the slot.
func (k dubboSlot) Current() (*upConn, bool) {
	uc := k.sl.uc.Load()
	return uc, uc != nil
}

func (k dubboSlot) Dial(_ context.Context, idx int) (*upConn, error) { return k.p.connect(idx) }

func (k dubboSlot) Install(uc *upConn) bool {
	if k.p.frozen.Load() { // a handover froze the pool while this one was dialed
		uc.close("handover")
		return false
	}
	k.sl.uc.Store(uc)
	k.p.followProviderDrain(uc)
	return true
}

func (k dubboSlot) Serve(_ context.Context, uc *upConn) (ended, away <-chan struct{}) {
	p := k.p
	cfg := p.srv.cfg.Load()
	p.srv.wheel.Schedule(&uc.beat, keepalive.Jitter(cfg.UpstreamInterval, cfg.UpstreamJitter, nil))
	p.connChanged()
	p.hold.dispatch()
	return uc.done, nil
}

func (k dubboSlot) Stop(uc *upConn) {
	p := k.p
	if p.frozen.Load() {
		return // a handover: the connection stays, with its state, for whoever serves next
	}
	if k.sl.retire.Load() && p.ctx.Err() == nil {
		// Retiring: in-flight requests finish; the last answer (readonlyDrained) or
		// max_request_age (onSweep) closes the connection.
		uc.state.CompareAndSwap(stateReady, stateReadonly)
		p.connChanged()
		if uc.npending.Load() == 0 {
			uc.close("slot retired")
		}
		select {
		case <-uc.done:
		case <-p.ctx.Done():
		}
	}
	uc.close("shutting down")
	k.Forget(uc)
}

func (k dubboSlot) Forget(uc *upConn) {
	k.p.foldCounts(uc)
	k.sl.uc.CompareAndSwap(uc, nil)
	k.p.connChanged()
}

// connect dials the provider and registers the connection with netpoll.
func (p *pool) connect(slot int) (*upConn, error) {
	srv := p.srv
	fd, err := dialTCP(p.addr, srv.cfg.Load().ConnectTimeout)
	if err != nil {
		return nil, err
	}
	conn, err := netpoll.NewFDConnection(fd)
	if err != nil {
		_ = unix.Close(fd)
		return nil, err
	}
	uc := newUpConn(p, conn, fd, slot)
	if err := uc.serve(); err != nil {
		return nil, err
	}
	return uc, nil
}

// foldCounts moves the counts of a connection that ended to the closed totals.
func (p *pool) foldCounts(uc *upConn) {
	p.sentRetired.Add(uc.sent.Load())
	p.srv.upClosed.fold(uc)
}

// sentTotal is the two-way requests sent on this pool's connections, ever: Dubbo's, and the
// HTTP/2 calls given a provider stream (warm-up's rate meter).
func (p *pool) sentTotal() uint64 {
	n := p.sentRetired.Load()
	if p.up != nil {
		n += p.up.Opened()
	}
	for _, sl := range p.slotList() {
		if uc := sl.uc.Load(); uc != nil {
			n += uc.sent.Load()
		}
	}
	return n
}

// pick returns the connection that takes new requests with the fewest requests in
// flight or queued, for a frame of size bytes. Large frames (over
// upstream.large_request_bytes) go to the pool's last connection when it has at
// least two, and other frames avoid it while another connection takes them: a bulk
// transfer then waits behind other bulk transfers, there and in that connection's
// kernel buffers (which no queue of Stormgate's can reorder), never in front of the
// small requests on the other connections (isolation, DESIGN §2).
func (p *pool) pick(slots []*poolSlot, size int) *upConn {
	n := len(slots)
	if n == 0 {
		return nil
	}
	if limit := p.srv.cfg.Load().LargeRequestBytes; n >= 2 && limit > 0 {
		bulk := slots[n-1].uc.Load()
		if size > limit {
			if bulk != nil && bulk.takes() {
				return bulk
			}
		} else if uc := p.leastLoaded(slots[:n-1]); uc != nil {
			return uc
		}
	}
	return p.leastLoaded(slots)
}

// bulkLane returns the connection kept for large frames when a frame of size bytes is
// one and the pool has such a connection; nil otherwise.
func (p *pool) bulkLane(slots []*poolSlot, size int) *upConn {
	if limit := p.srv.cfg.Load().LargeRequestBytes; len(slots) >= 2 && limit > 0 && size > limit {
		return slots[len(slots)-1].uc.Load()
	}
	return nil
}

// leastLoaded returns the connection of slots that takes new requests with the fewest
// requests in flight or queued, trying them from a rotating start.
func (p *pool) leastLoaded(slots []*poolSlot) *upConn {
	n := len(slots)
	start := int(p.rr.Add(1))
	var best *upConn
	var bestLoad int32
	for i := range n {
		uc := slots[(start+i)%n].uc.Load()
		if uc == nil || !uc.takes() {
			continue
		}
		if l := uc.npending.Load() + uc.nqueued.Load(); best == nil || l < bestLoad {
			best, bestLoad = uc, l
		}
	}
	return best
}

// forward accepts a two-way request: sent on a connection, or held while none
// takes it (held ones go first, so that order is kept).
func (p *pool) forward(r request, frame []byte) {
	p.srv.accept(r)
	if p.hold.laneLen(len(frame)) == 0 && p.pause.until.Load() == 0 && (!p.warming() || p.warmAllow()) && p.send(r, frame) {
		return
	}
	p.hold.push(r, frame)
}

// send puts r on the least loaded connection that takes it; false when none does.
func (p *pool) send(r request, frame []byte) bool {
	slots := p.slotList()
	best := p.pick(slots, len(frame))
	if best == nil {
		return false
	}
	if best.send(r, frame) {
		return true
	}
	if p.bulkLane(slots, len(frame)) == best {
		return false // a large request waits for its own connection (the hold queue), not in front of small ones
	}
	for _, sl := range slots { // its queue was full: any other that takes it
		if uc := sl.uc.Load(); uc != nil && uc != best && uc.send(r, frame) {
			return true
		}
	}
	return false
}

// forwardOneWay sends a one-way request under a fresh id; when no connection takes
// it, it is dropped and counted (nobody waits for an answer).
func (p *pool) forwardOneWay(s *session, frame []byte) {
	m := p.srv.m
	slots := p.slotList()
	if best := p.pick(slots, len(frame)); best != nil {
		if best.sendOneWay(s, frame) {
			return
		}
		for _, sl := range slots {
			if uc := sl.uc.Load(); uc != nil && uc != best && uc.sendOneWay(s, frame) {
				return
			}
		}
		m.dropped[dropOneWayOverloaded].Inc()
		return
	}
	m.dropped[dropOneWayNoUpstream].Inc()
}

// usable counts connections that take new requests.
func (p *pool) usable() int {
	n := 0
	for _, sl := range p.slotList() {
		if uc := sl.uc.Load(); uc != nil && uc.takes() {
			n++
		}
	}
	return n
}

// takes reports whether the connection takes new requests.
func (uc *upConn) takes() bool { return uc.state.Load() == stateReady && !uc.hung.Load() }

// connStates counts connections by state: ready (taking requests), readonly, and
// hung (hung.go; counted there whatever their state, not as ready). Usable HTTP/2
// connections count as ready.
func (p *pool) connStates() (ready, readonly, hung int) {
	ready, readonly, hung, h2Ready, h2Hung := p.connStatesByProtocol()
	return ready + h2Ready, readonly, hung + h2Hung
}

// connStatesByProtocol is connStates with the Dubbo connections by state and the
// usable HTTP/2 ones apart, ready or hung (the gauges' protocol label).
func (p *pool) connStatesByProtocol() (ready, readonly, hung, h2Ready, h2Hung int) {
	for _, sl := range p.slotList() {
		uc := sl.uc.Load()
		switch {
		case uc == nil || uc.state.Load() == stateClosed:
		case uc.hung.Load():
			hung++
		case uc.state.Load() == stateReady:
			ready++
		case uc.state.Load() == stateReadonly:
			readonly++
		}
	}
	if p.up != nil {
		h2Ready, h2Hung = p.up.Conns()
	}
	return
}

// connChanged runs after any connection changes state: gauges, the outage clock,
// and the READONLY policy. Calls are serialized server-wide (the gauges sum every
// pool): each reads the states and acts on them, so a call that read them before
// another connection changed must not act after the call that followed the change.
func (p *pool) connChanged() {
	p.srv.connMu.Lock()
	defer p.srv.connMu.Unlock()
	ready, readonly, hung := p.connStates()
	if h := p.srv.hookConnChanged.Load(); h != nil {
		(*h)()
	}
	if ready > 0 {
		p.downSince.Store(0)
		if p.wasDown.CompareAndSwap(true, false) {
			p.startWarmup() // either protocol's first usable connection after none
		}
	} else if p.downSince.CompareAndSwap(0, p.srv.now()) {
		p.wasDown.Store(true)
	}
	p.srv.updateUpstreamGauges()
	p.noteHung(ready, hung)
	p.onReadonlyChange(ready, readonly, hung)
}

// readonlyDrained closes a READONLY connection whose in-flight work is done when
// its slot is retiring, or when the provider sent READONLY on it: a Java provider
// waits for its consumers to disconnect (up to its shutdown timeout) before it
// closes, so this lets it finish and come back sooner.
func (p *pool) readonlyDrained(uc *upConn) {
	switch {
	case p.retiring(uc.slot):
		p.srv.spawn(func() { uc.close("slot retired") })
	case uc.pdrain.gotReadonly.Load():
		p.srv.spawn(func() { uc.close("the provider sent READONLY and nothing is in flight on this connection") })
	}
}

// onReadonlyChange tells the pool's consumers to prefer other providers while this
// one cannot serve them: READONLY when no connection is usable because the provider
// is hung (hung.go), or because it said READONLY under readonly_policy PROPAGATE;
// WRITEABLE when a connection is usable again.
func (p *pool) onReadonlyChange(ready, readonly, hung int) {
	propagate := p.srv.cfg.Load().ReadonlyPolicy == ReadonlyPropagate
	if ready == 0 && (hung > 0 || propagate && readonly > 0) && p.readonlySent.CompareAndSwap(false, true) {
		p.srv.broadcast(p, wire.EventReadonly)
	} else if ready > 0 && p.readonlySent.CompareAndSwap(true, false) {
		p.srv.broadcast(p, wire.EventWriteable)
	}
}

// armSweep makes sure the max_request_age sweep runs while requests are pending.
func (p *pool) armSweep() {
	if !p.sweepArmed.Load() && p.sweepArmed.CompareAndSwap(false, true) {
		p.srv.wheel.Schedule(&p.sweep, sweepEvery)
	}
}

const sweepEvery = time.Second

// onSweep runs on the wheel every second while requests are pending: it answers
// requests older than max_request_age. A request that old whose bytes are still
// queued in Stormgate means the connection has not written for that long: the
// connection is failed, which re-holds its unsent requests (then answered by the
// hold queue's own deadline) instead of answering a request that may still be sent.
func (p *pool) onSweep() {
	srv := p.srv
	now := srv.now()
	p.meter.sample(p.sentTotal(), sweepEvery)
	cfg := srv.cfg.Load()
	cutoff := now - int64(cfg.MaxRequestAge)
	var expired []pending
	left := 0
	for _, sl := range p.slotList() {
		uc := sl.uc.Load()
		if uc == nil {
			continue
		}
		uc.checkHung(now, cfg)
		var stalled bool
		expired, stalled = uc.sweep(cutoff, expired)
		switch {
		case stalled:
			srv.spawn(func() { uc.fail("a request waited limits.max_request_age in Stormgate's send queue") })
		case uc.state.Load() == stateReadonly && p.retiring(uc.slot) && uc.npending.Load() == 0:
			srv.spawn(func() { uc.close("slot retired") })
		}
		left += int(uc.npending.Load()) + uc.queuedRequests()
	}
	if p.up != nil {
		left += p.up.CheckHung(now, cfg)
	}
	for _, e := range expired {
		srv.refuse(e.request, wire.FailTimeout, "stormgate: the provider did not answer within limits.max_request_age", ReplyMaxAge)
	}
	p.sweepArmed.Store(false)
	if left > 0 {
		p.armSweep()
	}
}

func (p *pool) close() {
	p.cancel()
	p.wg.Wait()
	if p.up != nil {
		p.up.Close()
	}
	p.hold.failAll("stormgate: shutting down")
	p.srv.wheel.Stop(&p.sweep)
	p.srv.wheel.Stop(&p.pdrain.timer)
}

// queuedBytes is the bytes waiting to be written to the provider.
func (p *pool) queuedBytes() int {
	n := 0
	for _, sl := range p.slotList() {
		if uc := sl.uc.Load(); uc != nil {
			n += uc.queuedBytes()
		}
	}
	return n
}

// dialLog tells the truth about an outage at once and then without flooding: the
// first failed connect after being connected (or at start) is logged immediately
// with the kernel's error and what it means; later failures are summarised every
// 10 s with a count; a success after failures says how long it took.
type dialLog struct {
	mu       sync.Mutex
	failures int   // since the last success
	since    int64 // first failure of this run
	lastLog  int64
}

const dialLogEvery = 10 * time.Second

func (d *dialLog) failed(p *pool, err error, retry time.Duration) {
	srv := p.srv
	now := srv.now()
	cfg := srv.cfg.Load()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.failures++
	if d.failures == 1 {
		d.since, d.lastLog = now, now
		srv.log.Warn("cannot connect to provider", zap.String("provider", p.addr), zap.Error(err),
			zap.String("meaning", dialMeaning(err)), zap.Duration("retry_in", retry),
			zap.String("requests", holdPolicyText(cfg)))
		return
	}
	if time.Duration(now-d.lastLog) >= dialLogEvery {
		srv.log.Warn("still cannot connect to provider", zap.String("provider", p.addr), zap.Error(err),
			zap.String("meaning", dialMeaning(err)), zap.Int("failed_attempts", d.failures),
			zap.Duration("down_for", time.Duration(now-d.since)), zap.String("requests", holdPolicyText(cfg)))
		d.lastLog = now
	}
}

func (d *dialLog) connected(p *pool, slot int) {
	srv := p.srv
	d.mu.Lock()
	failures, since := d.failures, d.since
	d.failures = 0
	d.mu.Unlock()
	if failures > 0 {
		srv.log.Info("connected to provider", zap.String("provider", p.addr), zap.Int("slot", slot),
			zap.Int("failed_attempts", failures), zap.Duration("after", time.Duration(srv.now()-since)))
		return
	}
	srv.log.Info("connected to provider", zap.String("provider", p.addr), zap.Int("slot", slot))
}

// holdPolicyText says what happens to requests while the provider is unreachable.
func holdPolicyText(cfg *Config) string {
	if cfg.HoldTimeout <= 0 {
		return "answered at once with an error (status 35): hold.timeout is 0"
	}
	return "held up to hold.timeout (" + cfg.HoldTimeout.String() + "), then answered with an error (status 35); " +
		"consumer connections stay open"
}
