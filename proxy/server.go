package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudwego/netpoll"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/stormgate/stormgate/keepalive"
	"github.com/stormgate/stormgate/proxy/wire"
)

// Options are the Server's collaborators. Zero values are valid, but for Codec's.
type Options struct {
	Logger     *zap.Logger
	Registerer prometheus.Registerer // nil: metrics are kept but not exported
	Codec      wire.Codec            // the Dubbo 2 codec (dubbo.Codec{}); required
	// OnConnClosed is called once for every connection given to ServeFD when it
	// closes (admission's max_connections accounting).
	OnConnClosed func()
	// Clock drives every timeout, deadline and timestamp of the proxy (through its
	// timing wheel); nil is the system clock. Tests pass a keepalive.ManualClock.
	Clock keepalive.Clock
	// AccessLogger writes the access log (accesslog.go) at info level whatever the
	// main log level; nil: Logger.Named("access").
	AccessLogger *zap.Logger
	// Protocol makes the protocol beside Dubbo's from the Server's Env, once, in New:
	// for HTTP/2 (Triple, gRPC), triple.New (package proxy/triple). nil: Dubbo only,
	// and New refuses a Config whose upstream.protocol names Triple.
	Protocol func(Env) Protocol
}

// ErrServerClosed is returned by Start after Close.
var ErrServerClosed = errors.New("proxy: server closed")

// Server owns consumer sessions and upstream pools. Create it with New, start its
// background work with Start, hand it accepted connections with ServeFD, change
// its settings with Update (or Check, then Update), and end it with Drain
// (graceful) or Close. Every goroutine it starts has returned when Close returns.
type Server struct {
	opts Options
	log  *zap.Logger
	m    *metrics
	// protocols are Dubbo's (dubboProtocol) and the one beside it (Options.Protocol; noProtocol
	// without one), by protocol index (sniff.go); [protoUnknown] is nil.
	protocols [nProtos]Protocol
	codec     wire.Codec
	// statuses is the status label's vocabulary: the codec's names, then gRPC's (callstatus.go).
	statuses statusVocab
	cfg      atomic.Pointer[Config]
	// changed is closed by Update when settings change, and replaced: waits that
	// are not wheel timers (a reconnect backoff, the drain of Stormgate itself)
	// select on it to re-read the durations they wait for (rearm.go).
	changed atomic.Pointer[chan struct{}]
	clock   keepalive.Clock
	wheel   *keepalive.Wheel
	budget  Budget
	wenv    writerEnv // shared by every writer of this server
	tasks   group
	diag    peerDiag // the sock_diag watcher (peerdiag.go): Close stops it after tasks

	ctx    context.Context
	cancel context.CancelFunc

	mu    sync.Mutex
	pools map[uint16]*pool // key 0: the single upstream in non-transparent mode

	sessions  sessionSet
	calls     callMetrics // per-method metrics, access log (methods.go)
	eventIDs  atomic.Int64
	upClosed  upClosed      // counts of provider connections that ended
	drainIdle chan struct{} // signalDrain: while draining, a session's in-flight count reached 0, or a session closed
	announced atomic.Bool   // READONLY broadcast to every consumer (Announce, or Drain)
	draining  atomic.Bool
	closed    atomic.Bool

	handover    handoverGate
	restoring   *Snapshot // set by Restore: Start adopts it
	wheelCancel context.CancelFunc
	wheelDone   chan struct{}

	waiters atomic.Int64 // consumers with requests waiting for the provider (backpressure.go)

	hookServeFD     atomic.Pointer[func(fd int)] // tests: runs between netpoll registration and handler setup
	hookConnChanged atomic.Pointer[func()]       // tests: runs in connChanged between reading the states and acting on them
	connMu          sync.Mutex                   // serializes pool.connChanged
}

