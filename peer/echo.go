package peer

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/stormgate/stormgate/proxy/dubbo"
)

// EchoConfig configures an EchoProvider. The zero value is valid: a provider on
// 127.0.0.1:0 that reads normally.
type EchoConfig struct {
	// Addr is the TCP listen address; "" means "127.0.0.1:0". Restart listens again on
	// the port the first listen got.
	Addr string
	// Seed makes the bad reading reproducible: connection n draws its read sizes and
	// pauses from a generator seeded by (Seed, n). Log it in the test.
	Seed uint64
	// MaxFrame caps header+body of a frame; a larger declared length is a violation.
	// <= 0 means dubbo.DefaultMaxFrame.
	MaxFrame int
	// RecvBuf, if > 0, is set as SO_RCVBUF on the listening socket before listen(2), so
	// accepted connections start with a small receive window (the kernel doubles the
	// value and enforces a minimum of about 2 KiB).
	RecvBuf int
	// MaxSegment, if > 0, is set as TCP_MAXSEG on the listening socket: the MSS the
	// provider advertises, as on a real network path (1460 on Ethernet) rather than
	// loopback's 65,483. With it the sender's kernel send buffer stays small (Linux
	// sizes it from the MSS), so a provider that pauses makes the sender's writes come
	// up short within milliseconds instead of after megabytes.
	MaxSegment int
	// Reading is the initial reading behaviour; SetReading changes it live.
	Reading Reading
	// OnOneWay, if set, is called with the body of every one-way request, after it was
	// checked (violations are recorded either way). The slice is valid only during the
	// call. It is called from the connections' reader goroutines, concurrently.
	OnOneWay func(body []byte)
	// MaxViolations is how many violation details are kept (and logged); the count is
	// always exact. <= 0 means 100.
	MaxViolations int
	// MaxQueued caps the reply bytes queued per connection; past it the reader waits for
	// the writer, as a provider whose peer does not read its answers would. <= 0 means
	// 64 MiB.
	MaxQueued int
	// Kill is how Kill ends the connections; the zero value aborts them.
	Kill KillMode
}

// KillMode is how Kill ends an echo provider's connections.
type KillMode uint8

const (
	// KillAbort resets each connection with SO_LINGER 0: a RST that says nothing of what
	// the provider had read (a proxy can prove nothing unread).
	KillAbort KillMode = iota
	// KillClose closes each connection as the kernel does when a process dies: a RST if
	// bytes were left unread, else a FIN after what was already written.
	KillClose
	// KillAlternate aborts on odd kills (the first) and closes on even ones.
	KillAlternate
)

// closes reports whether kill number n (0 for the first) closes the connections as a dying process's
// kernel does rather than aborting them.
func (m KillMode) closes(n uint64) bool { return m == KillClose || m == KillAlternate && n%2 == 1 }

// ParseKillMode reads "abort", "close" or "alternate".
func ParseKillMode(s string) (KillMode, error) {
	switch s {
	case "abort":
		return KillAbort, nil
	case "close":
		return KillClose, nil
	case "alternate":
		return KillAlternate, nil
	}
	return 0, fmt.Errorf("kill mode %q: want abort, close or alternate", s)
}

// Reading is how an EchoProvider reads its sockets. The zero value reads normally.
type Reading struct {
	// MaxRead, if > 0, limits every read(2) to a random 1..MaxRead bytes (short reads at
	// every position of a frame). <= 0 reads up to 64 KiB at a time.
	MaxRead int
	// PauseChance is the probability of a pause after each read.
	PauseChance float64
	// MaxPause bounds a pause; each lasts a random 0..MaxPause.
	MaxPause time.Duration
}

// Violation is one thing the provider received that a correct proxy never sends.
type Violation struct {
	// Protocol is the half of a UnifiedEcho that recorded it ("dubbo", "triple"; "" for the listener
	// itself and for a provider of one protocol).
	Protocol string `json:"protocol,omitempty"`
	Conn     uint64 `json:"conn"` // the connection's serial number (1, 2, ... over the provider's life)
	Kind     string `json:"kind"` // "malformed frame", "corrupt body", "repeated id", "duplicate key", "unexpected frame"
	ID       int64  `json:"id"`   // the frame's id, when its header could be read
	Detail   string `json:"detail"`
}

func (v Violation) String() string {
	if v.Protocol != "" {
		return fmt.Sprintf("%s conn %d: %s (id %d): %s", v.Protocol, v.Conn, v.Kind, v.ID, v.Detail)
	}
	return fmt.Sprintf("conn %d: %s (id %d): %s", v.Conn, v.Kind, v.ID, v.Detail)
}

