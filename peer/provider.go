package peer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/stormgate/stormgate/proxy/dubbo"
)

// ErrProviderClosed is what Serve returns once the provider has been closed, shut down,
// or its Serve context has ended.
var ErrProviderClosed = errors.New("peer: provider closed")

// ProviderConfig configures a Provider. The zero value is valid.
type ProviderConfig struct {
	// Addr is the TCP listen address. "" means "127.0.0.1:0".
	Addr string
	// MaxFrame caps header+body of every frame read; a larger declared length closes the
	// connection (counted in BadFrames). <= 0 means dubbo.DefaultMaxFrame.
	MaxFrame int
	// HeartbeatInterval: when > 0 the provider sends its own heartbeat request on every
	// connection at this interval, regardless of traffic (dubbo-go's server: 60 s).
	// <= 0 means never.
	HeartbeatInterval time.Duration
	// Methods adds a service delay per method name. A method listed here with a delay
	// > 0 is answered from its own goroutine after the delay, never blocking the
	// connection's reader. A listed name that is not a built-in method behaves like
	// "echo". The map is copied by NewProvider.
	Methods map[string]time.Duration
	// MaxDelayed caps the requests waiting out a delay ("sleep" or Methods) across the
	// provider; requests over the cap are answered at once with status 100
	// (SERVER_THREADPOOL_EXHAUSTED, Java's AbortPolicy). <= 0 means 65536.
	MaxDelayed int
	// SilentShutdown makes Shutdown skip the READONLY event (dubbo-go v3.3.0 never sends it).
	SilentShutdown bool
	// WaitDisconnect, when > 0, makes Shutdown stop as Java Dubbo's server does
	// (HeaderExchangeServer.close): after READONLY it keeps serving until every consumer
	// has closed its connection or this long has passed, then closes everything at once.
	// 0 keeps the default order (wait for no request in flight, half-close, close).
	WaitDisconnect time.Duration
	// Inside, when set, counts the two-way requests inside the provider: read whole from
	// a socket and not yet answered on it (inside.go). A benchmark backs it with shared
	// memory to read, after a SIGKILL, how many requests the process took with it.
	Inside *atomic.Int64
}

// ProviderStats is a snapshot of the provider's counters.
type ProviderStats struct {
	ConnsAccepted      uint64 `json:"conns_accepted"`
	ConnsOpen          int64  `json:"conns_open"`
	Requests           uint64 `json:"requests"`            // two-way non-event requests
	OneWay             uint64 `json:"one_way"`             // one-way non-event requests (never answered)
	HeartbeatsReceived uint64 `json:"heartbeats_received"` // two-way event requests (answered as heartbeats)
	EventsReceived     uint64 `json:"events_received"`     // one-way event requests (READONLY/WRITEABLE), not answered
	ResponsesReceived  uint64 `json:"responses_received"`  // response frames received (replies to the provider's heartbeats)
	HeartbeatsSent     uint64 `json:"heartbeats_sent"`
	EventsSent         uint64 `json:"events_sent"`  // READONLY/WRITEABLE events written
	Replies            uint64 `json:"replies"`      // responses written to two-way requests (not heartbeat replies)
	BadFrames          uint64 `json:"bad_frames"`   // connections closed for bad magic, bad length or a truncated frame
	BadRequests        uint64 `json:"bad_requests"` // two-way requests whose body did not decode (answered status 40)
	Rejected           uint64 `json:"rejected"`     // delayed requests refused with status 100
	InFlight           int64  `json:"in_flight"`    // two-way requests accepted and not yet answered
}

// bigLimit caps the string length the "big" method will produce.
const bigLimit = 64 << 20

// Buffer sizes per connection: small, so that 10k+ idle connections stay cheap. Frames
// larger than the read buffer are read into their own allocation.
const (
	readBufSize  = 4 << 10
	writeBufSize = 4 << 10
	maxScratch   = 64 << 10
)

