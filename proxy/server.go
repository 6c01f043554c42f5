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
)

// Options are the Server's collaborators. Zero values are valid.
type Options struct {
	Logger     *zap.Logger
	Registerer prometheus.Registerer // nil: metrics are kept but not exported
	Codec      Codec                 // nil: Dubbo
	// OnConnClosed is called once for every connection given to ServeFD when it
	// closes (admission's max_connections accounting).
	OnConnClosed func()
}

// ErrServerClosed is returned by Start after Close.
var ErrServerClosed = errors.New("proxy: server closed")

// Server owns consumer sessions and upstream pools. Create it with New, start its
// background work with Start, hand it accepted connections with ServeFD, change
// its settings with Update, and end it with Drain (graceful) or Close.
type Server struct {
	opts  Options
	log   *zap.Logger
	m     *metrics
	codec Codec
	cfg   atomic.Pointer[Config]
	wheel *keepalive.Wheel

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	pools map[uint16]*Pool // key 0: the single upstream in non-transparent mode

	sessions sessionSet
	eventIDs atomic.Int64
	draining atomic.Bool
	closed   atomic.Bool

	hookServeFD func(fd int) // tests: runs between netpoll registration and handler setup
}

// New validates cfg and builds a Server. Nothing runs until Start.
func New(cfg Config, opts Options) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Codec == nil {
		opts.Codec = Dubbo{}
	}
	s := &Server{
		opts:  opts,
		log:   opts.Logger,
		m:     newMetrics(opts.Registerer),
		codec: opts.Codec,
		pools: make(map[uint16]*Pool),
		wheel: keepalive.NewWheel(10*time.Millisecond, 4096, nil),
	}
	s.sessions.init()
	s.cfg.Store(&cfg)
	return s, nil
}

// Start runs the timing wheel and dials the provider (non-transparent mode).
// It returns at once; background work stops when ctx ends or Close is called.
func (s *Server) Start(ctx context.Context) error {
	if s.closed.Load() {
		return ErrServerClosed
	}
	s.ctx, s.cancel = context.WithCancel(ctx)
	s.wg.Add(1)
	go func() { defer s.wg.Done(); s.wheel.Run(s.ctx) }()
	if cfg := s.cfg.Load(); !cfg.Transparent {
		s.mu.Lock()
		s.pools[0] = newPool(s, cfg.Upstream, 0)
		s.mu.Unlock()
	}
	return nil
}

// Config returns the active proxy configuration (with defaults applied).
func (s *Server) Config() Config { return *s.cfg.Load() }

// Update applies new settings live. Changes of the upstream address or of
// transparent mode are refused: they need a restart.
func (s *Server) Update(cfg Config) error {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	old := s.cfg.Load()
	if cfg.Transparent != old.Transparent {
		return errors.New("listener.transparent cannot change while running: restart the sidecar to switch modes")
	}
	if !cfg.Transparent && cfg.Upstream != old.Upstream {
		return fmt.Errorf("upstream.address cannot change while running (%s -> %s): restart the sidecar, "+
			"or run one sidecar per provider", old.Upstream, cfg.Upstream)
	}
	s.cfg.Store(&cfg)
	s.mu.Lock()
	pools := make([]*Pool, 0, len(s.pools))
	for _, p := range s.pools {
		pools = append(pools, p)
	}
	s.mu.Unlock()
	if cfg.UpstreamConns != old.UpstreamConns {
		for _, p := range pools {
			p.resize(cfg.UpstreamConns)
		}
	}
	if cfg.UpstreamInterval != old.UpstreamInterval || cfg.UpstreamJitter != old.UpstreamJitter {
		for _, p := range pools {
			p.mu.Lock()
			for _, sl := range p.slots {
				if uc := sl.uc.Load(); uc != nil {
					s.wheel.Schedule(&uc.beat, keepalive.Jitter(cfg.UpstreamInterval, cfg.UpstreamJitter, nil))
				}
			}
			p.mu.Unlock()
		}
	}
	if cfg.DownstreamIdleTimeout < old.DownstreamIdleTimeout {
		// Re-arm every idle timer so a shorter timeout applies now, not after the old one.
		now := time.Now().UnixNano()
		s.sessions.each(func(ss *Session) {
			if d := ss.idle.Remaining(now, cfg.DownstreamIdleTimeout); d > 0 {
				s.wheel.Schedule(&ss.timer, d)
			} else {
				s.wheel.Schedule(&ss.timer, time.Millisecond)
			}
		})
	}
	if cfg.ReadonlyPolicy != old.ReadonlyPolicy {
		for _, p := range pools {
			p.onReadonlyChange()
		}
	}
	return nil
}