// EchoStats is a snapshot of an EchoProvider's counters.
type EchoStats struct {
	ConnsAccepted uint64 `json:"conns_accepted"`
	ConnsOpen     int64  `json:"conns_open"`
	Requests      uint64 `json:"requests"`     // two-way requests, each echoed
	OneWay        uint64 `json:"one_way"`      // one-way requests
	Heartbeats    uint64 `json:"heartbeats"`   // two-way events, each answered as a heartbeat
	Events        uint64 `json:"events"`       // one-way events (not answered)
	ShortBodies   uint64 `json:"short_bodies"` // request bodies under CheckedHeaderLen (length-checked only)
	UniqueKeys    uint64 `json:"unique_keys"`  // distinct full-form body keys seen
	Replies       uint64 `json:"replies"`      // echo replies and heartbeat replies queued
	Reads         uint64 `json:"reads"`
	BytesRead     uint64 `json:"bytes_read"`
	Pauses        uint64 `json:"pauses"`
	Truncated     uint64 `json:"truncated"` // connections the peer closed in the middle of a frame
	Kills         uint64 `json:"kills"`
	Restarts      uint64 `json:"restarts"`
	Violations    uint64 `json:"violations"`
}

// EchoProvider is a Dubbo 2 provider for integrity tests. It treats bodies as raw
// bytes (no hessian): every two-way request is answered with status 20, the request's
// id and serialization id, and exactly the request's body; two-way events get the
// Java heartbeat reply; one-way requests are checked and handed to OnOneWay.
//
// It reads badly on demand (small receive buffer, random short reads, random pauses,
// Stall) and checks everything it reads. A violation is recorded for a bad magic or
// length, a body that fails CheckBody, a request id seen twice on one connection, a
// full-form body key seen twice over the provider's life (a request delivered twice,
// across restarts too), and any response frame (it never sends a request).
//
// Kill closes the listener and resets every connection (SO_LINGER 0: queued replies are
// lost, as when a process is killed); Restart listens again on the same port. Bodies
// and ids seen before a Kill still count for the duplicate checks.
//
// Goroutines: one accept loop while listening, and per connection a reader and a
// writer (the reader owns the writer and waits for it). Kill and Close wait for all of
// them. All methods are safe for concurrent use.
type EchoProvider struct {
	log      *zap.Logger
	cfg      EchoConfig
	addr     string
	maxFrame int
	maxViol  int
	maxQueue int
	reading  atomic.Pointer[Reading]
	stall    atomic.Int64 // unix nanos until which readers do not read

	mu       sync.Mutex // guards ln, conns, closed, connSeq and the accept loop's lifetime
	ln       net.Listener
	conns    map[*echoConn]struct{}
	closed   bool
	connSeq  uint64
	acceptWG sync.WaitGroup
	connWG   sync.WaitGroup

	keysMu sync.Mutex
	keys   sparseSet

	violMu     sync.Mutex
	violations []Violation

	connsAccepted, requests, oneWay, heartbeats, events, short, replies atomic.Uint64
	reads, bytesRead, pauses, truncated, kills, restarts, nviol         atomic.Uint64
	connsOpen                                                           atomic.Int64
}

// StartEcho listens on cfg.Addr and starts accepting. log may be nil.
func StartEcho(cfg EchoConfig, log *zap.Logger) (*EchoProvider, error) {
	p := newEcho(cfg, log)
	ln, err := p.listen()
	if err != nil {
		return nil, err
	}
	p.serve(ln, true)
	return p, nil
}

// newEcho is an EchoProvider with cfg's defaults resolved, not yet serving.
func newEcho(cfg EchoConfig, log *zap.Logger) *EchoProvider {
	if log == nil {
		log = zap.NewNop()
	}
	p := &EchoProvider{log: log, cfg: cfg, conns: make(map[*echoConn]struct{})}
	p.addr = cfg.Addr
	if p.addr == "" {
		p.addr = "127.0.0.1:0"
	}
	p.maxFrame = cfg.MaxFrame
	if p.maxFrame <= 0 {
		p.maxFrame = dubbo.DefaultMaxFrame
	}
	p.maxViol = cfg.MaxViolations
	if p.maxViol <= 0 {
		p.maxViol = 100
	}
	p.maxQueue = cfg.MaxQueued
	if p.maxQueue <= 0 {
		p.maxQueue = 64 << 20
	}
	r := cfg.Reading
	p.reading.Store(&r)
	return p
}