// shutdownLinger bounds how long Shutdown waits for peers to close their side after the
// provider has half-closed every connection.
const shutdownLinger = time.Second

const (
	stateRunning = iota
	stateDraining
	stateClosed
)

// Provider is a Dubbo 2 test provider. See the package documentation for its methods
// and concurrency rules.
type Provider struct {
	log        *zap.Logger
	ln         net.Listener
	maxFrame   int
	interval   time.Duration
	methods    map[string]time.Duration
	maxDelayed int64
	silent     bool

	ctx    context.Context // canceled by Close: aborts delayed requests and heartbeat loops
	cancel context.CancelFunc

	mu      sync.Mutex
	state   int
	serving bool
	conns   map[*provConn]struct{}

	wg sync.WaitGroup // connection goroutines and delayed-request goroutines

	inside   *atomic.Int64 // ProviderConfig.Inside; nil when not counted
	waitDisc time.Duration // ProviderConfig.WaitDisconnect
	nextID   atomic.Int64  // ids of the provider's own requests (heartbeats, events)
	inflight atomic.Int64
	delayed  atomic.Int64

	connsAccepted, requests, oneWay, heartbeatsReceived, eventsReceived atomic.Uint64
	responsesReceived, heartbeatsSent, eventsSent, replies              atomic.Uint64
	badFrames, badRequests, rejected                                    atomic.Uint64
	connsOpen                                                           atomic.Int64
}

// NewProvider listens on cfg.Addr. Call Serve to accept connections. log may be nil.
func NewProvider(cfg ProviderConfig, log *zap.Logger) (*Provider, error) {
	if log == nil {
		log = zap.NewNop()
	}
	addr := cfg.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("peer: listen %s: %w", addr, err)
	}
	p := &Provider{
		log:        log,
		ln:         ln,
		maxFrame:   cfg.MaxFrame,
		interval:   cfg.HeartbeatInterval,
		methods:    make(map[string]time.Duration, len(cfg.Methods)),
		maxDelayed: int64(cfg.MaxDelayed),
		silent:     cfg.SilentShutdown,
		waitDisc:   cfg.WaitDisconnect,
		inside:     cfg.Inside,
		conns:      make(map[*provConn]struct{}),
	}
	if p.maxFrame <= 0 {
		p.maxFrame = dubbo.DefaultMaxFrame
	}
	if p.maxDelayed <= 0 {
		p.maxDelayed = 65536
	}
	for m, d := range cfg.Methods {
		p.methods[m] = d
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	return p, nil
}

// Addr returns the listening address, e.g. "127.0.0.1:43121".
func (p *Provider) Addr() string { return p.ln.Addr().String() }

// Serve accepts connections until ctx ends (which closes the provider, as Close does),
// Close or Shutdown. It always returns a non-nil error: ErrProviderClosed after any of
// those, or the error that made accepting impossible. Serve may be called once.
func (p *Provider) Serve(ctx context.Context) error {
	p.mu.Lock()
	switch {
	case p.state != stateRunning:
		p.mu.Unlock()
		return ErrProviderClosed
	case p.serving:
		p.mu.Unlock()
		return errors.New("peer: Serve called twice")
	}
	p.serving = true
	p.mu.Unlock()

	closedByCtx := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(closedByCtx)
		_ = p.Close()
	})
	defer func() {
		if !stop() {
			<-closedByCtx // Serve returns only once the close it started is complete
		}
	}()

	var backoff time.Duration
	for {
		nc, err := p.ln.Accept()
		if err != nil {
			if p.stopped() || errors.Is(err, net.ErrClosed) {
				return ErrProviderClosed
			}
			// Out of fds or a similar transient failure: back off, as net/http does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			p.log.Warn("accept failed; retrying", zap.Error(err), zap.Duration("backoff", backoff))
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-p.ctx.Done():
				t.Stop()
				return ErrProviderClosed
			}
			continue
		}
		backoff = 0
		p.addConn(nc)
	}
}

