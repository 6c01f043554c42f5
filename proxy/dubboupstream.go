package proxy

import (
	"context"
	"iter"
	"sync"
	"sync/atomic"

	"github.com/cloudwego/netpoll"
	"golang.org/x/sys/unix"

	"github.com/stormgate/stormgate/keepalive"
	"github.com/stormgate/stormgate/proxy/wire"
)

// dubboUpstream is Dubbo's side of one provider's pool, its Upstream: upstream.connections slots,
// each kept up by RunSlot (slot.go) with a provider connection (upConn), and the choice of a
// connection per request (pick). The pool holds it as pool.dubbo, always (a Dubbo consumer may
// reach a provider that does not speak Dubbo: with no slot, its requests wait in the hold queue and
// end there), and among its Upstreams (pool.ups) when upstream.protocol names Dubbo. The policies
// that act on its connections stay the core's: the hold queue sends through send, and the provider's
// drain (providerdrain.go), hang detection (hung.go), the not-executed pause (notrun.go) and the
// handover (handover.go: freeze, thaw, adopt) walk conns.
//
// Concurrency: the slot list is copy on write, read without a lock (slotList); mu serializes its
// changes, and nothing else is taken under it. The slot loops are its goroutines (wg): Close waits
// for them once the pool's context ended, and so does freeze.
type dubboUpstream struct {
	p   *pool
	srv *Server // p.srv, one load nearer for the hot path (pick)

	rr          atomic.Uint32
	slots       atomic.Pointer[[]*poolSlot] // copy on write under mu
	mu          sync.Mutex
	sentRetired atomic.Uint64 // requests sent on connections that ended (warm-up's rate)
	frozen      atomic.Bool   // a handover stopped the slot loops (handover.go)
	wg          sync.WaitGroup
}

var _ Upstream = (*dubboUpstream)(nil)

type poolSlot struct {
	uc     atomic.Pointer[upConn]
	retire atomic.Bool
	cancel context.CancelFunc
}

// init makes d p's, with no slot yet.
func (d *dubboUpstream) init(p *pool) {
	d.p, d.srv = p, p.srv
	d.slots.Store(&[]*poolSlot{})
}

func (d *dubboUpstream) slotList() []*poolSlot { return *d.slots.Load() }

// conns is every connection in a slot now, in slot order.
func (d *dubboUpstream) conns() iter.Seq[*upConn] {
	return func(yield func(*upConn) bool) {
		for _, sl := range d.slotList() {
			if uc := sl.uc.Load(); uc != nil && !yield(uc) {
				return
			}
		}
	}
}

// Start runs n slot loops (upstream.connections).
func (d *dubboUpstream) Start(n int) { d.Resize(n) }

// Resize grows or shrinks the number of slots. A shrunk slot retires: its connection takes no new
// requests and closes once its in-flight requests end.
func (d *dubboUpstream) Resize(n int) {
	p := d.p
	d.mu.Lock()
	old := d.slotList()
	next := append([]*poolSlot(nil), old...)
	for i := len(old); i < n; i++ {
		ctx, cancel := context.WithCancel(p.ctx)
		sl := &poolSlot{cancel: cancel}
		next = append(next, sl)
		d.wg.Add(1)
		go func() { defer d.wg.Done(); RunSlot(ctx, Provider{p}, i, dubboSlot{d, sl}) }()
	}
	for i := n; i < len(old); i++ {
		old[i].retire.Store(true)
		old[i].cancel()
	}
	if n < len(next) {
		next = next[:n]
	}
	d.slots.Store(&next)
	d.mu.Unlock()
	if n < len(old) {
		p.connChanged()
	}
}

func (d *dubboUpstream) retiring(slot int) bool { return slot >= len(d.slotList()) }

// Opened is the two-way requests sent on its connections, ever (the warm-up ramp's rate meter).
func (d *dubboUpstream) Opened() uint64 {
	n := d.sentRetired.Load()
	for uc := range d.conns() {
		n += uc.sent.Load()
	}
	return n
}