// serve starts serving ln, before the provider is shared: its address is the one a restart
// listens on again. With accept, the provider's own accept loop takes ln's connections; without,
// a UnifiedEcho's does and hands them over (serveConn).
func (p *EchoProvider) serve(ln net.Listener, accept bool) {
	p.addr = ln.Addr().String()
	p.mu.Lock()
	p.serveLocked(ln, accept)
	p.mu.Unlock()
}

// Addr returns the listening address, e.g. "127.0.0.1:43121" (the same after Restart).
func (p *EchoProvider) Addr() string { return p.addr }

// SetReading changes how every connection reads, from its next read on.
func (p *EchoProvider) SetReading(r Reading) { p.reading.Store(&r) }

// Stall stops every connection's reading for d from now (a provider that stalls
// without closing); the connections stay open and replies already queued still go out.
func (p *EchoProvider) Stall(d time.Duration) { p.stall.Store(time.Now().Add(d).UnixNano()) }

func (p *EchoProvider) listen() (net.Listener, error) {
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			if n := p.cfg.RecvBuf; n > 0 {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, n)
			}
			if n := p.cfg.MaxSegment; n > 0 && serr == nil {
				serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_MAXSEG, n)
			}
		}); err != nil {
			return err
		}
		return serr
	}}
	ln, err := lc.Listen(context.Background(), "tcp", p.addr)
	if err != nil {
		return nil, fmt.Errorf("peer: echo provider listen %s: %w", p.addr, err)
	}
	return ln, nil
}

// serveLocked makes ln the listener served, and starts the accept loop on it when accept (see
// serve). The caller holds mu.
func (p *EchoProvider) serveLocked(ln net.Listener, accept bool) {
	p.ln = ln
	if accept {
		p.acceptWG.Go(func() { acceptEach(ln, p.log, "echo provider", func(nc *net.TCPConn) { p.serveConn(ln, nc) }) })
	}
}

// serveConn serves a connection accepted on ln, by the provider's own accept loop or by a
// UnifiedEcho's (which read its first bytes: nc replays them). A connection accepted on a
// listener no longer served (killed while accepting) is reset.
func (p *EchoProvider) serveConn(ln net.Listener, nc tcpConn) {
	p.mu.Lock()
	if p.ln != ln { // killed while accepting
		p.mu.Unlock()
		_ = nc.SetLinger(0)
		_ = nc.Close()
		return
	}
	p.connSeq++
	c := &echoConn{
		p:      p,
		serial: p.connSeq,
		nc:     nc,
		rng:    rand.New(rand.NewPCG(p.cfg.Seed, p.connSeq)),
		done:   make(chan struct{}),
	}
	c.cond = sync.NewCond(&c.mu)
	p.conns[c] = struct{}{}
	p.connWG.Add(1)
	p.mu.Unlock()
	p.connsAccepted.Add(1)
	p.connsOpen.Add(1)
	go c.serve()
}

// Kill closes the listener and resets every connection at once, dropping replies not
// yet written, and waits for every goroutine to end. Connecting fails until Restart.
// Killing a killed provider does nothing.
func (p *EchoProvider) Kill() {
	p.mu.Lock()
	ln := p.ln
	p.ln = nil
	p.mu.Unlock()
	if ln == nil {
		return
	}
	_ = ln.Close()
	p.acceptWG.Wait()
	p.mu.Lock()
	cs := make([]*echoConn, 0, len(p.conns))
	for c := range p.conns {
		cs = append(cs, c)
	}
	p.mu.Unlock()
	closeLike := p.cfg.Kill.closes(p.kills.Load())
	for _, c := range cs {
		c.abort(closeLike)
	}
	p.connWG.Wait()
	p.kills.Add(1)
	p.log.Info("echo provider killed", zap.Int("connections_reset", len(cs)))
}

// Restart listens again on the provider's address after Kill.
func (p *EchoProvider) Restart() error { return p.restart(nil) }

// restart serves again after Kill: a listener of its own on the same address when ln is nil, else
// ln, a UnifiedEcho's, whose accept loop hands connections over.
func (p *EchoProvider) restart(ln net.Listener) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.closed:
		return errors.New("peer: echo provider is closed")
	case p.ln != nil:
		return errors.New("peer: echo provider is already listening")
	}
	accept := ln == nil
	if accept {
		var err error
		if ln, err = p.listen(); err != nil {
			return err
		}
	}
	p.serveLocked(ln, accept)
	p.restarts.Add(1)
	p.log.Info("echo provider restarted", zap.String("addr", p.addr))
	return nil
}

// Close kills the provider for good. It is safe to call more than once.
func (p *EchoProvider) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.Kill()
	return nil
}

// Violations returns the details kept (the first MaxViolations).
func (p *EchoProvider) Violations() []Violation {
	p.violMu.Lock()
	defer p.violMu.Unlock()
	return append([]Violation(nil), p.violations...)
}