// ServeFD takes ownership of an accepted, non-blocking consumer socket.
// origDst is the pre-REDIRECT destination in transparent mode (zero otherwise).
// It never blocks for long: it wraps the fd in a netpoll connection and returns.
func (s *Server) ServeFD(fd int, remote, origDst netip.AddrPort) {
	cfg := s.cfg.Load()
	done := func() {
		if s.opts.OnConnClosed != nil {
			s.opts.OnConnClosed()
		}
	}
	if s.draining.Load() || s.closed.Load() {
		_ = unix.Close(fd)
		s.m.downClosed.WithLabelValues(closeDrain).Inc()
		done()
		return
	}
	var pool *Pool
	if cfg.Transparent {
		port := origDst.Port()
		if !cfg.portAllowed(port) {
			_ = unix.Close(fd)
			s.m.downClosed.WithLabelValues(closeNoPort).Inc()
			s.log.Warn("refused a redirected connection for a port outside listener.inbound_ports",
				zap.Stringer("peer", remote), zap.Uint16("port", port))
			done()
			return
		}
		pool = s.poolFor(port)
	} else {
		s.mu.Lock()
		pool = s.pools[0]
		s.mu.Unlock()
	}
	if pool == nil {
		_ = unix.Close(fd)
		done()
		return
	}
	conn, err := netpoll.NewFDConnection(fd)
	if err != nil {
		s.log.Error("cannot register consumer connection with netpoll", zap.Error(err))
		_ = unix.Close(fd)
		done()
		return
	}
	if s.hookServeFD != nil {
		s.hookServeFD(fd)
	}
	sess := &Session{srv: s, pool: pool, conn: conn, fd: fd, remote: remote}
	sess.idle.Touch(time.Now().UnixNano())
	sess.timer.Init(sess.onIdleTimer)
	s.sessions.add(sess)
	s.m.downConns.Inc()
	_ = conn.AddCloseCallback(sess.onClosed)
	_ = conn.SetOnRequest(sess.onRequest)
	s.wheel.Schedule(&sess.timer, cfg.DownstreamIdleTimeout)
	if pool.readonlySent.Load() {
		sess.sendEvent(EventReadonly)
	}
	if !conn.IsActive() {
		_ = sess.onClosed(conn)
	}
}

func (s *Server) poolFor(port uint16) *Pool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.pools[port]; ok {
		return p
	}
	if s.ctx == nil {
		return nil
	}
	p := newPool(s, net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port))), port)
	s.pools[port] = p
	return p
}

// broadcast sends ev to every consumer of pool p (every consumer when p is nil).
func (s *Server) broadcast(p *Pool, ev Event) {
	name := "readonly"
	if ev == EventWriteable {
		name = "writeable"
	}
	n := 0
	s.sessions.each(func(ss *Session) {
		if p == nil || ss.pool == p {
			ss.sendEvent(ev)
			n++
		}
	})
	s.m.readonly.WithLabelValues(name, "sent").Add(float64(n))
	s.log.Info("sent event to consumers", zap.String("event", name), zap.Int("consumers", n))
}