// Conns counts the connections that take requests, and the hung ones (hung.go; counted there
// whatever their state, not as ready). READONLY ones are neither: readonlyConns.
func (d *dubboUpstream) Conns() (ready, hung int) {
	for _, sl := range d.slotList() {
		uc := sl.uc.Load()
		switch {
		case uc == nil || uc.state.Load() == stateClosed:
		case uc.hung.Load():
			hung++
		case uc.state.Load() == stateReady:
			ready++
		}
	}
	return ready, hung
}

// readonlyConns counts the connections that only finish what is in flight (the provider said
// READONLY, it drains, or the slot retires) and are not hung: the READONLY policy's count, which
// only Dubbo has.
func (d *dubboUpstream) readonlyConns() int {
	n := 0
	for uc := range d.conns() {
		if uc.state.Load() == stateReadonly && !uc.hung.Load() {
			n++
		}
	}
	return n
}

// usable counts connections that take new requests.
func (d *dubboUpstream) usable() int {
	n := 0
	for _, sl := range d.slotList() {
		if uc := sl.uc.Load(); uc != nil && uc.takes() {
			n++
		}
	}
	return n
}

// takes reports whether the connection takes new requests.
func (uc *upConn) takes() bool { return uc.state.Load() == stateReady && !uc.hung.Load() }

// CheckHung is the pool's once-a-second sweep over the connections: hang detection (hung.go), and
// the requests older than limits.max_request_age, answered. Such a request whose bytes are still
// queued in Stormgate means the connection has not written for that long: the connection is failed,
// which re-holds its unsent requests (then answered by the hold queue's own deadline) instead of
// answering a request that may still be sent. A retired slot's connection with nothing in flight is
// closed. It returns the requests still owed or queued.
func (d *dubboUpstream) CheckHung(now int64, cfg *Config) int {
	srv := d.srv
	cutoff := now - int64(cfg.MaxRequestAge)
	var expired []pending
	left := 0
	for uc := range d.conns() {
		uc.checkHung(now, cfg)
		var stalled bool
		expired, stalled = uc.sweep(cutoff, expired)
		switch {
		case stalled:
			srv.spawn(func() { uc.fail("a request waited limits.max_request_age in Stormgate's send queue") })
		case uc.state.Load() == stateReadonly && d.retiring(uc.slot) && uc.npending.Load() == 0:
			srv.spawn(func() { uc.close("slot retired") })
		}
		left += int(uc.npending.Load()) + uc.queuedRequests()
	}
	for _, e := range expired {
		srv.refuse(e.request, wire.FailTimeout, "stormgate: the provider did not answer within limits.max_request_age", ReplyMaxAge)
	}
	return left
}

// SettingsChanged re-arms the connections' heartbeat checks (keepalive.upstream_interval,
// upstream_jitter) and their stalled writers' timers (upstream.write_timeout). The held requests'
// ends are the hold queue's (HoldQueue.rearm), for both protocols.
func (d *dubboUpstream) SettingsChanged(old, cfg *Config) {
	srv := d.srv
	if cfg.UpstreamInterval != old.UpstreamInterval || cfg.UpstreamJitter != old.UpstreamJitter {
		for uc := range d.conns() {
			srv.wheel.Schedule(&uc.beat, keepalive.Jitter(cfg.UpstreamInterval, cfg.UpstreamJitter, nil))
		}
	}
	if cfg.WriteTimeout != old.WriteTimeout {
		for uc := range d.conns() {
			if uc.w.StalledFor(srv.now()) > 0 {
				srv.wheel.Schedule(&uc.stall, 0) // onStallTimer works out the rest from the new value
			}
		}
	}
}

