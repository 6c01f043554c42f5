package peer

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/stormgate/stormgate/proxy/h2"
)

// TripleConfig configures a TripleEcho. The zero value is valid: h2c on 127.0.0.1:0 with the h2
// package's defaults.
type TripleConfig struct {
	// Addr is the TCP listen address; "" means "127.0.0.1:0".
	Addr string
	// MaxConcurrentStreams is the SETTINGS_MAX_CONCURRENT_STREAMS the provider announces (0: 100). A
	// stream beyond it is refused (RST_STREAM REFUSED_STREAM) and, once the peer has acknowledged the
	// limit, recorded as a violation.
	MaxConcurrentStreams uint32
	// InitialWindowSize is the provider's stream receive window (0: 65,535).
	InitialWindowSize uint32
	// MaxMessage bounds one request message, prefix included (0: MaxCheckedBody plus 1 KiB); a larger
	// one is a violation and its stream is reset.
	MaxMessage int
	// Delay holds every answer this long after its request ended (0: answer at once), so that streams
	// stay open and a client's respect of MaxConcurrentStreams shows.
	Delay time.Duration
	// Tamper, if set, turns answer n (1, 2, ... over the provider's life) into what it returns (a test
	// of the consumer's checks: a provider that answers a wrong body). msg is the answer it would send,
	// prefix included (the request's message, or what TripleAnswerSizeHeader asked for); Tamper must
	// not keep it.
	Tamper func(n uint64, msg []byte) []byte
	// MaxViolations is how many violation details are kept; the count is always exact. <= 0: 100.
	MaxViolations int
	// Kill is how Kill ends the connections (KillAbort, the zero value: a RST that proves nothing about
	// what was read; KillClose: as a dying process's kernel closes them; KillAlternate).
	Kill KillMode
}

// TripleStats is a snapshot of a TripleEcho's counters.
type TripleStats struct {
	ConnsAccepted  uint64 `json:"conns_accepted"`
	ConnsOpen      int64  `json:"conns_open"`
	Requests       uint64 `json:"requests"`        // unary calls answered (grpc-status 0, the request's message)
	Checked        uint64 `json:"checked"`         // of them, messages carrying a checked body (checked and key recorded)
	UniqueKeys     uint64 `json:"unique_keys"`     // distinct checked-body keys seen
	Pings          uint64 `json:"pings"`           // PINGs received (each answered), whoever sent them
	LoadPings      uint64 `json:"load_pings"`      // of them, PINGs a load consumer sent (LoadPing): 0 behind Stormgate
	ResetsReceived uint64 `json:"resets_received"` // RST_STREAMs received
	Restarts       uint64 `json:"restarts"`
	MaxOpenStreams int    `json:"max_open_streams"`
	Violations     uint64 `json:"violations"`
}

// TripleAnswerSizeHeader asks a TripleEcho for an answer of its value's bytes instead of the echo: a
// call whose message is a full checked body and that carries it is answered with the checked body of
// that key and size (CheckedHeaderLen..MaxCheckedBody), as the gRPC interop service's response_size
// does. A small request for a large answer is how a consumer that never reads makes its proxy hold
// answers: it cannot send more than its first flow-control windows.
const TripleAnswerSizeHeader = "stormbench-answer-size"

// TripleEcho is a Triple (gRPC over h2c) provider for integrity tests, the Triple counterpart of
// EchoProvider: every unary call is answered with :status 200, the request's content-type, exactly the
// request's message (or what TripleAnswerSizeHeader asks for) and grpc-status 0. It runs proxy/h2's Conn in the server role, so every frame is
// checked by the same codec Stormgate uses, and records as a violation what a correct client or proxy
// never sends: a connection error of the codec (a malformed frame, a window exceeded, a stream id going
// backwards), a stream beyond its MAX_CONCURRENT_STREAMS after the client acknowledged it, a request that
// is not a POST to /service/method with a gRPC content-type, a message whose prefix or TripleRequestWrapper
// is broken, a checked body that fails its own check, and a checked-body key seen twice over the
// provider's life (a call delivered twice). It counts every PING it receives and, apart, those carrying
// a load consumer's mark (LoadPing): behind Stormgate that count must stay 0.
//
// Kill closes the listener and ends every connection, as a provider process that dies; Restart listens
// again on the same address. Keys seen before a Kill still count: a call delivered before and after a
// restart is a violation too.
//
// Goroutines: one accept loop while listening, one reader per connection, and one timer callback per
// delayed answer; Kill waits for the first two, Close for all of them. All methods are safe for
// concurrent use.
type TripleEcho struct {
	log      *zap.Logger
	cfg      TripleConfig
	addr     string // the address listened on, the same after a Restart
	maxViol  int
	acceptWG sync.WaitGroup
	connWG   sync.WaitGroup
	timerWG  sync.WaitGroup

	mu       sync.Mutex   // guards ln, conns and closed
	ln       net.Listener // nil while killed
	conns    map[*tripleConn]struct{}
	closed   bool
	kills    atomic.Uint64
	restarts atomic.Uint64

	keysMu sync.Mutex
	keys   sparseSet

	violMu     sync.Mutex
	violations []Violation

	connsAccepted, requests, checked, pings, loadPings, resets, nviol atomic.Uint64
	connsOpen                                                         atomic.Int64
	maxOpen                                                           atomic.Int64
	answers                                                           atomic.Uint64
	connSeq                                                           atomic.Uint64
}