// New validates cfg and builds a Server. Nothing runs until Start.
func New(cfg Config, opts Options) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Codec == nil {
		return nil, errors.New("proxy: Options.Codec is nil: pass the Dubbo 2 codec, dubbo.Codec{} (package proxy/dubbo)")
	}
	if opts.Protocol == nil && cfg.Protocols.Triple() {
		return nil, errors.New("proxy: upstream.protocol names Triple and Options.Protocol is nil: " +
			"pass the HTTP/2 protocol, triple.New (package proxy/triple)")
	}
	clock := opts.Clock
	if clock == nil {
		clock = systemClock{}
	}
	s := &Server{
		opts:      opts,
		log:       opts.Logger,
		m:         newMetrics(),
		codec:     opts.Codec,
		clock:     clock,
		pools:     make(map[uint16]*pool),
		wheel:     keepalive.NewWheel(10*time.Millisecond, 4096, opts.Clock), // nil: the system clock, and an idle wheel sleeps
		drainIdle: make(chan struct{}, 1),
	}
	s.protocols[protoDubbo], s.protocols[protoH2] = dubboProtocol{s}, noProtocol{}
	if opts.Protocol != nil {
		s.protocols[protoH2] = opts.Protocol(Env{s})
	}
	var statuses [][]string // in the order statusList indexes them: Dubbo's, then the other's
	var notRun []string
	for _, pr := range s.eachProtocol() {
		statuses = append(statuses, pr.StatusNames())
		notRun = append(notRun, pr.NotRunReasons()...)
		s.m.collectors = append(s.m.collectors, pr.Collectors()...)
	}
	vocab, err := newStatusVocab(statuses...)
	if err != nil {
		return nil, err
	}
	s.statuses = vocab
	s.m.life = newLifeMetrics(notRun)
	s.budget.limit.Store(cfg.MaxBufferedBytes)
	s.wenv = writerEnv{now: s.now, spawn: s.spawn, budget: &s.budget}
	s.sessions.init()
	if opts.AccessLogger == nil {
		opts.AccessLogger = opts.Logger.Named("access")
	}
	s.calls.table.init(cfg.MaxMethods)
	s.calls.access.init(opts.AccessLogger)
	s.cfg.Store(&cfg)
	ch := make(chan struct{})
	s.changed.Store(&ch)
	s.m.register(opts.Registerer, s)
	return s, nil
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// now is the server's clock in unix nanoseconds, on its wheel's timeline: elapsed time is the clock's
// monotonic reading, so arrival stamps, deadlines and the wheel agree across a step of the wall clock.
func (s *Server) now() int64 { return s.wheel.Now() }

// after waits d on the server's clock, for waits that are not the wheel's timers (the
// peer-end proof in fail, which must not depend on a wheel that Freeze and Close stop).
func (s *Server) after(d time.Duration) <-chan time.Time { return keepalive.After(s.clock, d) }

// spawn runs f on a goroutine that Close waits for.
func (s *Server) spawn(f func()) { s.tasks.Go(f) }

// Start runs the timing wheel and dials the provider (non-transparent mode).
// It returns at once; background work stops when ctx ends or Close is called.
func (s *Server) Start(ctx context.Context) error {
	if s.closed.Load() {
		return ErrServerClosed
	}
	s.ctx, s.cancel = context.WithCancel(ctx)
	s.startWheel()
	if sn := s.restoring; sn != nil {
		s.restoring = nil
		return s.restore(sn)
	}
	if cfg := s.cfg.Load(); !cfg.Transparent {
		p := newPool(s, cfg.Upstream, 0)
		s.mu.Lock()
		s.pools[0] = p
		s.mu.Unlock()
		p.connChanged()
	}
	return nil
}

// startWheel runs the timing wheel's driver until stopWheel or shutdown.
func (s *Server) startWheel() {
	ctx, cancel := context.WithCancel(s.ctx)
	done := make(chan struct{})
	s.wheelCancel, s.wheelDone = cancel, done
	s.spawn(func() { defer close(done); s.wheel.Run(ctx) })
}

// stopWheel stops the driver and waits for it: no timer fires until startWheel.
func (s *Server) stopWheel() {
	if s.wheelCancel != nil {
		s.wheelCancel()
		<-s.wheelDone
	}
}