// Stats returns a snapshot of the counters.
func (p *EchoProvider) Stats() EchoStats {
	p.keysMu.Lock()
	keys := p.keys.len()
	p.keysMu.Unlock()
	return EchoStats{
		ConnsAccepted: p.connsAccepted.Load(), ConnsOpen: p.connsOpen.Load(),
		Requests: p.requests.Load(), OneWay: p.oneWay.Load(), Heartbeats: p.heartbeats.Load(),
		Events: p.events.Load(), ShortBodies: p.short.Load(), UniqueKeys: uint64(keys),
		Replies: p.replies.Load(), Reads: p.reads.Load(), BytesRead: p.bytesRead.Load(),
		Pauses: p.pauses.Load(), Truncated: p.truncated.Load(), Kills: p.kills.Load(),
		Restarts: p.restarts.Load(), Violations: p.nviol.Load(),
	}
}

func (p *EchoProvider) violate(v Violation) {
	n := p.nviol.Add(1)
	if n > uint64(p.maxViol) {
		return
	}
	p.violMu.Lock()
	p.violations = append(p.violations, v)
	p.violMu.Unlock()
	p.log.Warn("echo provider: violation", zap.Uint64("conn", v.Conn), zap.String("kind", v.Kind),
		zap.Int64("id", v.ID), zap.String("detail", v.Detail))
}

// newKey records a full-form body key and reports whether it was new.
func (p *EchoProvider) newKey(k uint64) bool {
	p.keysMu.Lock()
	defer p.keysMu.Unlock()
	return p.keys.add(k)
}

// echoConn is one accepted connection: serve (the reader) reads and checks frames and
// queues replies; the writer goroutine it starts writes them.
type echoConn struct {
	p      *EchoProvider
	serial uint64
	nc     tcpConn
	rng    *rand.Rand // reader only
	ids    sparseSet  // reader only: request ids seen on this connection
	done   chan struct{}
	once   sync.Once

	mu         sync.Mutex
	cond       *sync.Cond // signals out filling, out draining, and closing
	out, spare []byte
	closed     bool
}

// abort ends the connection for Kill: a reset, or a close as at a process's death.
func (c *echoConn) abort(closeLike bool) {
	c.once.Do(func() { close(c.done) })
	c.stopWriter()
	if !closeLike {
		_ = c.nc.SetLinger(0)
	}
	_ = c.nc.Close()
}

func (c *echoConn) stopWriter() {
	c.mu.Lock()
	c.closed = true
	c.cond.Broadcast()
	c.mu.Unlock()
}

func (c *echoConn) serve() {
	p := c.p
	var writer sync.WaitGroup
	writer.Go(c.writeLoop)
	c.readLoop()
	c.stopWriter()
	_ = c.nc.Close()
	writer.Wait()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	p.connsOpen.Add(-1)
	p.connWG.Done()
}

func (c *echoConn) aborted() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// readLoop reads one frame at a time, header then body, never past the frame, with the
// configured short reads and pauses, until the connection ends or a frame is malformed.
func (c *echoConn) readLoop() {
	p := c.p
	var hdr [dubbo.HeaderLen]byte
	var body []byte
	for {
		if n, err := c.readFull(hdr[:]); err != nil {
			if n > 0 && !c.aborted() {
				p.truncated.Add(1)
			}
			return
		}
		h, err := dubbo.ParseHeader(hdr[:], p.maxFrame)
		if err != nil {
			p.violate(Violation{Conn: c.serial, Kind: "malformed frame", ID: h.ID,
				Detail: fmt.Sprintf("%v; header % x", err, hdr[:])})
			return // the stream cannot be resynchronised
		}
		if cap(body) < int(h.BodyLen) {
			body = make([]byte, h.BodyLen)
		}
		body = body[:h.BodyLen]
		if _, err := c.readFull(body); err != nil {
			if !c.aborted() {
				p.truncated.Add(1)
			}
			return
		}
		if !c.handle(h, hdr[:], body) {
			return
		}
		if cap(body) > 1<<20 {
			body = nil // do not hold a large frame's buffer for the connection's life
		}
	}
}