// StartTripleEcho listens on cfg.Addr and starts accepting. log may be nil.
func StartTripleEcho(cfg TripleConfig, log *zap.Logger) (*TripleEcho, error) {
	p := newTripleEcho(cfg, log)
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return nil, fmt.Errorf("peer: triple echo listen %s: %w", p.addr, err)
	}
	p.serve(ln, true)
	return p, nil
}

// newTripleEcho is a TripleEcho with cfg's defaults resolved, not yet serving.
func newTripleEcho(cfg TripleConfig, log *zap.Logger) *TripleEcho {
	if log == nil {
		log = zap.NewNop()
	}
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	if cfg.MaxMessage <= 0 {
		cfg.MaxMessage = MaxCheckedBody + 1024
	}
	p := &TripleEcho{log: log, cfg: cfg, addr: cfg.Addr, maxViol: cfg.MaxViolations, conns: make(map[*tripleConn]struct{})}
	if p.maxViol <= 0 {
		p.maxViol = 100
	}
	return p
}

// serve starts serving ln, before the provider is shared: its address is the one a restart
// listens on again. With accept, the provider's own accept loop takes ln's connections; without,
// a UnifiedEcho's does and hands them over (serveConn).
func (p *TripleEcho) serve(ln net.Listener, accept bool) {
	p.addr = ln.Addr().String()
	p.mu.Lock()
	p.serveLocked(ln, accept)
	p.mu.Unlock()
}

// Addr returns the listening address (the same after a Restart).
func (p *TripleEcho) Addr() string { return p.addr }

// serveLocked makes ln the listener served, and starts the accept loop on it when accept (see
// serve). The caller holds mu.
func (p *TripleEcho) serveLocked(ln net.Listener, accept bool) {
	p.ln = ln
	if accept {
		p.acceptWG.Go(func() {
			acceptEach(ln, p.log, "triple echo provider", func(nc *net.TCPConn) { p.serveConn(ln, nc) })
		})
	}
}

// Kill closes the listener and ends every connection at once (Config.Kill says how), dropping what was
// not written yet, and waits for the accept loop and the connections' readers. Connecting fails until
// Restart; killing a killed provider does nothing.
func (p *TripleEcho) Kill() {
	p.mu.Lock()
	ln := p.ln
	p.ln = nil
	p.mu.Unlock()
	if ln == nil {
		return
	}
	_ = ln.Close()
	p.acceptWG.Wait()
	closeLike := p.cfg.Kill.closes(p.kills.Load())
	p.mu.Lock()
	cs := make([]*tripleConn, 0, len(p.conns))
	for c := range p.conns {
		cs = append(cs, c)
	}
	p.mu.Unlock()
	for _, c := range cs {
		c.abort(closeLike)
	}
	p.connWG.Wait()
	p.kills.Add(1)
	p.log.Info("triple echo provider killed")
}

// Restart listens again on the provider's address after Kill.
func (p *TripleEcho) Restart() error { return p.restart(nil) }