func (p *Provider) stopped() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state != stateRunning
}

func (p *Provider) addConn(nc net.Conn) {
	p.mu.Lock()
	if p.state == stateClosed {
		p.mu.Unlock()
		_ = nc.Close()
		return
	}
	var r io.Reader = nc
	var w io.Writer = nc
	if p.inside != nil {
		r = &insideReader{r: nc, insideCount: insideCount{fc: frameCounter{match: twoWayRequest}, inside: p.inside, sign: 1}}
		w = &insideWriter{w: nc, insideCount: insideCount{fc: frameCounter{match: answer}, inside: p.inside, sign: -1}}
	}
	c := &provConn{
		p:  p,
		nc: nc,
		br: bufio.NewReaderSize(r, readBufSize),
		bw: bufio.NewWriterSize(w, writeBufSize),
	}
	c.ctx, c.cancel = context.WithCancel(p.ctx)
	p.conns[c] = struct{}{}
	readonly := p.state == stateDraining && !p.silent
	p.wg.Add(1)
	p.mu.Unlock()
	p.connsAccepted.Add(1)
	p.connsOpen.Add(1)
	go c.serve(readonly)
}

func (p *Provider) snapshot() []*provConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	cs := make([]*provConn, 0, len(p.conns))
	for c := range p.conns {
		cs = append(cs, c)
	}
	return cs
}

// SendReadonly writes a READONLY event (da bb a2 00 <id> 00 00 00 02 01 52) to every
// current connection and returns how many connections it was written to.
func (p *Provider) SendReadonly() int { return p.sendEvent('R') }

// SendWriteable writes a WRITEABLE event ("W") to every current connection and returns
// how many connections it was written to.
func (p *Provider) SendWriteable() int { return p.sendEvent('W') }

func (p *Provider) sendEvent(c byte) int {
	n := 0
	for _, pc := range p.snapshot() {
		if pc.sendEvent(c) {
			n++
		}
	}
	return n
}

// Shutdown stops the provider gracefully, in Java Dubbo's order: stop accepting, send
// READONLY to every connection (unless SilentShutdown), wait until no request is in
// flight (requests arriving meanwhile are still served), flush and half-close every
// connection, give peers up to a second to close their side, then close everything.
// With WaitDisconnect it waits instead for the consumers to close their connections.
// If ctx ends first, Shutdown closes at once and returns ctx.Err().
func (p *Provider) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	if p.state == stateClosed {
		p.mu.Unlock()
		return ErrProviderClosed
	}
	first := p.state == stateRunning
	p.state = stateDraining
	p.mu.Unlock()
	if first {
		_ = p.ln.Close()
		if !p.silent {
			p.sendEvent('R')
		}
	}

	if p.waitDisc > 0 {
		err := p.poll(ctx, func() bool { return p.connsOpen.Load() == 0 }, p.waitDisc)
		_ = p.Close()
		return err
	}
	if err := p.poll(ctx, func() bool { return p.inflight.Load() == 0 }, 0); err != nil {
		_ = p.Close()
		return err
	}
	for _, c := range p.snapshot() {
		c.closeWrite()
	}
	// Let peers see the FIN and close; a hard close now could turn unread bytes into a RST.
	if err := p.poll(ctx, func() bool { return p.connsOpen.Load() == 0 }, shutdownLinger); err != nil {
		_ = p.Close()
		return err
	}
	return p.Close()
}

// poll waits until cond holds, checking with a capped backoff. It returns ctx.Err() if
// ctx ends first and nil when cond holds or limit (if > 0) has passed.
func (p *Provider) poll(ctx context.Context, cond func() bool, limit time.Duration) error {
	var deadline time.Time
	if limit > 0 {
		deadline = time.Now().Add(limit)
	}
	wait := time.Millisecond
	for !cond() {
		if !deadline.IsZero() && time.Now().After(deadline) {
			return nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, 20*time.Millisecond)
	}
	return nil
}