// readFull fills b with reads shaped by the current Reading.
func (c *echoConn) readFull(b []byte) (int, error) {
	p := c.p
	n := 0
	for n < len(b) {
		if !c.waitStall() {
			return n, net.ErrClosed
		}
		r := p.reading.Load()
		want := min(len(b)-n, 64<<10)
		if r.MaxRead > 0 {
			want = min(want, 1+c.rng.IntN(r.MaxRead))
		}
		m, err := c.nc.Read(b[n : n+want])
		n += m
		p.reads.Add(1)
		p.bytesRead.Add(uint64(m))
		if err != nil {
			return n, err
		}
		if r.PauseChance > 0 && r.MaxPause > 0 && c.rng.Float64() < r.PauseChance {
			p.pauses.Add(1)
			if !c.sleep(time.Duration(c.rng.Int64N(int64(r.MaxPause) + 1))) {
				return n, net.ErrClosed
			}
		}
	}
	return n, nil
}

// waitStall waits out a Stall; false if the connection was aborted meanwhile.
func (c *echoConn) waitStall() bool {
	until := c.p.stall.Load()
	if until == 0 {
		return true
	}
	return c.sleep(time.Until(time.Unix(0, until)))
}

// sleep pauses the reader; false if the connection was aborted meanwhile.
func (c *echoConn) sleep(d time.Duration) bool {
	if d <= 0 {
		return !c.aborted()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.done:
		return false
	}
}

// handle checks one frame and queues its reply; false ends the connection.
func (c *echoConn) handle(h dubbo.Header, hdr, body []byte) bool {
	p := c.p
	kind := h.Kind()
	switch kind {
	case dubbo.KindResponse, dubbo.KindEventResponse:
		p.violate(Violation{Conn: c.serial, Kind: "unexpected frame", ID: h.ID,
			Detail: fmt.Sprintf("a %v frame (status %d, %d body bytes): this provider sends no requests", kind, h.Status, len(body))})
		return true
	}
	if !c.ids.add(uint64(h.ID)) {
		p.violate(Violation{Conn: c.serial, Kind: "repeated id", ID: h.ID,
			Detail: fmt.Sprintf("%v frame reuses an upstream id already seen on this connection", kind)})
	}
	switch kind {
	case dubbo.KindEventTwoWay:
		p.heartbeats.Add(1)
		var b [dubbo.HeaderLen + 1]byte
		return c.queue(dubbo.AppendHeartbeatReply(b[:0], h.ID, h.Serial()), nil)
	case dubbo.KindEventOneWay:
		p.events.Add(1)
		return true
	case dubbo.KindOneWay:
		p.oneWay.Add(1)
		c.checkBody(h, body)
		if p.cfg.OnOneWay != nil {
			p.cfg.OnOneWay(body)
		}
		return true
	default: // two-way request
		p.requests.Add(1)
		c.checkBody(h, body)
		var rh [dubbo.HeaderLen]byte
		dubbo.AppendHeader(rh[:0], dubbo.Header{Flags: h.Serial(), Status: dubbo.StatusOK, ID: h.ID, BodyLen: h.BodyLen})
		return c.queue(rh[:], body)
	}
}

func (c *echoConn) checkBody(h dubbo.Header, body []byte) {
	p := c.p
	key, full, err := CheckBody(body)
	switch {
	case err != nil:
		p.violate(Violation{Conn: c.serial, Kind: "corrupt body", ID: h.ID,
			Detail: fmt.Sprintf("%v body of %d bytes: %v (key field %#x)", h.Kind(), len(body), err, key)})
	case !full:
		p.short.Add(1)
	case !p.newKey(key):
		p.violate(Violation{Conn: c.serial, Kind: "duplicate key", ID: h.ID,
			Detail: fmt.Sprintf("%v body with key %#x (%d bytes) was delivered before", h.Kind(), key, len(body))})
	}
}

// queue appends a reply (a, then b) for the writer; false if the connection is closing.
func (c *echoConn) queue(a, b []byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.out) > c.p.maxQueue && !c.closed {
		c.cond.Wait()
	}
	if c.closed {
		return false
	}
	c.out = append(append(c.out, a...), b...)
	c.p.replies.Add(1)
	c.cond.Broadcast()
	return true
}

// writeLoop writes queued replies in batches until the connection closes.
func (c *echoConn) writeLoop() {
	for {
		c.mu.Lock()
		for len(c.out) == 0 && !c.closed {
			c.cond.Wait()
		}
		if c.closed {
			c.mu.Unlock()
			return
		}
		buf := c.out
		c.out, c.spare = c.spare[:0], nil
		c.cond.Broadcast() // room for a waiting reader
		c.mu.Unlock()
		_, err := c.nc.Write(buf)
		if err != nil {
			c.stopWriter()   // a reader waiting for room gives up
			_ = c.nc.Close() // and its next read fails: the connection ends
			return
		}
		c.mu.Lock()
		if cap(buf) <= 4<<20 {
			c.spare = buf[:0]
		}
		c.mu.Unlock()
	}
}