// restart serves again after Kill: a listener of its own on the same address when ln is nil, else
// ln, a UnifiedEcho's, whose accept loop hands connections over.
func (p *TripleEcho) restart(ln net.Listener) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.closed:
		return errors.New("peer: triple echo provider is closed")
	case p.ln != nil:
		return errors.New("peer: triple echo provider is already listening")
	}
	accept := ln == nil
	if accept {
		var err error
		if ln, err = net.Listen("tcp", p.addr); err != nil {
			return fmt.Errorf("peer: triple echo listen %s again: %w", p.addr, err)
		}
	}
	p.serveLocked(ln, accept)
	p.restarts.Add(1)
	return nil
}

// Stats returns the counters.
func (p *TripleEcho) Stats() TripleStats {
	p.keysMu.Lock()
	keys := p.keys.len()
	p.keysMu.Unlock()
	return TripleStats{
		ConnsAccepted: p.connsAccepted.Load(), ConnsOpen: p.connsOpen.Load(),
		Requests: p.requests.Load(), Checked: p.checked.Load(), UniqueKeys: uint64(keys),
		Pings: p.pings.Load(), LoadPings: p.loadPings.Load(), ResetsReceived: p.resets.Load(),
		MaxOpenStreams: int(p.maxOpen.Load()), Violations: p.nviol.Load(), Restarts: p.restarts.Load(),
	}
}

// Violations returns the recorded violations (at most MaxViolations).
func (p *TripleEcho) Violations() []Violation {
	p.violMu.Lock()
	defer p.violMu.Unlock()
	return append([]Violation(nil), p.violations...)
}

// Close stops listening, closes every connection and waits for every goroutine. It is idempotent.
func (p *TripleEcho) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	ln := p.ln
	p.ln = nil
	if ln != nil {
		_ = ln.Close()
	}
	for c := range p.conns {
		_ = c.nc.Close()
	}
	p.mu.Unlock()
	p.acceptWG.Wait()
	p.connWG.Wait()
	p.timerWG.Wait()
	return nil
}

func (p *TripleEcho) violation(conn uint64, kind string, id uint32, detail string) {
	if p.nviol.Add(1) > uint64(p.maxViol) {
		return
	}
	v := Violation{Conn: conn, Kind: kind, ID: int64(id), Detail: detail}
	p.log.Warn("triple echo provider: integrity violation", zap.Stringer("violation", v))
	p.violMu.Lock()
	p.violations = append(p.violations, v)
	p.violMu.Unlock()
}

// serveConn serves a connection accepted on ln, by the provider's own accept loop or by a
// UnifiedEcho's (which read its first bytes: nc replays them). A connection accepted on a listener
// no longer served (killed or closed while accepting) is closed.
func (p *TripleEcho) serveConn(ln net.Listener, nc tcpConn) {
	c := &tripleConn{p: p, serial: p.connSeq.Add(1), nc: nc, streams: make(map[uint32]*tripleStream)}
	c.conn = h2.NewConn(h2.Config{
		MaxConcurrentStreams: p.cfg.MaxConcurrentStreams,
		InitialWindowSize:    p.cfg.InitialWindowSize,
	})
	p.mu.Lock()
	if p.ln != ln { // killed or closed while accepting
		p.mu.Unlock()
		_ = nc.Close()
		return
	}
	p.conns[c] = struct{}{}
	p.connWG.Add(1)
	p.mu.Unlock()
	p.connsAccepted.Add(1)
	p.connsOpen.Add(1)
	go c.serve()
}

// tripleConn is one connection: the reader goroutine and the delayed answers share it under mu.
type tripleConn struct {
	p      *TripleEcho
	serial uint64
	nc     tcpConn

	mu      sync.Mutex
	conn    *h2.Conn
	streams map[uint32]*tripleStream
	out     []byte
	dead    bool
	guards  uint64 // too-many-streams trips already recorded
}

type tripleStream struct {
	ctype   string
	in      []byte // the request message so far
	size    int    // TripleAnswerSizeHeader's value, or 0
	reply   []byte // the answer's message when it is not the request's (size)
	pending []byte // the answer's message not yet sent (flow control)
	sentHdr bool
	bad     bool // a violation was recorded; the stream is reset, not answered
}

