package proxy

import (
	"context"
	"iter"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/stormgate/stormgate/keepalive"
	"github.com/stormgate/stormgate/proxy/wire"
)

// pool is one provider address: what the core keeps for it whatever the protocol
// (the hold queue for requests no connection takes, the outage clock, the READONLY
// policy, warm-up, the not-executed pause, the provider's drain, hang state and the
// once-a-second sweep), and each protocol's provider connections as an Upstream
// (protocol.go): Dubbo's (dubboupstream.go: its slots, the choice of a connection
// per request) and the plug-in's (HTTP/2, proxy/triple).
type pool struct {
	srv  *Server
	addr string
	port uint16 // transparent mode: the original destination port; 0 otherwise

	// ups are the Upstreams of the protocols upstream.protocol names, by protocol index
	// (protoDubbo, protoH2; nil for one it does not name): started, resized, counted,
	// swept and closed alike (upstreams). Set before any of them starts, never changed.
	ups [nProtos]Upstream
	// dubbo is Dubbo's Upstream: ups[protoDubbo] when upstream.protocol names Dubbo, and
	// here even when it does not (a Dubbo consumer may still reach the pool: with no
	// slot, its requests wait in the hold queue and end there). The Dubbo policies that
	// stay in the core act on its connections (the hold queue's Dubbo lanes, the
	// provider's drain, hang detection, the not-executed pause, the handover).
	dubbo dubboUpstream // in the pool itself: the forward path reaches its slots with no pointer to follow
	hold  HoldQueue

	readonlySent atomic.Bool  // PROPAGATE: READONLY broadcast is in effect
	downSince    atomic.Int64 // when the pool last had no usable connection; 0 while it has one
	wasDown      atomic.Bool  // lost every connection after having one (warm-up trigger)
	meter        rateMeter
	warm         atomic.Pointer[warmup]
	sweepArmed   atomic.Bool
	sweep        keepalive.Timer
	dials        dialLog
	pause        notRunPause   // after not-executed answers (notrun.go)
	pdrain       providerDrain // the provider's graceful shutdown (providerdrain.go)
	hang         hungState

	ctx    context.Context
	cancel context.CancelFunc
}

func newPool(srv *Server, addr string, port uint16) *pool {
	p := newPoolStopped(srv, addr, port)
	n := srv.cfg.Load().UpstreamConns
	for _, u := range p.upstreams() {
		u.Start(n)
	}
	return p
}

// newPoolStopped is a pool whose Upstreams have not started (a handover adopts its
// Dubbo connections into slots, then starts the loops).
func newPoolStopped(srv *Server, addr string, port uint16) *pool {
	p := &pool{srv: srv, addr: addr, port: port}
	p.hold.init(p)
	p.sweep.Init(p.onSweep)
	p.pdrain.timer.Init(func() { p.endProviderDrain("drain.timeout passed") })
	p.downSince.Store(srv.now())
	p.ctx, p.cancel = context.WithCancel(srv.ctx)
	cfg := srv.cfg.Load()
	p.dubbo.init(p)
	for i, pr := range srv.eachProtocol() {
		if cfg.Protocols.names(i) {
			p.ups[i] = pr.NewUpstream(Provider{p})
		}
	}
	return p
}

// upstreams is the pool's Upstreams with their protocol indexes, Dubbo's first.
func (p *pool) upstreams() iter.Seq2[int, Upstream] {
	return func(yield func(int, Upstream) bool) {
		for i, u := range p.ups {
			if u != nil && !yield(i, u) {
				return
			}
		}
	}
}

// sentTotal is the two-way requests sent on this pool's connections, ever: Dubbo's, and the
// HTTP/2 calls given a provider stream (warm-up's rate meter).
func (p *pool) sentTotal() uint64 {
	var n uint64
	for _, u := range p.upstreams() {
		n += u.Opened()
	}
	return n
}

// forward accepts a two-way Dubbo request: sent on a connection, or held while none
// takes it (held ones go first, so that order is kept).
func (p *pool) forward(r request, frame []byte) {
	p.srv.accept(r)
	if p.hold.laneLen(len(frame)) == 0 && p.pause.until.Load() == 0 && (!p.warming() || p.warmAllow()) && p.dubbo.send(r, frame) {
		return
	}
	p.hold.push(r, frame)
}

// forwardOneWay sends a one-way Dubbo request (dubboUpstream.forwardOneWay).
func (p *pool) forwardOneWay(s *session, frame []byte) { p.dubbo.forwardOneWay(s, frame) }

// usable counts the Dubbo connections that take new requests (the hold queue's and a
// consumer's backpressure look at it).
func (p *pool) usable() int { return p.dubbo.usable() }

// connStates counts connections by state: ready (taking requests), readonly, and
// hung (hung.go; counted there whatever their state, not as ready). Usable HTTP/2
// connections count as ready.
func (p *pool) connStates() (ready, readonly, hung int) {
	r, h, readonly := p.connStatesByProtocol()
	for i := range r {
		ready += r[i]
		hung += h[i]
	}
	return ready, readonly, hung
}

// connStatesByProtocol is connStates by protocol index (the gauges' protocol label):
// each Upstream's ready and hung connections, and the READONLY ones, which only
// Dubbo has.
func (p *pool) connStatesByProtocol() (ready, hung [nProtos]int, readonly int) {
	for i, u := range p.upstreams() {
		ready[i], hung[i] = u.Conns()
	}
	return ready, hung, p.dubbo.readonlyConns()
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

// onSweep runs on the wheel every second while requests are pending: it samples the
// warm-up's rate, and each Upstream looks for hung connections and, for Dubbo, answers
// requests older than limits.max_request_age (dubboUpstream.CheckHung).
func (p *pool) onSweep() {
	srv := p.srv
	now := srv.now()
	p.meter.sample(p.sentTotal(), sweepEvery)
	cfg := srv.cfg.Load()
	left := 0
	for _, u := range p.upstreams() {
		left += u.CheckHung(now, cfg)
	}
	p.sweepArmed.Store(false)
	if left > 0 {
		p.armSweep()
	}
}

func (p *pool) close() {
	p.cancel()
	for _, u := range p.upstreams() {
		u.Close()
	}
	if p.ups[protoDubbo] == nil {
		// Not named, and yet it may have slot loops: a handover's snapshot had Dubbo connections
		// and this binary's upstream.protocol does not name Dubbo (restore adopts them all). Close
		// returns once every goroutine has.
		p.dubbo.Close()
	}
	p.hold.failAll("stormgate: shutting down")
	p.srv.wheel.Stop(&p.sweep)
	p.srv.wheel.Stop(&p.pdrain.timer)
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