// Config returns the active proxy configuration.
func (s *Server) Config() Config { return *s.cfg.Load() }

// Check reports whether Update would accept cfg, changing nothing. A caller that
// must apply settings to several stages all-or-nothing checks each, then updates.
func (s *Server) Check(cfg Config) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	old := s.cfg.Load()
	if cfg.Transparent != old.Transparent {
		return errors.New("listener.transparent cannot change while running: restart the sidecar to switch modes")
	}
	if cfg.Protocols.Dubbo() != old.Protocols.Dubbo() || cfg.Protocols.Triple() != old.Protocols.Triple() {
		return errors.New("upstream.protocol cannot change while running: restart the sidecar")
	}
	if !cfg.Transparent && cfg.Upstream != old.Upstream {
		return fmt.Errorf("upstream.address cannot change while running (%s -> %s): restart the sidecar, "+
			"or run one sidecar per provider", old.Upstream, cfg.Upstream)
	}
	return nil
}

// Update applies new settings live; it refuses what Check refuses. Requests and
// connections are kept: each setting applies from the next event that reads it,
// and every wait already running on a changed duration is re-armed now for what
// the new value allows (rearm.go, the live rule TestEveryLiveDurationIsRearmed
// checks over the whole schema).
func (s *Server) Update(cfg Config) error {
	if err := s.Check(cfg); err != nil {
		return err
	}
	old := s.cfg.Load()
	s.cfg.Store(&cfg)
	s.budget.limit.Store(cfg.MaxBufferedBytes)
	s.calls.table.setLimit(cfg.MaxMethods)
	pools := s.poolList()
	if cfg.UpstreamConns != old.UpstreamConns {
		for _, p := range pools {
			for _, u := range p.upstreams() {
				u.Resize(cfg.UpstreamConns)
			}
		}
	}
	s.rearm(old, &cfg, pools)
	if cfg.ReadonlyPolicy != old.ReadonlyPolicy {
		for _, p := range pools {
			p.connChanged()
		}
	}
	return nil
}

// ServeFD takes ownership of an accepted, non-blocking consumer socket.
// origDst is the pre-REDIRECT destination in transparent mode (zero otherwise).
// It never blocks for long: it wraps the fd in a netpoll connection and returns.
// Whatever happens, the fd is closed exactly once and OnConnClosed runs once.
func (s *Server) ServeFD(fd int, remote, origDst netip.AddrPort) {
	cfg := s.cfg.Load()
	proto := protoDubbo // nothing to sniff: every byte goes to the Dubbo path, as before Triple
	if cfg.Protocols.Triple() {
		proto = protoUnknown // the first bytes decide (sniff.go)
	}
	turnAway := func(r CloseReason) { // a connection never served: closed and counted
		_ = unix.Close(fd)
		s.m.downClosed[r][proto].Inc()
		if s.opts.OnConnClosed != nil {
			s.opts.OnConnClosed()
		}
	}
	if s.draining.Load() || s.closed.Load() {
		turnAway(CloseDrain)
		return
	}
	var p *pool
	if cfg.Transparent {
		port := origDst.Port()
		if !cfg.portAllowed(port) {
			s.log.Warn("refused a redirected connection for a port outside listener.inbound_ports",
				zap.Stringer("peer", remote), zap.Uint16("port", port))
			turnAway(CloseNoPort)
			return
		}
		p = s.poolFor(port)
	} else {
		s.mu.Lock()
		p = s.pools[0]
		s.mu.Unlock()
	}
	if p == nil {
		turnAway(CloseShutdown)
		return
	}
	conn, err := netpoll.NewFDConnection(fd)
	if err != nil {
		s.log.Error("cannot register consumer connection with netpoll", zap.Error(err))
		turnAway(ClosePeer)
		return
	}
	if h := s.hookServeFD.Load(); h != nil {
		(*h)(fd)
	}
	sess := newSession(s, p, conn, fd, remote)
	if proto == protoDubbo {
		sess.speakDubbo()
	}
	sess.proto.Store(proto)
	s.sessions.add(sess)
	s.m.downConns[proto].Inc()
	if t := cfg.DownstreamIdleTimeout; t > 0 {
		// Before SetOnRequest: bytes already buffered run onRequest inside it, which may arm
		// the timer sooner (frame_read_timeout); that schedule must win.
		s.wheel.Schedule(&sess.timer, t)
	}
	_ = conn.AddCloseCallback(sess.onClosed)
	_ = conn.SetOnRequest(sess.onRequest)
	if sess.proto.Load() == protoDubbo && (p.readonlySent.Load() || s.announced.Load()) {
		sess.dubbo.sendEvent(wire.EventReadonly) // else sniff.go sends it once the first bytes say Dubbo
	}
	if !conn.IsActive() {
		// The consumer left before its handlers were set: netpoll saw the hangup with no
		// handler and ran no close callback. Closing now runs them (ours, then netpoll's,
		// which closes the fd), unless a handler already did.
		_ = conn.Close()
	}
}