func (c *tripleConn) serve() {
	p := c.p
	defer func() {
		_ = c.nc.Close()
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
		p.connsOpen.Add(-1)
		p.connWG.Done()
	}()
	c.mu.Lock()
	err := c.flushLocked()
	c.mu.Unlock()
	if err != nil {
		return
	}
	buf := make([]byte, 64<<10)
	w := 0
	for {
		n, rerr := c.nc.Read(buf[w:])
		w += n
		c.mu.Lock()
		rd, ok := c.readLocked(buf[:w])
		ferr := c.flushLocked()
		if !ok || ferr != nil {
			c.dead = true
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		w = copy(buf, buf[rd:w])
		if w == len(buf) { // a frame larger than the buffer: the Conn caps frames at 16 KiB, so never
			return
		}
		if rerr != nil {
			c.mu.Lock()
			c.dead = true
			c.mu.Unlock()
			return
		}
	}
}

// abort ends the connection for Kill: its reader sees the socket closed, and no delayed answer writes
// any more. closeLike closes as a dying process's kernel does; else SO_LINGER 0 sends a RST at once.
func (c *tripleConn) abort(closeLike bool) {
	if !closeLike {
		_ = c.nc.SetLinger(0)
	}
	_ = c.nc.Close() // first: a write blocked under mu returns
	c.mu.Lock()
	c.dead = true
	c.mu.Unlock()
}

// readLocked feeds whole frames to the Conn and handles their events; it returns how many bytes it
// consumed and false when the connection must end.
func (c *tripleConn) readLocked(b []byte) (int, bool) {
	p := c.p
	rd := 0
	for {
		if h, ok := h2.ParseFrameHeader(b[rd:]); ok && h.Type == h2.FramePing && !h.Flags.Has(h2.FlagAck) &&
			h.Length == 8 && len(b)-rd >= h2.FrameHeaderLen+8 {
			p.pings.Add(1)
			if _, mine := IsLoadPing([8]byte(b[rd+h2.FrameHeaderLen:])); mine {
				p.loadPings.Add(1)
			}
		}
		n, ev, err := c.conn.Read(time.Now().UnixNano(), b[rd:])
		if err != nil {
			p.violation(c.serial, "malformed frame", 0, err.Error())
			return rd, false
		}
		if n == 0 {
			return rd, true
		}
		rd += n
		c.event(ev)
		cnt := c.conn.Counters()
		if g := cnt.Guards[h2.GuardTooManyStreams]; g > c.guards {
			c.guards = g
			p.violation(c.serial, "too many streams", ev.Stream, "a stream beyond SETTINGS_MAX_CONCURRENT_STREAMS")
		}
		if open := int64(c.conn.OpenStreams()); open > p.maxOpen.Load() {
			p.raiseMaxOpen(open)
		}
	}
}

func (p *TripleEcho) raiseMaxOpen(n int64) {
	for {
		m := p.maxOpen.Load()
		if n <= m || p.maxOpen.CompareAndSwap(m, n) {
			return
		}
	}
}

func (c *tripleConn) event(ev h2.Event) {
	p := c.p
	switch ev.Kind {
	case h2.EventHeaders:
		if ev.Trailers {
			p.violation(c.serial, "unexpected frame", ev.Stream, "request trailers on a unary call")
			return
		}
		s := &tripleStream{}
		c.streams[ev.Stream] = s
		path, _ := h2.Field(ev.Fields, h2.HeaderPath)
		method, _ := h2.Field(ev.Fields, ":method")
		s.ctype, _ = h2.Field(ev.Fields, h2.HeaderContentType)
		if _, _, ok := h2.ServiceMethod(path); !ok || method != "POST" || len(s.ctype) < 16 || s.ctype[:16] != "application/grpc" {
			c.bad(ev.Stream, s, "bad head", fmt.Sprintf(":method %q :path %q content-type %q", method, path, s.ctype))
			return
		}
		if v, ok := h2.Field(ev.Fields, TripleAnswerSizeHeader); ok {
			n, err := strconv.Atoi(v)
			if err != nil || n < CheckedHeaderLen || n > MaxCheckedBody {
				c.bad(ev.Stream, s, "bad head", fmt.Sprintf("%s %q: want %d..%d", TripleAnswerSizeHeader, v, CheckedHeaderLen, MaxCheckedBody))
				return
			}
			s.size = n
		}
		if ev.EndStream {
			c.ended(ev.Stream, s)
		}
	case h2.EventData:
		s := c.streams[ev.Stream]
		_ = c.conn.Consumed(ev.Stream, len(ev.Data))
		if s == nil || s.bad {
			return
		}
		if len(s.in)+len(ev.Data) > p.cfg.MaxMessage {
			c.bad(ev.Stream, s, "malformed message", fmt.Sprintf("message over %d bytes", p.cfg.MaxMessage))
			return
		}
		s.in = append(s.in, ev.Data...)
		if ev.EndStream {
			c.ended(ev.Stream, s)
		}
	case h2.EventReset:
		if ev.ByPeer {
			p.resets.Add(1)
		}
		delete(c.streams, ev.Stream)
	case h2.EventWindow:
		for id, s := range c.streams {
			if s.sentHdr && s.pending != nil {
				c.send(id, s)
			}
		}
	case h2.EventGoAway:
		// A client going away: its streams below LastStream are still answered.
	}
}

// bad records a violation for stream id and resets it.
func (c *tripleConn) bad(id uint32, s *tripleStream, kind, detail string) {
	c.p.violation(c.serial, kind, id, detail)
	s.bad = true
	_ = c.conn.Reset(id, h2.ErrCodeProtocol)
	delete(c.streams, id)
}

// ended checks a complete request and answers it, at once or after Delay.
func (c *tripleConn) ended(id uint32, s *tripleStream) {
	p := c.p
	msg := s.in
	body, err := TripleBody(msg, nil)
	switch {
	case err == nil:
		key, full, cerr := CheckBody(body)
		if cerr != nil {
			c.bad(id, s, "corrupt body", cerr.Error())
			return
		}
		p.checked.Add(1)
		if full {
			p.keysMu.Lock()
			fresh := p.keys.add(key)
			p.keysMu.Unlock()
			if !fresh {
				c.bad(id, s, "duplicate key", fmt.Sprintf("body key %d seen before", key))
				return
			}
		}
		if s.size > 0 {
			if !full {
				c.bad(id, s, "bad head", TripleAnswerSizeHeader+" on a call whose body has no full key")
				return
			}
			s.reply = AppendTripleBody(nil, key, s.size)
		}
	case errors.Is(err, ErrTripleArg):
		// A call with another argument (a String): echoed unchecked.
	default:
		c.bad(id, s, "malformed message", err.Error())
		return
	}
	if p.cfg.Delay <= 0 {
		c.answer(id, s)
		return
	}
	p.timerWG.Add(1)
	time.AfterFunc(p.cfg.Delay, func() {
		defer p.timerWG.Done()
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.dead || c.streams[id] != s {
			return
		}
		c.answer(id, s)
		if c.flushLocked() != nil {
			c.dead = true
			_ = c.nc.Close()
		}
	})
}

func (c *tripleConn) answer(id uint32, s *tripleStream) {
	p := c.p
	n := p.answers.Add(1)
	s.pending = s.in
	if s.reply != nil {
		s.pending = s.reply
	}
	if p.cfg.Tamper != nil {
		s.pending = p.cfg.Tamper(n, s.pending)
	}
	var err error
	c.sync()
	c.out, err = c.conn.AppendHeaders(c.out, id, []h2.HeaderField{
		{Name: h2.HeaderStatus, Value: "200"}, {Name: h2.HeaderContentType, Value: s.ctype},
	}, false)
	if err != nil {
		delete(c.streams, id)
		return
	}
	s.sentHdr = true
	c.send(id, s)
}

// send writes as much of the answer as the windows allow, then the trailers.
func (c *tripleConn) send(id uint32, s *tripleStream) {
	var n int
	var err error
	c.sync()
	c.out, n, err = c.conn.AppendData(time.Now().UnixNano(), c.out, id, s.pending, false)
	if err != nil {
		delete(c.streams, id)
		return
	}
	s.pending = s.pending[n:]
	if len(s.pending) > 0 {
		return
	}
	c.out, _ = c.conn.AppendHeaders(c.out, id, []h2.HeaderField{{Name: h2.HeaderGRPCStatus, Value: "0"}}, true)
	delete(c.streams, id)
	c.p.requests.Add(1)
}

// sync moves the Conn's own frames (ACKs, WINDOW_UPDATEs, RST_STREAMs) to out: they go before
// anything appended after them.
func (c *tripleConn) sync() {
	if o := c.conn.Output(); len(o) > 0 {
		c.out = append(c.out, o...)
		c.conn.ClearOutput()
	}
}

// flushLocked writes everything queued.
func (c *tripleConn) flushLocked() error {
	c.sync()
	if len(c.out) == 0 {
		return nil
	}
	_, err := c.nc.Write(c.out)
	c.out = c.out[:0]
	return err
}
