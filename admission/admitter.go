package admission

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
	"golang.org/x/time/rate"
)

// Conn is an accepted, admitted connection. FD is a non-blocking, close-on-exec socket that is
// not registered with Go's runtime poller; whoever receives a Conn owns FD and must close it.
type Conn struct {
	FD         int
	Remote     netip.AddrPort // the consumer
	Local      netip.AddrPort // the socket's local address (the proxy port under REDIRECT)
	OrigDst    netip.AddrPort // transparent mode: destination before REDIRECT; else equal to Local
	AcceptedAt time.Time      // when accept(2) returned it
	AdmittedAt time.Time      // when it got its token (or reached MaxWait)
}

// Handler receives admitted connections.
type Handler interface {
	// ServeConn takes ownership of c.FD. It is called from the admission goroutine, one
	// connection at a time, and must not block: hand the fd to an event loop and return.
	ServeConn(c Conn)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(Conn)

// ServeConn calls f(c).
func (f HandlerFunc) ServeConn(c Conn) { f(c) }

// Stats is a snapshot of the admission counters.
type Stats struct {
	Accepted         uint64            // accept(2) successes, admitted or not
	Admitted         uint64            // handed to the Handler
	Pending          int               // accepted, waiting for a token
	Active           int64             // admitted and not yet reported closed by ConnClosed
	Rejected         map[string]uint64 // closed without admission, by reason (every reason present)
	AcceptErrors     uint64            // accept(2) failures that paused the accept loop (EMFILE, ENOBUFS, ...)
	ListenQueue      uint32            // current accept queue length (TCP_INFO)
	ListenQueueLimit uint32            // accept queue limit, the effective backlog (TCP_INFO)
	ListenOverflows  uint64            // TcpExt ListenOverflows since Listen, last sample (namespace-wide)
	ListenDrops      uint64            // TcpExt ListenDrops since Listen, last sample (namespace-wide)
}

// acceptBatch is how many accepted connections the accept loop gathers before taking the
// pending-queue lock; it also flushes whenever the kernel queue is empty.
const acceptBatch = 64

// kernelSampleEvery is how often TcpExt counters are sampled while serving.
const kernelSampleEvery = time.Second

// Admitter owns the listening socket, the accept loop, the pending queue and the admission
// token bucket. Create it with Listen, run it with Serve. See doc.go for the goroutines and
// who owns what.
type Admitter struct {
	log  *zap.Logger
	m    *metrics
	file *os.File        // the listening socket; its fd is the only one in Go's poller
	raw  syscall.RawConn // file's; Read waits for accept readiness, Control reaches the fd
	addr netip.AddrPort  // bound address
	ipv6 bool            // AF_INET6 listener

	reg prometheus.Registerer // where m is registered (Freeze unregisters it)

	set atomic.Pointer[settings]
	lim *rate.Limiter // goroutine-safe; Update retunes it in place so tokens carry over

	updateMu sync.Mutex    // serializes Update
	wake     chan struct{} // cap 1: queue became non-empty, or settings changed

	mu      sync.Mutex
	queue   *pendingQueue
	stopped bool // set by stop under mu: nothing enters the queue afterwards

	active       atomic.Int64
	accepted     atomic.Uint64
	admitted     atomic.Uint64
	rejected     [numReasons]atomic.Uint64
	acceptErrors atomic.Uint64
	overflows    atomic.Uint64
	drops        atomic.Uint64
	kernelMu     sync.Mutex     // guards kernelLast
	kernelLast   ListenCounters // TcpExt counters at the last sample
	kernelOK     bool
	kernelKick   chan struct{}

	serving   atomic.Bool
	stopping  atomic.Bool
	frozen    atomic.Bool   // Freeze ended Serve: the listener and pending fds belong to the Snapshot
	loopsDone chan struct{} // closed when Serve's goroutines have exited (or Serve started none)
	stopCh    chan struct{}
	stopOnce  sync.Once
	closeErr  error
}

// Listen creates the listening socket with the configured backlog and options, logs the
// effective backlog and any kernel or process limit below what cfg needs (with the command
// that fixes it), and registers the admission metrics on reg (nil: not registered).
// Connections queue in the kernel until Serve runs.
func Listen(cfg Config, log *zap.Logger, reg prometheus.Registerer) (*Admitter, error) {
	if log == nil {
		log = zap.NewNop()
	}
	s, err := newSettings(cfg)
	if err != nil {
		return nil, err
	}
	fd, addr, ipv6, err := newListenSocket(s)
	if err != nil {
		return nil, err
	}
	a, err := newAdmitter(fd, addr, ipv6, s, log)
	if err != nil {
		return nil, err
	}
	if err := a.m.register(reg); err != nil {
		a.file.Close()
		return nil, fmt.Errorf("admission: registering metrics: %w", err)
	}
	a.reg = reg
	if base, err := KernelCounters(); err == nil {
		a.kernelLast, a.kernelOK = base, true
	} else {
		log.Warn("admission: TcpExt counters unavailable; listen overflow metrics stay 0", zap.Error(err))
	}
	a.logLimits(s, "listening", true)
	return a, nil
}

// newAdmitter wraps the non-blocking listening socket fd in an Admitter with settings s. A
// non-blocking fd makes os.NewFile register it with the runtime poller, so RawConn.Read parks
// the accept goroutine until the kernel queue is readable. Its metrics are built, not
// registered; on error fd is closed.
func newAdmitter(fd int, addr netip.AddrPort, ipv6 bool, s *settings, log *zap.Logger) (*Admitter, error) {
	file := os.NewFile(uintptr(fd), "stormgate-listener")
	raw, err := file.SyscallConn()
	if err != nil {
		file.Close()
		return nil, fmt.Errorf("admission: %w", err)
	}
	a := &Admitter{
		log:        log,
		file:       file,
		raw:        raw,
		addr:       addr,
		ipv6:       ipv6,
		lim:        rate.NewLimiter(limitOf(s), s.burst),
		wake:       make(chan struct{}, 1),
		queue:      newPendingQueue(s.maxWait),
		stopCh:     make(chan struct{}),
		loopsDone:  make(chan struct{}),
		kernelKick: make(chan struct{}, 1),
	}
	a.set.Store(s)
	a.m = newMetrics(a.listenQueue)
	a.m.all = append(a.m.all, kernelCollector{a}) // overflows and drops, sampled at scrape
	a.m.rateLimit.Set(rateGauge(s))
	a.m.burst.Set(float64(s.burst))
	return a, nil
}

func limitOf(s *settings) rate.Limit {
	if s.unlimited {
		return rate.Inf
	}
	return rate.Limit(s.cfg.AcceptRate)
}

func rateGauge(s *settings) float64 {
	if s.unlimited {
		return 0
	}
	return s.cfg.AcceptRate
}

// logLimits logs the effective backlog and, when warn, a warning per limit below the
// settings' needs.
func (a *Admitter) logLimits(s *settings, msg string, warn bool) {
	k := readKernelLimits()
	_, effective := a.listenQueue()
	a.log.Info("admission: "+msg,
		zap.Stringer("address", a.addr),
		zap.Int("backlog", s.backlog),
		zap.Uint32("effective_backlog", effective),
		zap.Int64("somaxconn", k.somaxconn),
		zap.Int64("tcp_max_syn_backlog", k.maxSynBacklog),
		zap.Uint64("nofile", k.nofileCur),
		zap.Float64("accept_rate", rateGauge(s)),
		zap.Int("accept_burst", s.burst),
		zap.Duration("max_wait", s.maxWait),
		zap.Int("max_connections", s.maxConnections),
		zap.Int("max_pending", s.maxPending),
		zap.Bool("per_source_fairness", s.cfg.PerSourceFairness),
	)
	if !warn {
		return
	}
	for _, w := range checkLimits(s, k) {
		a.log.Warn("admission: "+w.msg, zap.String("fix", w.fix))
	}
}

// Addr returns the bound address (with the real port when Address asked for port 0).
func (a *Admitter) Addr() net.Addr { return net.TCPAddrFromAddrPort(a.addr) }

// listenQueue reads the accept queue length and limit; zeros once the listener is closed.
func (a *Admitter) listenQueue() (length, limit uint32) {
	_ = a.raw.Control(func(fd uintptr) {
		length, limit, _ = listenQueue(int(fd))
	})
	return length, limit
}

// Serve runs the accept loop, the admission loop and the kernel counter sampler until ctx is
// done, StopAccepting, Close or Freeze is called, or accepting fails for good. It always
// returns a non-nil error: net.ErrClosed after StopAccepting/Close, ErrFrozen after Freeze (the
// listener stays open), ctx.Err() when ctx ended it (the listener is then closed as by
// StopAccepting), or the accept error. It returns after its goroutines have exited. Serve may
// be called once.
func (a *Admitter) Serve(ctx context.Context, h Handler) error {
	if h == nil {
		return errors.New("admission: nil Handler")
	}
	if !a.serving.CompareAndSwap(false, true) {
		return errors.New("admission: Serve called twice")
	}
	defer close(a.loopsDone)
	if a.frozen.Load() {
		return ErrFrozen
	}
	if a.stopping.Load() {
		return net.ErrClosed
	}
	acceptDone := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Go(func() { acceptDone <- a.acceptLoop() })
	wg.Go(func() { a.admitLoop(h) })
	wg.Go(a.sampleKernel)

	var err error
	select {
	case <-ctx.Done():
		err = ctx.Err()
	case <-a.stopCh:
		err = net.ErrClosed
	case err = <-acceptDone:
		if a.stopping.Load() {
			err = net.ErrClosed
		} else {
			a.log.Error("admission: accept loop failed", zap.Error(err))
		}
	}
	a.stop() // a no-op after Freeze, which owns the stop
	wg.Wait()
	if a.frozen.Load() {
		return ErrFrozen
	}
	return err
}

// acceptLoop drains the kernel accept queue with accept4 until EAGAIN, then parks in the
// runtime poller until the listener is readable again.
func (a *Admitter) acceptLoop() error {
	batch := make([]Conn, 0, acceptBatch)
	rejects := make([]int, 0, acceptBatch)
	var backoff time.Duration
	var lastLog time.Time
	for {
		var loopErr error
		err := a.raw.Read(func(fd uintptr) bool {
			for {
				if a.stopping.Load() {
					a.flush(&batch, &rejects)
					loopErr = net.ErrClosed
					return true
				}
				nfd, sa, err := unix.Accept4(int(fd), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
				if err != nil {
					if err == unix.EAGAIN {
						a.flush(&batch, &rejects)
						return false // wait for readiness
					}
					if acceptErrRetry(err) {
						continue
					}
					a.flush(&batch, &rejects)
					loopErr = err
					return true
				}
				backoff = 0
				if c, ok := a.newConn(nfd, sa); ok {
					batch = append(batch, c)
					if len(batch) == cap(batch) {
						a.flush(&batch, &rejects)
					}
				}
			}
		})
		if a.stopping.Load() {
			return net.ErrClosed
		}
		if err != nil {
			return fmt.Errorf("admission: accept: %w", err)
		}
		if !acceptErrTemporary(loopErr) {
			return fmt.Errorf("admission: accept: %w", loopErr)
		}
		// Out of fds or kernel memory: handshakes wait in the kernel queue meanwhile.
		a.acceptErrors.Add(1)
		backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
		if now := time.Now(); now.Sub(lastLog) >= 10*time.Second {
			lastLog = now
			a.log.Warn("admission: accept failing, backing off", zap.Error(loopErr), zap.Duration("backoff", backoff),
				zap.Int64("active", a.active.Load()))
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-a.stopCh:
			t.Stop()
			return net.ErrClosed
		}
	}
}

// newConn describes a freshly accepted fd, or closes it when transparent mode does not
// allow its original port.
func (a *Admitter) newConn(fd int, sa unix.Sockaddr) (Conn, bool) {
	now := time.Now()
	a.accepted.Add(1)
	a.m.accepted.Inc()
	c := Conn{FD: fd, Remote: fromSockaddr(sa), Local: a.addr, AcceptedAt: now}
	if a.addr.Addr().IsUnspecified() {
		if lsa, err := unix.Getsockname(fd); err == nil {
			c.Local = fromSockaddr(lsa)
		}
	}
	c.OrigDst = c.Local
	s := a.set.Load()
	if s.cfg.Transparent {
		if od, ok := originalDst(fd, a.ipv6); ok {
			c.OrigDst = od
		}
		if !s.portAllowed(c.OrigDst.Port()) {
			a.reject(rPortNotAllowed)
			closeWithFIN(fd)
			return Conn{}, false
		}
	}
	return c, true
}

// flush moves a batch of accepted connections into the pending queue, closing (with a FIN)
// those over a cap.
func (a *Admitter) flush(batch *[]Conn, rejects *[]int) {
	if len(*batch) == 0 {
		return
	}
	a.kickKernelSample() // connections are arriving: watch the kernel's drop counters
	s := a.set.Load()
	var counts [numReasons]int
	a.mu.Lock()
	wasEmpty := a.queue.len() == 0
	for _, c := range *batch {
		var r reason = -1
		switch {
		case a.stopped:
			r = rShutdown
		case s.maxConnections > 0 && a.active.Load()+int64(a.queue.len()) >= int64(s.maxConnections):
			r = rMaxConnections
		case a.queue.len() >= s.maxPending:
			r = rMaxPending
		}
		if r >= 0 {
			counts[r]++
			*rejects = append(*rejects, c.FD)
			continue
		}
		a.queue.push(c)
	}
	n := a.queue.len()
	a.m.pending.Set(float64(n))
	a.mu.Unlock()

	clear(*batch)
	*batch = (*batch)[:0]
	// Count before closing: whoever sees the FIN must also see the counter.
	for r, k := range counts {
		if k > 0 {
			a.rejected[r].Add(uint64(k))
			a.m.rejected[r].Add(float64(k))
		}
	}
	for _, fd := range *rejects {
		closeWithFIN(fd)
	}
	*rejects = (*rejects)[:0]
	if wasEmpty && n > 0 {
		a.signal()
	}
}

func (a *Admitter) reject(r reason) {
	a.rejected[r].Add(1)
	a.m.rejected[r].Inc()
}

func (a *Admitter) signal() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// admitLoop takes pending connections in accept order (or round-robin across sources), one
// token each. When the tokens cannot admit everything pending before it has waited MaxWait,
// it admits at the lowest even rate that can (deadline pacing), so that a storm larger than
// AcceptRate × MaxWait is spread over the window instead of piling up at its end; and a
// connection that has reached MaxWait anyway is admitted at once.
func (a *Admitter) admitLoop(h Handler) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var lastAdmit time.Time // of the previous admission; virtual (on schedule) under deadline pacing
	for {
		a.mu.Lock()
		if a.stopped {
			a.mu.Unlock()
			return
		}
		oldest := a.queue.oldest()
		if oldest == nil {
			a.mu.Unlock()
			select {
			case <-a.wake:
			case <-a.stopCh:
				return
			}
			continue
		}
		s := a.set.Load()
		now := time.Now()
		deadline := oldest.conn.AcceptedAt.Add(s.maxWait)
		var c Conn
		var wait time.Duration
		admit := true
		need := a.deadlineRate(s, now)
		due := lastAdmit.Add(time.Duration(float64(time.Second) / max(need, 1e-9)))
		switch {
		case !now.Before(deadline):
			// Overdue: admit now; take a token if there is one, never go into debt.
			c, _ = a.queue.popOldest()
			a.lim.AllowN(now, 1)
			lastAdmit = now
		case s.unlimited || a.lim.AllowN(now, 1):
			c = a.popNext(s)
			lastAdmit = now
		case need > 0 && !now.Before(due):
			// Deadline pacing: the tokens alone would leave someone past MaxWait. Stay on
			// the even schedule, catching up at most a few ms after a late wake-up.
			c = a.popNext(s)
			lastAdmit = later(due, now.Add(-2*time.Millisecond))
		default:
			admit = false
			// Arrivals do not wake this loop (only an empty queue's first one does), and they
			// raise the deadline rate: look again at least once per age bucket.
			wait = min(deadline.Sub(now), a.tokenWait(now), bucketWidth(s.maxWait))
			if need > 0 {
				wait = min(wait, due.Sub(now))
			}
		}
		if !admit {
			a.mu.Unlock()
			timer.Reset(max(wait, time.Microsecond))
			select {
			case <-timer.C:
			case <-a.wake: // settings changed (or a stale signal): recompute
				timer.Stop()
			case <-a.stopCh:
				timer.Stop()
				return
			}
			continue
		}
		a.active.Add(1)
		a.m.pending.Set(float64(a.queue.len()))
		a.mu.Unlock()

		c.AdmittedAt = now
		if s.cfg.TCPQuickAck {
			_ = unix.SetsockoptInt(c.FD, unix.IPPROTO_TCP, unix.TCP_QUICKACK, 1)
		}
		a.admitted.Add(1)
		a.m.admitted.Inc()
		a.m.wait.Observe(now.Sub(c.AcceptedAt).Seconds())
		h.ServeConn(c)
	}
}

// deadlineRate is the admission rate needed to admit everything pending within MaxWait when
// the token bucket's rate is below it, else 0. Called with mu held.
func (a *Admitter) deadlineRate(s *settings, now time.Time) float64 {
	if s.unlimited {
		return 0
	}
	need := a.queue.deadlineRate(now, s.maxWait)
	if need <= s.cfg.AcceptRate {
		return 0
	}
	// Tokens in the bucket will be spent too; if they cover the queue, no pacing needed.
	if a.lim.TokensAt(now) >= float64(a.queue.len()) {
		return 0
	}
	return need
}

// popNext pops by the configured policy. Called with mu held and the queue non-empty.
func (a *Admitter) popNext(s *settings) Conn {
	if s.cfg.PerSourceFairness {
		c, _ := a.queue.popFair()
		return c
	}
	c, _ := a.queue.popOldest()
	return c
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// tokenWait is how long until the bucket holds one token.
func (a *Admitter) tokenWait(now time.Time) time.Duration {
	lim := a.lim.Limit()
	if lim <= 0 {
		return time.Hour // unreachable with settings; MaxWait bounds the wait anyway
	}
	need := 1 - a.lim.TokensAt(now)
	if need <= 0 {
		return 0
	}
	return time.Duration(need/float64(lim)*float64(time.Second)) + time.Microsecond
}

// sampleKernel adds the TcpExt ListenOverflows/ListenDrops deltas to the metrics while
// connections arrive (at most once a second, woken by the accept loop) and once more at
// stop; a scrape samples too (kernelCollector). An idle listener costs no wake-up.
func (a *Admitter) sampleKernel() {
	if !a.kernelOK {
		<-a.stopCh
		return
	}
	for {
		select {
		case <-a.kernelKick:
		case <-a.stopCh:
			a.sampleKernelNow()
			return
		}
		a.sampleKernelNow()
		t := time.NewTimer(kernelSampleEvery)
		select {
		case <-t.C:
		case <-a.stopCh:
			t.Stop()
			a.sampleKernelNow()
			return
		}
	}
}

// sampleKernelNow reads the counters and adds what changed since the last read.
func (a *Admitter) sampleKernelNow() {
	if !a.kernelOK {
		return
	}
	a.kernelMu.Lock()
	defer a.kernelMu.Unlock()
	cur, err := KernelCounters()
	if err != nil {
		return
	}
	d := cur.Sub(a.kernelLast)
	a.kernelLast = cur
	if d.ListenOverflows > 0 || d.ListenDrops > 0 {
		a.m.overflows.Add(float64(d.ListenOverflows))
		a.m.drops.Add(float64(d.ListenDrops))
		a.overflows.Add(d.ListenOverflows)
		a.drops.Add(d.ListenDrops)
		ql, qlim := a.listenQueue()
		a.log.Warn("admission: kernel dropped handshakes (network-namespace-wide counters)",
			zap.Uint64("listen_overflows", d.ListenOverflows), zap.Uint64("listen_drops", d.ListenDrops),
			zap.Uint32("queue", ql), zap.Uint32("queue_limit", qlim))
	}
}

// kickKernelSample wakes the sampler: connections are arriving.
func (a *Admitter) kickKernelSample() {
	select {
	case a.kernelKick <- struct{}{}:
	default:
	}
}

// kernelCollector samples the kernel counters before they are scraped.
type kernelCollector struct {
	a *Admitter
}

func (k kernelCollector) Describe(ch chan<- *prometheus.Desc) {
	k.a.m.overflows.Describe(ch)
	k.a.m.drops.Describe(ch)
}

func (k kernelCollector) Collect(ch chan<- prometheus.Metric) {
	k.a.sampleKernelNow()
	k.a.m.overflows.Collect(ch)
	k.a.m.drops.Collect(ch)
}

// Update applies new settings live. The backlog is changed by calling listen(2) again on the
// same socket; listener options apply to connections accepted afterwards; rate, burst, caps,
// MaxWait and fairness apply at once (tokens in the bucket carry over). Lowering
// MaxConnections below the active count closes nothing: new connections are refused until
// it drops. Address and Transparent cannot change: Update refuses them with an error that
// names the field, and changes nothing.
func (a *Admitter) Update(cfg Config) error {
	ns, err := newSettings(cfg)
	if err != nil {
		return err
	}
	a.updateMu.Lock()
	defer a.updateMu.Unlock()
	old := a.set.Load()
	if err := a.fixed(old, ns); err != nil {
		return err
	}
	var opErr error
	if err := a.raw.Control(func(fd uintptr) {
		if ns.backlog != old.backlog {
			if err := unix.Listen(int(fd), ns.backlog); err != nil {
				opErr = fmt.Errorf("admission: listen(backlog %d): %w", ns.backlog, err)
				return
			}
		}
		if err := applyListenerOptions(int(fd), ns); err != nil {
			opErr = fmt.Errorf("admission: %w", err)
			// All or nothing (issue 10 item 6): the push is refused, so the socket keeps
			// what runs (old backlog and options), not the half of the new ones that took.
			_ = applyListenerOptions(int(fd), old)
			if ns.backlog != old.backlog {
				_ = unix.Listen(int(fd), old.backlog)
			}
		}
	}); err != nil {
		return fmt.Errorf("admission: listener: %w", net.ErrClosed)
	}
	if opErr != nil {
		return opErr
	}
	a.set.Store(ns)
	if ns.maxWait != old.maxWait {
		a.mu.Lock()
		a.queue.setMaxWait(ns.maxWait)
		a.mu.Unlock()
	}
	now := time.Now()
	a.lim.SetBurstAt(now, ns.burst)
	a.lim.SetLimitAt(now, limitOf(ns))
	a.m.rateLimit.Set(rateGauge(ns))
	a.m.burst.Set(float64(ns.burst))
	a.signal()
	// Warn again only when what the limits are compared with changed (pushes can be frequent).
	a.logLimits(ns, "settings updated", ns.backlog != old.backlog || ns.maxConnections != old.maxConnections ||
		ns.cfg.TCPFastOpen != old.cfg.TCPFastOpen)
	return nil
}

// ConnClosed tells the admitter that one admitted connection has closed; the proxy calls it
// exactly once per Conn it received. It keeps MaxConnections accounting right.
func (a *Admitter) ConnClosed() {
	if a.active.Add(-1) < 0 {
		a.active.Add(1)
		a.log.DPanic("admission: ConnClosed called more often than connections were admitted")
	}
}

// StopAccepting starts a graceful drain: the listener is closed, connections still pending
// are closed with a FIN (reason "shutdown"), admitted connections are left to their owner.
// Serve then returns net.ErrClosed. Safe to call more than once and concurrently.
func (a *Admitter) StopAccepting() { a.stop() }

// Close is StopAccepting, returning the error of closing the listening socket (nil on later
// calls). Admitted connections are not closed: they belong to the Handler.
func (a *Admitter) Close() error {
	first := false
	a.stopOnce.Do(func() { first = true; a.doStop() })
	if first {
		return a.closeErr
	}
	return nil
}

func (a *Admitter) stop() { a.stopOnce.Do(a.doStop) }

// sweepMax bounds the final accept sweep while stopping (a storm could refill the queue).
const sweepMax = 1 << 16

func (a *Admitter) doStop() {
	a.stopping.Store(true)
	close(a.stopCh)
	// Handshakes that completed but were not accepted yet would get a RST when the listener
	// closes; accept them and close with a FIN instead.
	_ = a.raw.Control(func(fd uintptr) {
		for range sweepMax {
			nfd, _, err := unix.Accept4(int(fd), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
			if err != nil {
				if acceptErrRetry(err) {
					continue
				}
				return
			}
			a.accepted.Add(1)
			a.m.accepted.Inc()
			a.reject(rShutdown)
			closeWithFIN(nfd)
		}
	})
	// Blocks until the accept loop's current batch is done (it sees stopping and returns).
	a.closeErr = a.file.Close()

	pending := a.takePending()
	for _, c := range pending {
		a.reject(rShutdown)
		closeWithFIN(c.FD)
	}
	a.log.Info("admission: stopped accepting", zap.Int("pending_closed", len(pending)),
		zap.Int64("active", a.active.Load()))
}

// takePending closes the queue (nothing enters it afterwards) and returns what it held, in
// accept order.
func (a *Admitter) takePending() []Conn {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stopped = true
	a.m.pending.Set(0)
	return a.queue.takeAll()
}

// Stats returns a snapshot of the counters.
func (a *Admitter) Stats() Stats {
	a.mu.Lock()
	pending := a.queue.len()
	a.mu.Unlock()
	ql, qlim := a.listenQueue()
	st := Stats{
		Accepted:         a.accepted.Load(),
		Admitted:         a.admitted.Load(),
		Pending:          pending,
		Active:           a.active.Load(),
		Rejected:         make(map[string]uint64, numReasons),
		AcceptErrors:     a.acceptErrors.Load(),
		ListenQueue:      ql,
		ListenQueueLimit: qlim,
		ListenOverflows:  a.overflows.Load(),
		ListenDrops:      a.drops.Load(),
	}
	for r := range numReasons {
		st.Rejected[r.String()] = a.rejected[r].Load()
	}
	return st
}

// Check reports whether Update would accept cfg (its values and the fields that
// cannot change live), changing nothing. Update can still fail afterwards only if
// the kernel refuses the new listener options.
func (a *Admitter) Check(cfg Config) error {
	ns, err := newSettings(cfg)
	if err != nil {
		return err
	}
	return a.fixed(a.set.Load(), ns)
}

// fixed refuses a change of what cannot change live.
func (a *Admitter) fixed(old, ns *settings) error {
	if ns.addr != old.addr && ns.addr != a.addr {
		return fmt.Errorf("admission: Address cannot change live (listening on %s, asked for %s)", a.addr, ns.cfg.Address)
	}
	if ns.cfg.Transparent != old.cfg.Transparent {
		return fmt.Errorf("admission: Transparent cannot change live (is %t)", old.cfg.Transparent)
	}
	return nil
}