func (s *Server) poolFor(port uint16) *pool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.pools[port]; ok {
		return p
	}
	if s.ctx == nil || s.closed.Load() {
		return nil
	}
	// newPool takes no server lock (its gauges update when its connections change).
	p := newPool(s, net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port))), port)
	s.pools[port] = p
	return p
}

func (s *Server) poolList() []*pool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*pool, 0, len(s.pools))
	for _, p := range s.pools {
		out = append(out, p)
	}
	return out
}

// broadcast sends ev to every consumer of pool p (every consumer when p is nil).
func (s *Server) broadcast(p *pool, ev wire.Event) {
	i, name := 0, "readonly"
	if ev == wire.EventWriteable {
		i, name = 1, "writeable"
	}
	n := 0
	s.sessions.each(func(ss *session) {
		if (p == nil || ss.pool == p) && ss.proto.Load() == protoDubbo {
			ss.dubbo.sendEvent(ev)
			n++
		}
	})
	s.m.readonlyOut[i].Add(float64(n))
	s.log.Info("sent event to consumers", zap.String("event", name), zap.Int("consumers", n))
}

func (s *Server) updateUpstreamGauges() {
	var ready, hung [nProtos]int
	readonly, pools, connected := 0, 0, 0
	for _, p := range s.poolList() {
		r, h, o := p.connStatesByProtocol()
		readonly += o
		readyHere := 0
		for i := range r {
			ready[i] += r[i]
			hung[i] += h[i]
			readyHere += r[i]
		}
		pools++
		if readyHere > 0 {
			connected++
		}
	}
	s.m.upConns[protoDubbo].Set(float64(ready[protoDubbo]))
	s.m.upConns[protoH2].Set(float64(ready[protoH2]))
	s.m.upState.WithLabelValues("ready", protoNames[protoDubbo]).Set(float64(ready[protoDubbo]))
	s.m.upState.WithLabelValues("readonly", protoNames[protoDubbo]).Set(float64(readonly))
	s.m.upState.WithLabelValues("hung", protoNames[protoDubbo]).Set(float64(hung[protoDubbo]))
	s.m.upState.WithLabelValues("ready", protoNames[protoH2]).Set(float64(ready[protoH2]))
	s.m.upState.WithLabelValues("hung", protoNames[protoH2]).Set(float64(hung[protoH2]))
	if pools > 0 && connected == pools {
		s.m.upConnected.Set(1)
	} else {
		s.m.upConnected.Set(0)
	}
}

// unreachableFor is how long the longest-unreachable provider has had no usable
// connection; 0 while every provider has one.
func (s *Server) unreachableFor() time.Duration {
	now := s.now()
	var worst time.Duration
	for _, p := range s.poolList() {
		if since := p.downSince.Load(); since != 0 {
			worst = max(worst, time.Duration(now-since))
		}
	}
	return worst
}

func (s *Server) upstreamQueued() int {
	n := 0
	for _, p := range s.poolList() {
		n += p.dubbo.queuedBytes()
	}
	return n
}