func (s *Server) updateUpstreamGauges() {
	s.mu.Lock()
	pools := make([]*Pool, 0, len(s.pools))
	for _, p := range s.pools {
		pools = append(pools, p)
	}
	s.mu.Unlock()
	ready, ro := 0, 0
	for _, p := range pools {
		r, o := p.connStates()
		ready += r
		ro += o
	}
	s.m.upConns.Set(float64(ready))
	s.m.upState.WithLabelValues("ready").Set(float64(ready))
	s.m.upState.WithLabelValues("readonly").Set(float64(ro))
}

// Ready reports whether the server takes traffic: started, not draining.
func (s *Server) Ready() bool { return s.ctx != nil && !s.draining.Load() && !s.closed.Load() }

// Draining reports whether Drain has started.
func (s *Server) Draining() bool { return s.draining.Load() }

// Drain shuts down gracefully: every consumer gets READONLY (so it stops sending
// here and fails over), requests in flight finish until drain.timeout or ctx ends,
// then every connection closes. The caller stops the listener first.
func (s *Server) Drain(ctx context.Context) error {
	if !s.draining.CompareAndSwap(false, true) {
		return errors.New("proxy: drain already in progress")
	}
	cfg := s.cfg.Load()
	s.log.Info("draining: sending READONLY to every consumer", zap.Int("consumers", s.sessions.len()),
		zap.Duration("timeout", cfg.DrainTimeout))
	s.broadcast(nil, EventReadonly)
	ctx, cancel := context.WithTimeout(ctx, cfg.DrainTimeout)
	defer cancel()
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	var err error
	for s.InFlight() > 0 {
		select {
		case <-ctx.Done():
			err = fmt.Errorf("drain: %d requests still in flight after drain.timeout", s.InFlight())
		case <-t.C:
			continue
		}
		break
	}
	s.log.Info("drain finished; closing connections", zap.Int64("in_flight_left", s.InFlight()))
	s.Close()
	return err
}

// InFlight is the number of requests forwarded or held and not yet answered.
func (s *Server) InFlight() int64 {
	var n int64
	s.sessions.each(func(ss *Session) { n += int64(ss.inflight.Load()) })
	return n
}

// Close closes every connection at once and stops background work.
func (s *Server) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	// Pools first: closing them answers every held and in-flight request with an error
	// while its consumer is still connected (exactly one answer per request, also when
	// a drain times out). Sessions closed first would make those replies no-ops.
	// Found by e2e.TestDrainTimeoutAnswersInFlight.
	s.mu.Lock()
	pools := s.pools
	s.pools = map[uint16]*Pool{}
	s.mu.Unlock()
	for _, p := range pools {
		p.close()
	}
	s.sessions.each(func(ss *Session) { ss.closeWith(closeShutdown) })
	if s.cancel != nil {
		s.cancel()
	}
	s.wg.Wait()
	return nil
}

// sessionSet is a sharded set of live sessions (broadcast, drain, live updates).
type sessionSet struct {
	shards [32]struct {
		mu sync.Mutex
		m  map[*Session]struct{}
	}
	n atomic.Int64
}

func (ss *sessionSet) init() {
	for i := range ss.shards {
		ss.shards[i].m = make(map[*Session]struct{})
	}
}

func (ss *sessionSet) shard(s *Session) int { return s.fd & 31 }

func (ss *sessionSet) add(s *Session) {
	sh := &ss.shards[ss.shard(s)]
	sh.mu.Lock()
	sh.m[s] = struct{}{}
	sh.mu.Unlock()
	ss.n.Add(1)
}

func (ss *sessionSet) remove(s *Session) {
	sh := &ss.shards[ss.shard(s)]
	sh.mu.Lock()
	if _, ok := sh.m[s]; ok {
		delete(sh.m, s)
		ss.n.Add(-1)
	}
	sh.mu.Unlock()
}

func (ss *sessionSet) len() int { return int(ss.n.Load()) }

// each calls f for every session; f runs without the shard lock held.
func (ss *sessionSet) each(f func(*Session)) {
	var buf []*Session
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