// Close closes the listener and every connection at once, aborts delayed requests and
// waits for the provider's goroutines to end. It is safe to call more than once. Bytes
// a peer sent that were not read yet make the kernel answer with a RST, as when a real
// provider process is killed.
func (p *Provider) Close() error {
	p.mu.Lock()
	p.state = stateClosed
	p.mu.Unlock()
	_ = p.ln.Close()
	p.cancel()
	for _, c := range p.snapshot() {
		_ = c.nc.Close()
	}
	p.wg.Wait()
	return nil
}

// Stats returns a snapshot of the counters.
func (p *Provider) Stats() ProviderStats {
	return ProviderStats{
		ConnsAccepted:      p.connsAccepted.Load(),
		ConnsOpen:          p.connsOpen.Load(),
		Requests:           p.requests.Load(),
		OneWay:             p.oneWay.Load(),
		HeartbeatsReceived: p.heartbeatsReceived.Load(),
		EventsReceived:     p.eventsReceived.Load(),
		ResponsesReceived:  p.responsesReceived.Load(),
		HeartbeatsSent:     p.heartbeatsSent.Load(),
		EventsSent:         p.eventsSent.Load(),
		Replies:            p.replies.Load(),
		BadFrames:          p.badFrames.Load(),
		BadRequests:        p.badRequests.Load(),
		Rejected:           p.rejected.Load(),
		InFlight:           p.inflight.Load(),
	}
}

// provConn is one accepted connection: a reader goroutine (serve), an optional
// heartbeat goroutine, and delayed-request goroutines, all writing through wmu.
type provConn struct {
	p      *Provider
	nc     net.Conn
	br     *bufio.Reader // reader goroutine only
	buf    []byte        // reader goroutine's scratch for replies
	ctx    context.Context
	cancel context.CancelFunc

	writers    atomic.Int32 // goroutines waiting for or holding wmu
	wmu        sync.Mutex
	bw         *bufio.Writer
	werr       error
	halfClosed bool
}

func (c *provConn) serve(readonly bool) {
	p := c.p
	defer p.wg.Done()
	var hb sync.WaitGroup
	defer func() {
		_ = c.nc.Close()
		c.cancel()
		hb.Wait()
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
		p.connsOpen.Add(-1)
	}()
	if readonly {
		c.sendEvent('R')
	}
	if p.interval > 0 {
		hb.Add(1)
		go func() {
			defer hb.Done()
			c.heartbeats(p.interval)
		}()
	}
	c.readLoop()
}

func (c *provConn) readLoop() {
	p := c.p
	for {
		hdr, err := c.br.Peek(dubbo.HeaderLen)
		if err != nil {
			if len(hdr) > 0 {
				p.badFrames.Add(1)
				p.log.Info("truncated frame header at close", zap.Stringer("peer", c.nc.RemoteAddr()), zap.Error(err))
			}
			return
		}
		h, err := dubbo.ParseHeader(hdr, p.maxFrame)
		if err != nil {
			p.badFrames.Add(1)
			p.log.Info("bad frame; closing connection", zap.Stringer("peer", c.nc.RemoteAddr()), zap.Error(err))
			return
		}
		n := h.FrameLen()
		var frame []byte
		inBuf := n <= c.br.Size()
		if inBuf {
			frame, err = c.br.Peek(n)
		} else {
			frame = make([]byte, n)
			_, err = io.ReadFull(c.br, frame)
		}
		if err != nil {
			p.badFrames.Add(1)
			p.log.Info("truncated frame at close", zap.Stringer("peer", c.nc.RemoteAddr()), zap.Error(err))
			return
		}
		c.handle(h, frame)
		if cap(c.buf) > maxScratch {
			c.buf = nil // do not keep a "big" reply's buffer for the life of the connection
		}
		if inBuf {
			_, _ = c.br.Discard(n)
		}
		if !c.frameBuffered() {
			c.flush()
		}
	}
}