// Ready reports whether the server takes traffic: started, not draining (nor
// announcing a drain).
func (s *Server) Ready() bool {
	return s.ctx != nil && !s.announced.Load() && !s.draining.Load() && !s.closed.Load()
}

// Close closes every connection at once and stops background work; it returns once
// every goroutine the server started has returned. Requests still held or in flight
// are answered with an error first, while their consumers are connected.
func (s *Server) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	s.closePools()
	s.sessions.each(func(ss *session) { ss.closeWith(CloseShutdown) })
	if s.cancel != nil {
		s.cancel()
	}
	s.tasks.Wait()
	// Last: a connection's death (in tasks, or a pool's) waits for its provider
	// socket's announcement; nothing registers a connection any more.
	s.diag.close()
	return nil
}

// closePools closes every pool; first in Close and in Drain's end, because closing
// them answers every held and in-flight request with an error while its consumer is
// still connected (exactly one answer per request, also when a drain times out).
// Sessions closed first would make those replies no-ops.
func (s *Server) closePools() {
	s.mu.Lock()
	pools := s.pools
	s.pools = map[uint16]*pool{}
	s.mu.Unlock()
	for _, p := range pools {
		p.close()
	}
}

// group runs goroutines and waits for them. Unlike sync.WaitGroup it allows Go
// while Wait is waiting (a connection closing during shutdown starts a flusher).
type group struct {
	mu   sync.Mutex
	n    int
	zero *sync.Cond
}

func (g *group) Go(f func()) {
	g.mu.Lock()
	g.n++
	g.mu.Unlock()
	go func() {
		defer g.done()
		f()
	}()
}

func (g *group) done() {
	g.mu.Lock()
	if g.n--; g.n == 0 && g.zero != nil {
		g.zero.Broadcast()
	}
	g.mu.Unlock()
}

// Wait returns once no goroutine started by Go is running.
func (g *group) Wait() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.zero == nil {
		g.zero = sync.NewCond(&g.mu)
	}
	for g.n > 0 {
		g.zero.Wait()
	}
}

// sessionSet is a sharded set of live sessions (broadcast, drain, live updates), and
// the counts of the sessions that ended (see counters.go).
type sessionSet struct {
	shards [32]struct {
		mu     sync.Mutex
		m      map[*session]struct{}
		closed sessionTotals
	}
	n atomic.Int64
}

func (ss *sessionSet) init() {
	for i := range ss.shards {
		ss.shards[i].m = make(map[*session]struct{})
	}
}

func (ss *sessionSet) shard(s *session) int { return s.w.fd & 31 }

func (ss *sessionSet) add(s *session) {
	sh := &ss.shards[ss.shard(s)]
	sh.mu.Lock()
	sh.m[s] = struct{}{}
	sh.mu.Unlock()
	ss.n.Add(1)
}

func (ss *sessionSet) remove(s *session) {
	sh := &ss.shards[ss.shard(s)]
	sh.mu.Lock()
	if _, ok := sh.m[s]; ok {
		delete(sh.m, s)
		ss.n.Add(-1)
		s.counts.addTo(&sh.closed)
	}
	sh.mu.Unlock()
}

// totals sums the counts of every session, live and ended, and the requests in
// flight of the live ones.
func (ss *sessionSet) totals() (t sessionTotals, inflight int64) {
	for i := range ss.shards {
		sh := &ss.shards[i]
		sh.mu.Lock()
		t.add(sh.closed)
		for s := range sh.m {
			s.counts.addTo(&t)
			inflight += int64(s.inflight.Load())
		}
		sh.mu.Unlock()
	}
	return t, inflight
}

func (ss *sessionSet) len() int { return int(ss.n.Load()) }

// each calls f for every session; f runs without the shard lock held.
func (ss *sessionSet) each(f func(*session)) {
	var buf []*session
	for i := range ss.shards {
		sh := &ss.shards[i]
		sh.mu.Lock()
		buf = buf[:0]
		for s := range sh.m {
			buf = append(buf, s)
		}
		sh.mu.Unlock()
		for _, s := range buf {
			f(s)
		}
	}
}