// Calls has no use for Dubbo: its per-method counts are each connection's (upConn.counts.calls),
// folded into the Server's closed totals when the connection ends (upClosed.fold), and the scrape
// walks the live ones (callTotals). Nil.
func (d *dubboUpstream) Calls() *MethodShard { return nil }

// Close waits for the slot loops, which the pool's context ended: each closed its connection.
func (d *dubboUpstream) Close() { d.wg.Wait() }

// freeze stops every slot loop for a handover, leaving the connections as they are, and waits for
// them.
func (d *dubboUpstream) freeze() {
	d.frozen.Store(true)
	d.mu.Lock()
	for _, sl := range d.slotList() {
		sl.cancel()
	}
	d.mu.Unlock()
	d.wg.Wait()
}

// thaw starts a loop for every slot (after a handover, adopting its connection), and slots up to
// upstream.connections.
func (d *dubboUpstream) thaw() {
	p := d.p
	d.frozen.Store(false)
	d.mu.Lock()
	for i, sl := range d.slotList() {
		ctx, cancel := context.WithCancel(p.ctx)
		sl.cancel = cancel
		d.wg.Add(1)
		go func() { defer d.wg.Done(); RunSlot(ctx, Provider{p}, i, dubboSlot{d, sl}) }()
	}
	d.mu.Unlock()
	if cfg := p.srv.cfg.Load(); cfg.Protocols.Dubbo() {
		d.Resize(max(cfg.UpstreamConns, len(d.slotList())))
	}
	p.connChanged()
}

// adopt puts a provider connection from a handover into its slot: registered with netpoll, its
// writer held, no handler yet (upConn.serve).
func (d *dubboUpstream) adopt(cs UpConnSnapshot) (*upConn, error) {
	conn, err := netpoll.NewFDConnection(cs.FD)
	if err != nil {
		return nil, err
	}
	uc := newUpConn(d.p, conn, cs.FD, cs.Slot)
	uc.w.held = true
	uc.state.Store(cs.State)
	uc.nextID = cs.NextID
	uc.rd.skip = cs.Skip
	d.mu.Lock()
	next := append([]*poolSlot(nil), d.slotList()...)
	for len(next) <= cs.Slot {
		next = append(next, &poolSlot{cancel: func() {}})
	}
	next[cs.Slot].uc.Store(uc)
	d.slots.Store(&next)
	d.mu.Unlock()
	return uc, nil
}

// dubboSlot is a Dubbo slot for RunSlot (slot.go).
type dubboSlot struct {
	d  *dubboUpstream
	sl *poolSlot
}

func (k dubboSlot) Protocol() Protocols { return ProtoDubbo }
func (k dubboSlot) Retired() bool       { return k.sl.retire.Load() }
func (k dubboSlot) DialFailed()         { k.d.p.dialFailed() }

// current is the connection a handover left in the slot.
func (k dubboSlot) Current() (*upConn, bool) {
	uc := k.sl.uc.Load()
	return uc, uc != nil
}

func (k dubboSlot) Dial(_ context.Context, idx int) (*upConn, error) { return k.d.connect(idx) }

func (k dubboSlot) Install(uc *upConn) bool {
	if k.d.frozen.Load() { // a handover froze the pool while this one was dialed
		uc.close("handover")
		return false
	}
	k.sl.uc.Store(uc)
	k.d.p.followProviderDrain(uc)
	return true
}

func (k dubboSlot) Serve(_ context.Context, uc *upConn) (ended, away <-chan struct{}) {
	p := k.d.p
	cfg := p.srv.cfg.Load()
	p.srv.wheel.Schedule(&uc.beat, keepalive.Jitter(cfg.UpstreamInterval, cfg.UpstreamJitter, nil))
	p.connChanged()
	p.hold.dispatch()
	return uc.done, nil
}