// frameBuffered reports whether a whole next frame is already in the read buffer, in
// which case the reply just written can wait for the next one to be flushed with it.
func (c *provConn) frameBuffered() bool {
	n := c.br.Buffered()
	if n < dubbo.HeaderLen {
		return false
	}
	hdr, _ := c.br.Peek(dubbo.HeaderLen)
	bl := int64(int32(uint32(hdr[12])<<24 | uint32(hdr[13])<<16 | uint32(hdr[14])<<8 | uint32(hdr[15])))
	return bl >= 0 && int64(n) >= dubbo.HeaderLen+bl
}

// handle processes one frame. frame is only valid during the call.
func (c *provConn) handle(h dubbo.Header, frame []byte) {
	p := c.p
	serial := h.Serial()
	switch h.Kind() {
	case dubbo.KindEventTwoWay:
		p.heartbeatsReceived.Add(1)
		c.buf = dubbo.AppendHeartbeatReply(c.buf[:0], h.ID, serial)
		c.write(c.buf, false)
	case dubbo.KindEventOneWay:
		p.eventsReceived.Add(1)
	case dubbo.KindResponse, dubbo.KindEventResponse:
		p.responsesReceived.Add(1)
	case dubbo.KindOneWay:
		p.oneWay.Add(1)
	case dubbo.KindRequest:
		p.requests.Add(1)
		p.inflight.Add(1)
		c.request(h.ID, serial, frame[dubbo.HeaderLen:])
	}
}

// request answers a two-way request, inline or from a delayed goroutine. The caller has
// counted it in inflight; request (or the goroutine it starts) uncounts it once the reply
// is in the write buffer.
func (c *provConn) request(id int64, serial byte, body []byte) {
	p := c.p
	var req request
	var err error
	req.service, req.method, req.arg, err = dubbo.ParseRequest(body)
	if err != nil && !errors.Is(err, dubbo.ErrArgNotString) {
		p.badRequests.Add(1)
		c.buf = dubbo.AppendErrorResponse(c.buf[:0], id, serial, dubbo.StatusBadRequest, "peer: cannot decode request: "+err.Error())
		c.reply(c.buf, false)
		return
	}
	delay := p.methods[req.method]
	if req.method == "sleep" {
		d, err := time.ParseDuration(req.arg)
		if err != nil || d < 0 {
			c.buf = dubbo.AppendErrorResponse(c.buf[:0], id, serial, dubbo.StatusServerError, "sleep: bad duration "+strconv.Quote(req.arg))
			c.reply(c.buf, false)
			return
		}
		delay += d
	}
	if delay <= 0 {
		c.buf = p.answer(c.buf[:0], id, serial, req)
		c.reply(c.buf, false)
		return
	}
	if p.delayed.Add(1) > p.maxDelayed {
		p.delayed.Add(-1)
		p.rejected.Add(1)
		c.buf = dubbo.AppendErrorResponse(c.buf[:0], id, serial, dubbo.StatusThreadpoolExhausted, "peer: too many delayed requests")
		c.reply(c.buf, false)
		return
	}
	p.wg.Add(1) // the reader's own count is held, so this never races with Wait at zero
	go func() {
		defer p.wg.Done()
		defer p.delayed.Add(-1)
		t := time.NewTimer(delay)
		select {
		case <-t.C:
			c.reply(p.answer(nil, id, serial, req), true)
		case <-c.ctx.Done():
			t.Stop()
			p.inflight.Add(-1)
		}
	}()
}

// request is a decoded request: what answer needs.
type request struct {
	service, method, arg string
}