func (k dubboSlot) Stop(uc *upConn) {
	p := k.d.p
	if k.d.frozen.Load() {
		return // a handover: the connection stays, with its state, for whoever serves next
	}
	if k.sl.retire.Load() && p.ctx.Err() == nil {
		// Retiring: in-flight requests finish; the last answer (readonlyDrained) or
		// max_request_age (CheckHung) closes the connection.
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
	k.d.foldCounts(uc)
	k.sl.uc.CompareAndSwap(uc, nil)
	k.d.p.connChanged()
}

// connect dials the provider and registers the connection with netpoll.
func (d *dubboUpstream) connect(slot int) (*upConn, error) {
	p := d.p
	fd, err := dialTCP(p.addr, p.srv.cfg.Load().ConnectTimeout)
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
func (d *dubboUpstream) foldCounts(uc *upConn) {
	d.sentRetired.Add(uc.sent.Load())
	d.srv.upClosed.fold(uc)
}

// pick returns the connection that takes new requests with the fewest requests in
// flight or queued, for a frame of size bytes. Large frames (over
// upstream.large_request_bytes) go to the pool's last connection when it has at
// least two, and other frames avoid it while another connection takes them: a bulk
// transfer then waits behind other bulk transfers, there and in that connection's
// kernel buffers (which no queue of Stormgate's can reorder), never in front of the
// small requests on the other connections (isolation, DESIGN §2).
func (d *dubboUpstream) pick(slots []*poolSlot, size int) *upConn {
	n := len(slots)
	if n == 0 {
		return nil
	}
	if limit := d.srv.cfg.Load().LargeRequestBytes; n >= 2 && limit > 0 {
		bulk := slots[n-1].uc.Load()
		if size > limit {
			if bulk != nil && bulk.takes() {
				return bulk
			}
		} else if uc := d.leastLoaded(slots[:n-1]); uc != nil {
			return uc
		}
	}
	return d.leastLoaded(slots)
}

// bulkLane returns the connection kept for large frames when a frame of size bytes is
// one and the pool has such a connection; nil otherwise.
func (d *dubboUpstream) bulkLane(slots []*poolSlot, size int) *upConn {
	if limit := d.srv.cfg.Load().LargeRequestBytes; len(slots) >= 2 && limit > 0 && size > limit {
		return slots[len(slots)-1].uc.Load()
	}
	return nil
}

// leastLoaded returns the connection of slots that takes new requests with the fewest
// requests in flight or queued, trying them from a rotating start.
func (d *dubboUpstream) leastLoaded(slots []*poolSlot) *upConn {
	n := len(slots)
	start := int(d.rr.Add(1))
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

// send puts r on the least loaded connection that takes it; false when none does.
func (d *dubboUpstream) send(r request, frame []byte) bool {
	slots := d.slotList()
	best := d.pick(slots, len(frame))
	if best == nil {
		return false
	}
	if best.send(r, frame) {
		return true
	}
	if d.bulkLane(slots, len(frame)) == best {
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
func (d *dubboUpstream) forwardOneWay(s *session, frame []byte) {
	m := d.srv.m
	slots := d.slotList()
	if best := d.pick(slots, len(frame)); best != nil {
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

// readonlyDrained closes a READONLY connection whose in-flight work is done when
// its slot is retiring, or when the provider sent READONLY on it: a Java provider
// waits for its consumers to disconnect (up to its shutdown timeout) before it
// closes, so this lets it finish and come back sooner.
func (d *dubboUpstream) readonlyDrained(uc *upConn) {
	switch {
	case d.retiring(uc.slot):
		d.srv.spawn(func() { uc.close("slot retired") })
	case uc.pdrain.gotReadonly.Load():
		d.srv.spawn(func() { uc.close("the provider sent READONLY and nothing is in flight on this connection") })
	}
}

// queuedBytes is the bytes waiting to be written to the provider.
func (d *dubboUpstream) queuedBytes() int {
	n := 0
	for uc := range d.conns() {
		n += uc.queuedBytes()
	}
	return n
}