// answer appends the reply to a two-way request according to the method name.
func (p *Provider) answer(dst []byte, id int64, serial byte, req request) []byte {
	switch req.method {
	case "echo", "sleep":
		return dubbo.AppendValueResponse(dst, id, serial, req.arg)
	case "fail":
		return appendExceptionResponse(dst, id, serial, "java.lang.RuntimeException", "fail: "+req.arg)
	case "error":
		return dubbo.AppendErrorResponse(dst, id, serial, dubbo.StatusServerError, "error: "+req.arg)
	case "big":
		n, err := strconv.Atoi(req.arg)
		if err != nil || n < 0 || n > bigLimit {
			return dubbo.AppendErrorResponse(dst, id, serial, dubbo.StatusServerError, "big: bad length "+strconv.Quote(req.arg))
		}
		return dubbo.AppendValueResponse(dst, id, serial, strings.Repeat("x", n))
	}
	if _, ok := p.methods[req.method]; ok {
		return dubbo.AppendValueResponse(dst, id, serial, req.arg)
	}
	return dubbo.AppendErrorResponse(dst, id, serial, dubbo.StatusServiceNotFound,
		fmt.Sprintf("Not found exported service: %s in peer provider, may be version or group mismatch, method %s", req.service, req.method))
}

// reply writes the reply to a two-way request and takes it out of inflight.
func (c *provConn) reply(b []byte, flush bool) {
	if c.write(b, flush) {
		c.p.replies.Add(1)
	}
	c.p.inflight.Add(-1)
}

// write appends b to the connection's write buffer and, if flush is set, makes sure it
// is flushed: at once, or by a writer already waiting for the lock (concurrent replies
// then share one write system call). A writer with flush unset must flush later itself
// (the reader does, before it blocks on a read). write reports whether b was accepted.
// After a write error nothing more is written, and the connection is closed so its
// reader stops.
func (c *provConn) write(b []byte, flush bool) bool {
	c.writers.Add(1)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	last := c.writers.Add(-1) == 0
	if c.werr != nil || c.halfClosed {
		return false
	}
	var err error
	if len(b) > 0 {
		_, err = c.bw.Write(b)
	}
	if err == nil && flush && last && c.bw.Buffered() > 0 {
		err = c.bw.Flush()
	}
	if err != nil {
		c.werr = err
		_ = c.nc.Close()
		return false
	}
	return true
}

// flush flushes the write buffer (or leaves it to a writer waiting for the lock).
func (c *provConn) flush() { c.write(nil, true) }

func (c *provConn) sendEvent(ev byte) bool {
	var b [dubbo.HeaderLen + 2]byte
	frame := dubbo.AppendReadonlyEvent(b[:0], c.p.nextID.Add(1))
	if ev == 'W' {
		frame = dubbo.AppendWriteableEvent(b[:0], c.p.nextID.Add(1))
	}
	if !c.write(frame, true) {
		return false
	}
	c.p.eventsSent.Add(1)
	return true
}

// closeWrite flushes what is buffered and sends FIN; the reader keeps reading (and
// discarding replies) until the peer closes.
func (c *provConn) closeWrite() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.halfClosed {
		return
	}
	if c.werr == nil {
		c.werr = c.bw.Flush()
	}
	c.halfClosed = true
	if cw, ok := c.nc.(interface{ CloseWrite() error }); ok && c.werr == nil {
		_ = cw.CloseWrite()
		return
	}
	_ = c.nc.Close()
}

func (c *provConn) heartbeats(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	var b [dubbo.HeaderLen + 1]byte
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
			// Counted before the write, so that no reader of Stats sees a heartbeat's answer before the
			// heartbeat itself (a make test run caught ResponsesReceived 3 beside HeartbeatsSent 2).
			c.p.heartbeatsSent.Add(1)
			if !c.write(dubbo.AppendHeartbeatRequest(b[:0], c.p.nextID.Add(1)), true) {
				c.p.heartbeatsSent.Add(^uint64(0))
			}
		}
	}
}
