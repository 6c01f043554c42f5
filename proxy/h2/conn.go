package h2

import (
	"errors"
	"time"
)

// Role says which end of the connection this side is.
type Role uint8

const (
	// RoleServer is Stormgate toward a consumer: the peer opens streams (odd ids) and sends the preface.
	RoleServer Role = iota
	// RoleClient is Stormgate toward a provider: this side sends the preface and opens streams.
	RoleClient
)

// Defaults of Config's zero fields.
const (
	DefaultMaxConcurrentStreams = 100      // RFC 9113 §6.5.2 recommends no less
	DefaultConnWindowSize       = 1 << 20  // connection receive window: 16 streams' default windows
	DefaultMaxHeaderListSize    = 64 << 10 // Envoy's default is 60 KiB; gRPC Java's 8 KiB
	maxRecentClosed             = 32       // closed stream ids remembered to tell "closed" from "never opened"
	creditPerFrameSent          = 4        // PINGs/WINDOW_UPDATEs a sent DATA or HEADERS frame makes free: an honest receiver answers data with a stream and a connection WINDOW_UPDATE and a BDP PING at most
	// maxCredit bounds the free answers banked: those of 1,024 frames. The answers come after a burst
	// that can be that long (a hundred calls' answers written in one pass); 64 (16 frames) made a peer
	// that answers every frame with its windows a flood (TestGuardHonestAnswersToBursts). What a peer can
	// bank is bounded by what this side sent it, and 4,096 control frames cost milliseconds.
	maxCredit = 4096
	// exportCreditMax bounds the credit an exported ConnState carries: builds before maxCredit was raised
	// refuse a state with more (RestoreConn), and a downgrade must still restore; the rest is forgone.
	exportCreditMax = 64
)

// Config is one connection's parameters. The zero value is a valid server (consumer-side) connection with
// the defaults.
type Config struct {
	Role Role
	// MaxConcurrentStreams is what this side lets the peer open at once (0: DefaultMaxConcurrentStreams).
	MaxConcurrentStreams uint32
	// InitialWindowSize is this side's stream receive window (0: 65,535), ConnWindowSize its connection
	// receive window (0: DefaultConnWindowSize; never below InitialWindowSize nor the protocol's initial
	// 65,535, which a peer may use before it hears anything). They bound what a peer can
	// make this side buffer: a stream's data waits here no longer than the owner takes to consume it.
	InitialWindowSize uint32
	ConnWindowSize    uint32
	// MaxFrameSize is the largest frame payload this side accepts (0: 16,384).
	MaxFrameSize uint32
	// MaxHeaderListSize bounds a decoded header list (0: DefaultMaxHeaderListSize); the encoded block is
	// bounded by the same number.
	MaxHeaderListSize uint32
	// Limits are the attack guards' bounds (zero fields: DefaultLimits).
	Limits Limits
}

// EventKind says what a frame meant to the owner.
type EventKind uint8

// Event kinds.
const (
	EventNone     EventKind = iota // handled inside the Conn (SETTINGS, PING, PRIORITY, ignored frames, a block in progress)
	EventHeaders                   // a header section: request or response head, or trailers
	EventData                      // DATA for a stream (padding removed)
	EventReset                     // a stream ended abnormally: the peer's RST_STREAM, or this side's stream error
	EventGoAway                    // the peer's GOAWAY
	EventWindow                    // a send window grew (Stream 0: the connection's): queued data may go
	EventSettings                  // the peer's SETTINGS were applied (e.g. a new MAX_CONCURRENT_STREAMS)
	EventPingAck                   // the answer to one of this side's PINGs
)

// Event is what Read found. Fields and Data are valid until the next call to Read.
type Event struct {
	Kind       EventKind
	Stream     uint32
	EndStream  bool
	Trailers   bool // EventHeaders: the stream's second header section
	Fields     []HeaderField
	Data       []byte
	Code       ErrCode // EventReset, EventGoAway
	ByPeer     bool    // EventReset: the peer's RST_STREAM (false: this side reset the stream, RST_STREAM in Output)
	LastStream uint32  // EventGoAway
	Ping       [8]byte // EventPingAck
}

// Counters are one connection's totals, for metrics. Guards counts each guard's trips; the resets are
// also counted by code class (ErrCode.Class), a bounded set fit for metric labels.
type Counters struct {
	Frames               uint64
	PingsAnswered        uint64
	StreamsOpened        uint64
	ResetsReceived       uint64
	ResetsSent           uint64
	ResetsReceivedByCode [NumErrCodeClasses]uint64
	ResetsSentByCode     [NumErrCodeClasses]uint64
	GoAwaysReceived      uint64
	GoAwaysSent          uint64
	GoAwaySent           bool
	GoAwayCode           ErrCode
	Guards               [NumGuards]uint64
}

// Errors of the sending side.
var (
	// ErrStreamNotOpen: the stream is unknown or this side already ended it (it may have been reset).
	ErrStreamNotOpen = errors.New("h2: stream not open for sending")
	// ErrNoStream: no new stream can be opened now (peer's MAX_CONCURRENT_STREAMS, its GOAWAY, or the ids
	// are used up): open a new connection or wait.
	ErrNoStream = errors.New("h2: cannot open a stream on this connection")
	// ErrRole: the call does not fit the connection's role.
	ErrRole = errors.New("h2: call not valid for this role")
)

type connPhase uint8

const (
	phasePreface  connPhase = iota // server: waiting for the client preface
	phaseSettings                  // waiting for the peer's first frame, which must be SETTINGS
	phaseActive
)

// Conn is the state machine of one HTTP/2 connection, either end: bytes in (Read), events out, and the
// frames this side must send on its own (SETTINGS and its ACKs, PING answers, WINDOW_UPDATEs, RST_STREAM,
// GOAWAY) appended to Output for the owner to write. It enforces RFC 9113's stream states, id rules and flow
// control in both directions, and the guards (guard.go). It owns no socket and no timer: the owner passes
// the time (nanoseconds on its one clock) and writes Output. One goroutine at a time.
type Conn struct {
	role     Role
	lim      Limits
	phase    connPhase
	local    Settings // what this side announced
	acked    bool     // the peer acknowledged local
	peer     Settings
	connWin  uint32 // this side's connection receive window
	dec      *HeaderDecoder
	asm      *Assembler
	streams  map[uint32]*stream
	free     []*stream
	peerOpen int // streams the peer opened that are not closed (count toward local.MaxConcurrentStreams)
	ownOpen  int // streams this side opened that are not closed (count toward peer.MaxConcurrentStreams)
	lastPeer uint32
	nextOwn  uint32
	connSend sendWindow
	connRecv recvWindow

	// encUpdate: the peer announced a SETTINGS_HEADER_TABLE_SIZE below the protocol's initial 4,096, so
	// this side's next header block begins with a dynamic table size update to 0 (RFC 7541 §4.2; the
	// encoder is stateless and uses no table, so 0 is always within the peer's bound).
	encUpdate bool

	goAwaySent, goAwayRecv bool
	goAwayLast             uint32 // the last stream this side's GOAWAY promised to process
	peerGoAwayLast         uint32

	recent    [maxRecentClosed]closedStream
	recentIdx int
	// owedHeaders: header blocks the peer may still send on streams this side opened and reset (a
	// response head and trailers each, in flight when the RST_STREAM left). Ignoring them is free; past
	// them, header blocks on this side's ended streams cost the control budget.
	owedHeaders int64

	resets   bucket
	control  bucket
	credit   int
	emptyRun int
	queued   int
	out      []byte
	err      *ConnError
	c        Counters
}

type closedStream struct {
	id      uint32
	resetUs bool // this side reset it: the peer may still send frames it had in flight (§5.4.2)
}

// NewConn returns a connection in its initial state with this side's connection preface (client), SETTINGS
// and connection WINDOW_UPDATE already in Output. This side announces SETTINGS_HEADER_TABLE_SIZE = 0 so
// that the peer's dynamic table, and so this side's decoder state, is empty once the peer acknowledges.
func NewConn(cfg Config) *Conn {
	lim := cfg.Limits.withDefaults()
	orDefault(&cfg.MaxConcurrentStreams, DefaultMaxConcurrentStreams)
	orDefault(&cfg.InitialWindowSize, DefaultInitialWindowSize)
	orDefault(&cfg.MaxFrameSize, DefaultMaxFrameSize)
	orDefault(&cfg.MaxHeaderListSize, DefaultMaxHeaderListSize)
	orDefault(&cfg.ConnWindowSize, DefaultConnWindowSize)
	local := DefaultSettings()
	local.HeaderTableSize = 0
	local.EnablePush = false
	local.MaxConcurrentStreams = cfg.MaxConcurrentStreams
	local.InitialWindowSize = min(cfg.InitialWindowSize, MaxWindowSize)
	local.MaxFrameSize = min(max(cfg.MaxFrameSize, DefaultMaxFrameSize), MaxFrameSizeLimit)
	local.MaxHeaderListSize = cfg.MaxHeaderListSize
	c := &Conn{
		role:     cfg.Role,
		lim:      lim,
		local:    local,
		peer:     DefaultSettings(),
		connWin:  min(max(cfg.ConnWindowSize, local.InitialWindowSize, DefaultInitialWindowSize), MaxWindowSize),
		dec:      NewHeaderDecoder(local.MaxHeaderListSize),
		asm:      NewAssembler(int(local.MaxHeaderListSize), lim.MaxContinuations),
		streams:  make(map[uint32]*stream),
		connSend: DefaultInitialWindowSize,
		connRecv: recvWindow{avail: DefaultInitialWindowSize},
		resets:   newBucket(lim.ResetBurst, lim.ResetRate),
		control:  newBucket(lim.ControlBurst, lim.ControlRate),
		nextOwn:  1,
	}
	if cfg.Role == RoleClient {
		c.phase = phaseSettings
		c.out = append(c.out, ClientPreface...)
	}
	params := local.Diff(DefaultSettings())
	if cfg.Role == RoleServer {
		// A server must not send ENABLE_PUSH (clients only say whether they accept pushes).
		params = dropSetting(params, SettingEnablePush)
	}
	c.out = AppendSettings(c.out, params...)
	if d := c.connWin - DefaultInitialWindowSize; d > 0 { // connWin is at least the initial 65,535
		c.out = AppendWindowUpdate(c.out, 0, d)
		c.connRecv.avail += int64(d)
	}
	return c
}

func dropSetting(ps []Setting, id SettingID) []Setting {
	out := ps[:0]
	for _, p := range ps {
		if p.ID != id {
			out = append(out, p)
		}
	}
	return out
}

// Output is what this side must send, in order, before anything it sends after this call: the owner writes
// it and then calls ClearOutput. While the owner cannot write (the peer does not read), it should stop
// calling Read: answers that pile up beyond Limits.MaxQueuedControl end the connection.
func (c *Conn) Output() []byte { return c.out }

// ClearOutput forgets Output once the owner has written it.
func (c *Conn) ClearOutput() {
	c.out = c.out[:0]
	c.queued = 0
}

// Err is the connection error that ended the connection (its GOAWAY is in Output), or nil.
func (c *Conn) Err() error {
	if c.err == nil {
		return nil
	}
	return c.err
}

// Counters returns the connection's totals, updated in place as the connection goes on (no copy on
// the per-frame path that reads them): read them only while owning the Conn.
func (c *Conn) Counters() *Counters { return &c.c }

// Acked reports whether the peer acknowledged this side's SETTINGS.
func (c *Conn) Acked() bool { return c.acked }

// PeerSettings returns the settings the peer announced.
func (c *Conn) PeerSettings() Settings { return c.peer }

// LocalSettings returns the settings this side announced.
func (c *Conn) LocalSettings() Settings { return c.local }

// StreamState returns a stream's state; a stream the Conn no longer tracks is StateClosed (or StateIdle
// when its id was never used).
func (c *Conn) StreamState(id uint32) StreamState {
	if s := c.streams[id]; s != nil {
		return s.state
	}
	if c.isPeerID(id) && id <= c.lastPeer || !c.isPeerID(id) && id < c.nextOwn {
		return StateClosed
	}
	return StateIdle
}

// OpenStreams is the number of streams that are neither idle nor closed.
func (c *Conn) OpenStreams() int { return len(c.streams) }

func (c *Conn) isPeerID(id uint32) bool {
	// Clients open odd streams; servers would open even ones (push), which Stormgate never allows.
	if c.role == RoleServer {
		return id%2 == 1
	}
	return id%2 == 0
}

// queue accounts for one more answer in Output.
func (c *Conn) queue() error {
	c.queued++
	if c.queued > c.lim.MaxQueuedControl {
		return c.fail(errOutboundQueue, GuardOutboundQueue)
	}
	return nil
}

// fail ends the connection: GOAWAY with err's code in Output, and err from now on.
func (c *Conn) fail(err *ConnError, g Guard) *ConnError {
	if c.err != nil {
		return c.err
	}
	if g < NumGuards {
		c.c.Guards[g]++
	}
	c.err = err
	last := c.lastPeer
	if c.goAwaySent {
		last = min(last, c.goAwayLast)
	}
	c.out = AppendGoAway(c.out, last, err.Code, err.Reason)
	c.c.GoAwaySent, c.c.GoAwayCode = true, err.Code
	c.c.GoAwaysSent++
	c.goAwaySent, c.goAwayLast = true, last
	return err
}

const noGuard = NumGuards

// spendControl takes a control-budget token for a frame that costs work without carrying requests.
func (c *Conn) spendControl(now int64, g Guard, err *ConnError) error {
	if c.control.take(now) {
		return nil
	}
	return c.fail(err, g)
}

// free spends one credit earned by sending DATA or HEADERS; false when none is left.
func (c *Conn) spendCredit() bool {
	if c.credit > 0 {
		c.credit--
		return true
	}
	return false
}

func (c *Conn) earnCredit() { c.credit = min(c.credit+creditPerFrameSent, maxCredit) }

// Read processes the start of buf: the client preface, or one whole frame. It returns how many bytes it
// consumed (0: buf holds no whole frame yet; call again with more) and what the frame meant. On a connection
// error it returns a *ConnError: the GOAWAY is in Output; write it and close. Stream errors are not errors
// here: the stream is reset (RST_STREAM in Output) and reported as an EventReset when the owner knew it.
// now is the owner's clock in nanoseconds (only differences matter). It never panics.
func (c *Conn) Read(now int64, buf []byte) (n int, ev Event, err error) {
	if c.err != nil {
		return 0, Event{}, c.err
	}
	if c.phase == phasePreface {
		n, err := CheckPreface(buf)
		if err != nil {
			var ce *ConnError
			errors.As(err, &ce)
			return 0, Event{}, c.fail(ce, GuardPreface)
		}
		if n > 0 {
			c.phase = phaseSettings
		}
		return n, Event{}, nil
	}
	h, n, err := Split(buf, c.local.MaxFrameSize)
	if err != nil {
		return 0, Event{}, c.fail(err.(*ConnError), noGuard)
	}
	if n == 0 {
		return 0, Event{}, nil
	}
	c.c.Frames++
	payload := buf[FrameHeaderLen:n]
	if err := CheckFrame(h, payload); err != nil {
		var se *StreamError
		if errors.As(err, &se) {
			if c.idle(se.Stream) {
				// No RST_STREAM for an idle stream (§6.4): a frame that breaks the rules there ends the
				// connection.
				return n, Event{}, c.fail(errIdleStream, noGuard)
			}
			ev, err := c.resetStream(now, se.Stream, se.Code, noGuard, true)
			return n, ev, err
		}
		return n, Event{}, c.fail(err.(*ConnError), noGuard)
	}
	if c.asm.Open() && h.Type != FrameContinuation {
		return n, Event{}, c.fail(errUnexpectedFrame, noGuard)
	}
	if c.phase == phaseSettings {
		if h.Type != FrameSettings || h.Flags.Has(FlagAck) {
			return n, Event{}, c.fail(errFirstFrame, GuardPreface)
		}
		c.phase = phaseActive
	}
	ev, err = c.frame(now, h, payload)
	return n, ev, err
}

func (c *Conn) frame(now int64, h FrameHeader, payload []byte) (Event, error) {
	switch h.Type {
	case FrameData:
		return c.data(now, h, payload)
	case FrameHeaders, FrameContinuation:
		return c.headers(now, h, payload)
	case FrameRSTStream:
		return c.rstStream(now, h, payload)
	case FrameSettings:
		return c.settings(now, h, payload)
	case FramePing:
		return c.ping(now, h, payload)
	case FrameGoAway:
		c.c.GoAwaysReceived++
		g := ParseGoAway(payload)
		if c.goAwayRecv {
			if err := c.spendControl(now, GuardControlFlood, errControlFlood); err != nil {
				return Event{}, err
			}
			g.LastStream = min(g.LastStream, c.peerGoAwayLast)
		}
		c.goAwayRecv, c.peerGoAwayLast = true, g.LastStream
		return Event{Kind: EventGoAway, LastStream: g.LastStream, Code: g.Code}, nil
	case FrameWindowUpdate:
		return c.windowUpdate(now, h, payload)
	}
	// PRIORITY (deprecated by RFC 9113, ignored) and unknown types (§5.5).
	return Event{}, c.spendControl(now, GuardControlFlood, errControlFlood)
}

// afterGoAway reports whether id is a peer stream above the last one this side's GOAWAY promised to process:
// its frames are ignored (§6.8), whatever they are.
func (c *Conn) afterGoAway(id uint32) bool {
	return c.goAwaySent && c.isPeerID(id) && id > c.goAwayLast
}

// idle reports whether id was never opened by its initiator.
func (c *Conn) idle(id uint32) bool {
	if c.isPeerID(id) {
		return id > c.lastPeer
	}
	return id >= c.nextOwn
}

func (c *Conn) recentlyClosed(id uint32) (found, resetUs bool) {
	for _, r := range c.recent {
		if r.id == id && id != 0 {
			return true, r.resetUs
		}
	}
	return false, false
}

// retire forgets a stream that reached closed.
func (c *Conn) retire(s *stream, resetUs bool) {
	if c.streams[s.id] != s {
		return
	}
	delete(c.streams, s.id)
	if c.isPeerID(s.id) {
		c.peerOpen--
	} else {
		c.ownOpen--
	}
	c.recent[c.recentIdx] = closedStream{id: s.id, resetUs: resetUs}
	c.recentIdx = (c.recentIdx + 1) % maxRecentClosed
	*s = stream{}
	c.free = append(c.free, s)
}

func (c *Conn) newStream(id uint32) *stream {
	var s *stream
	if k := len(c.free); k > 0 {
		s, c.free = c.free[k-1], c.free[:k-1]
	} else {
		s = new(stream)
	}
	*s = stream{id: id, state: StateOpen, send: sendWindow(c.peer.InitialWindowSize)}
	s.recv.avail = int64(DefaultInitialWindowSize)
	if c.acked {
		s.recv.avail = int64(c.local.InitialWindowSize)
	}
	c.streams[id] = s
	c.c.StreamsOpened++
	return s
}

// recvSlack is how far a peer may exceed a stream window computed with the old initial window: until it
// acknowledges a larger SETTINGS_INITIAL_WINDOW_SIZE it may already be using it.
func (c *Conn) recvSlack() int64 {
	if c.acked {
		return 0
	}
	return max(0, int64(c.local.InitialWindowSize)-DefaultInitialWindowSize)
}

// resetStream resets a stream for a stream error: RST_STREAM in Output, the stream forgotten. provoked
// says the peer's behaviour caused it, so it takes a reset-budget token (a peer must not make this side
// reset streams for free: CVE-2025-8671). The event is EventReset when the owner knew the stream.
func (c *Conn) resetStream(now int64, id uint32, code ErrCode, g Guard, provoked bool) (Event, error) {
	if g < NumGuards {
		c.c.Guards[g]++
	}
	c.out = AppendRSTStream(c.out, id, code)
	c.c.ResetsSent++
	c.c.ResetsSentByCode[code.Class()]++
	ev := Event{}
	if s := c.streams[id]; s != nil {
		ev = Event{Kind: EventReset, Stream: id, Code: code}
		if !c.isPeerID(id) && s.remoteOpen() {
			c.owedHeaders += 2
		}
		c.retire(s, true)
	} else {
		c.recent[c.recentIdx] = closedStream{id: id, resetUs: true}
		c.recentIdx = (c.recentIdx + 1) % maxRecentClosed
	}
	if err := c.queue(); err != nil {
		return ev, err
	}
	if provoked && !c.resets.take(now) {
		return ev, c.fail(errRapidReset, GuardRapidReset)
	}
	return ev, nil
}

// giveBack returns n received bytes that no owner will consume (padding, frames on closed streams) to the
// connection window.
func (c *Conn) giveBack(n int) error {
	if incr := c.connRecv.consume(n, c.connWin); incr > 0 {
		c.out = AppendWindowUpdate(c.out, 0, incr)
		return c.queue()
	}
	return nil
}

// noteEmpty counts consecutive frames without payload and without END_STREAM.
func (c *Conn) noteEmpty(empty bool) error {
	if !empty {
		c.emptyRun = 0
		return nil
	}
	c.emptyRun++
	if c.emptyRun > c.lim.MaxEmptyFrames {
		return c.fail(errEmptyFrames, GuardEmptyFrames)
	}
	return nil
}

func (c *Conn) data(now int64, h FrameHeader, payload []byte) (Event, error) {
	data, _ := DataPayload(h, payload) // checked by CheckFrame
	end := h.Flags.Has(FlagEndStream)
	if !c.connRecv.take(h.Length, 0) {
		return Event{}, c.fail(errConnRecvWindow, noGuard)
	}
	if err := c.noteEmpty(len(data) == 0 && !end); err != nil {
		return Event{}, err
	}
	s := c.streams[h.StreamID]
	if s == nil || !s.remoteOpen() {
		if err := c.giveBack(int(h.Length)); err != nil {
			return Event{}, err
		}
		if c.afterGoAway(h.StreamID) {
			return Event{}, nil // a stream this side's GOAWAY said it will not process (§6.8)
		}
		if s == nil && c.idle(h.StreamID) {
			return Event{}, c.fail(errIdleStream, noGuard)
		}
		if _, resetUs := c.recentlyClosed(h.StreamID); s == nil && (resetUs || !c.isPeerID(h.StreamID)) {
			// In flight when this side reset the stream (§5.4.2), or on a stream of this side's that ended
			// before the recently closed ones (see closedHeaders): ignore. Flow control bounds how many.
			return Event{}, nil
		}
		return c.resetStream(now, h.StreamID, ErrCodeStreamClosed, GuardClosedStream, true)
	}
	if s.headersIn == 0 {
		// Only on a stream this side opened (the peer's begin with their HEADERS): a response begins with
		// its head (RFC 9113 §8.1), so DATA first is malformed (§8.1.1), a stream error PROTOCOL_ERROR.
		// The owner gets EventReset, never the bytes, which go back to the connection window (the stream's
		// window ends with the stream).
		if err := c.giveBack(int(h.Length)); err != nil {
			return Event{}, err
		}
		return c.resetStream(now, h.StreamID, ErrCodeProtocol, noGuard, true)
	}
	if !s.recv.take(h.Length, c.recvSlack()) {
		if err := c.giveBack(int(h.Length)); err != nil {
			return Event{}, err
		}
		return c.resetStream(now, h.StreamID, ErrCodeFlowControl, noGuard, true)
	}
	if pad := int(h.Length) - len(data); pad > 0 {
		// Padding is never the owner's to consume: hand it back at once.
		s.recv.avail += int64(pad)
		if err := c.giveBack(pad); err != nil {
			return Event{}, err
		}
	}
	ev := Event{Kind: EventData, Stream: s.id, Data: data, EndStream: end}
	if end {
		s.closeRemote()
		if s.state == StateClosed {
			c.retire(s, false)
		}
	}
	return ev, nil
}

// Consumed tells the Conn that the owner is done with n bytes of a stream's DATA (forwarded or dropped):
// WINDOW_UPDATEs go to Output once half a window is consumed, so the peer sends no more than the owner can
// take. A stream that is gone only returns its bytes to the connection window. It is ConsumedConn and
// ConsumedStream at once.
func (c *Conn) Consumed(id uint32, n int) error {
	if err := c.ConsumedConn(n); err != nil {
		return err
	}
	return c.ConsumedStream(id, n)
}

// ConsumedConn hands n bytes of received DATA back to the connection window alone. An owner that keeps a
// stream's bytes itself (bounded by the stream's window, and by its own budget) calls it on receipt, so
// that one stream whose bytes cannot move on holds only its own window, never the connection's: the other
// streams keep flowing. It calls ConsumedStream when the bytes are gone, never Consumed (that would hand
// the connection's share back twice). At most ConnHeld goes back: an owner's slip cannot open the
// connection window past what this side announced.
func (c *Conn) ConsumedConn(n int) error {
	if c.err != nil || n <= 0 {
		return c.Err()
	}
	return c.giveBack(int(min(int64(n), c.ConnHeld())))
}

// ConnHeld is how many received DATA bytes (padding included) have not been handed back to the connection
// window yet: what the owner still holds of it. A connection at rest whose owner keeps nothing holds 0.
func (c *Conn) ConnHeld() int64 {
	return max(int64(c.connWin)-c.connRecv.avail-c.connRecv.unacked, 0)
}

// ConsumedStream hands n bytes of a stream's DATA back to the stream's window alone (see ConsumedConn).
func (c *Conn) ConsumedStream(id uint32, n int) error {
	if c.err != nil || n <= 0 {
		return c.Err()
	}
	if s := c.streams[id]; s != nil && s.remoteOpen() {
		if incr := s.recv.consume(n, c.local.InitialWindowSize); incr > 0 {
			c.out = AppendWindowUpdate(c.out, id, incr)
			return c.queue()
		}
	}
	return nil
}

func (c *Conn) headers(now int64, h FrameHeader, payload []byte) (Event, error) {
	block, end, done, err := c.asm.Add(h, payload)
	if err != nil {
		g := noGuard
		if err == errBlockTooLarge || err == errTooManyContinuals {
			g = GuardContinuation
		}
		return Event{}, c.fail(err.(*ConnError), g)
	}
	if !done {
		frag, _ := HeaderBlockFragment(h, payload)
		return Event{}, c.noteEmpty(len(frag) == 0)
	}
	if err := c.noteEmpty(false); err != nil {
		return Event{}, err
	}
	id := c.asm.Stream()
	if h.Type == FrameHeaders {
		id = h.StreamID
	}
	// Decode first, whatever becomes of the stream: the HPACK state must follow the peer's.
	fields, overList, err := c.dec.Decode(block)
	if err != nil {
		return Event{}, c.fail(err.(*ConnError), noGuard)
	}
	if s := c.streams[id]; s != nil {
		return c.moreHeaders(now, s, fields, overList, end)
	}
	if !c.isPeerID(id) {
		if c.role == RoleClient && id%2 == 0 {
			return Event{}, c.fail(errStreamIDParity, GuardStreamID)
		}
		if c.idle(id) {
			return Event{}, c.fail(errIdleStream, GuardStreamID)
		}
		return c.closedHeaders(now, id)
	}
	if c.role == RoleClient {
		return Event{}, c.fail(errStreamIDParity, GuardStreamID)
	}
	if id <= c.lastPeer {
		return c.closedHeaders(now, id)
	}
	if c.afterGoAway(id) {
		return Event{}, nil // §6.8: streams above our GOAWAY's last id are ignored (already decoded)
	}
	c.lastPeer = id
	switch {
	case overList:
		return c.resetStream(now, id, ErrCodeEnhanceYourCalm, GuardHeaderList, true)
	case !CheckRequestHeaders(fields):
		return c.resetStream(now, id, ErrCodeProtocol, noGuard, true)
	case c.peerOpen >= int(c.local.MaxConcurrentStreams):
		// Before the peer acknowledged the limit it may not know it: refuse (retryable) but do not blame it.
		return c.resetStream(now, id, ErrCodeRefusedStream, GuardTooManyStreams, c.acked)
	}
	s := c.newStream(id)
	c.peerOpen++
	s.headersIn = 1
	if end {
		s.closeRemote()
	}
	return Event{Kind: EventHeaders, Stream: id, Fields: fields, EndStream: end}, nil
}

// closedHeaders handles a header block for a stream that is no longer tracked.
//
// On a stream this side opened (client role), what it cannot tell apart is ignored: the memory of
// recently closed streams holds maxRecentClosed, and a client that resets a hundred streams at once
// (Stormgate cancelling the calls of a consumer it closed) still gets their heads and trailers, sent
// before the peer saw the RST_STREAMs (RFC 9113 §5.1: they MUST be ignored). Those are owed (owedHeaders)
// and free; any more cost the control budget. On the peer's streams an id it has used before and that
// is not remembered as closed is a stream id going backwards.
func (c *Conn) closedHeaders(now int64, id uint32) (Event, error) {
	found, resetUs := c.recentlyClosed(id)
	switch {
	case found && !resetUs:
		return Event{}, c.fail(errClosedHeaders, GuardClosedStream)
	case !c.isPeerID(id) && c.owedHeaders > 0:
		c.owedHeaders--
		return Event{}, nil
	case found || !c.isPeerID(id):
		// Sent before the peer saw this side's RST_STREAM (§5.4.2): already decoded, now ignored.
		return Event{}, c.spendControl(now, GuardControlFlood, errControlFlood)
	}
	return Event{}, c.fail(errStreamIDOrder, GuardStreamID)
}

// moreHeaders handles a header section on a tracked stream: a response head (client role) or trailers.
func (c *Conn) moreHeaders(now int64, s *stream, fields []HeaderField, overList, end bool) (Event, error) {
	if !s.remoteOpen() {
		return c.resetStream(now, s.id, ErrCodeStreamClosed, GuardClosedStream, true)
	}
	trailers := s.headersIn > 0
	var ok bool
	switch {
	case trailers:
		ok = end && CheckTrailers(fields) // trailers end the stream (§8.1)
	case c.role == RoleClient:
		ok = CheckResponseHeaders(fields)
	default:
		ok = CheckRequestHeaders(fields)
	}
	if overList {
		return c.resetStream(now, s.id, ErrCodeEnhanceYourCalm, GuardHeaderList, true)
	}
	if !ok {
		return c.resetStream(now, s.id, ErrCodeProtocol, noGuard, true)
	}
	s.headersIn++
	ev := Event{Kind: EventHeaders, Stream: s.id, Fields: fields, EndStream: end, Trailers: trailers}
	if end {
		s.closeRemote()
		if s.state == StateClosed {
			c.retire(s, false)
		}
	}
	return ev, nil
}

func (c *Conn) rstStream(now int64, h FrameHeader, payload []byte) (Event, error) {
	id, code := h.StreamID, RSTCode(payload)
	s := c.streams[id]
	if s == nil {
		if c.afterGoAway(id) {
			return Event{}, nil
		}
		if c.idle(id) {
			return Event{}, c.fail(errIdleStream, noGuard)
		}
		// A stream that already ended: RST_STREAM may cross this side's END_STREAM (§5.1).
		if c.spendCredit() {
			return Event{}, nil
		}
		return Event{}, c.spendControl(now, GuardControlFlood, errControlFlood)
	}
	c.c.ResetsReceived++
	c.c.ResetsReceivedByCode[code.Class()]++
	// A stream the peer opened and cancelled before its answer was complete is the rapid-reset pattern
	// (CVE-2023-44487) when it repeats faster than the budget.
	charge := c.isPeerID(id) && s.localOpen()
	c.retire(s, false)
	ev := Event{Kind: EventReset, Stream: id, Code: code, ByPeer: true}
	if charge && !c.resets.take(now) {
		return ev, c.fail(errRapidReset, GuardRapidReset)
	}
	return ev, nil
}

func (c *Conn) settings(now int64, h FrameHeader, payload []byte) (Event, error) {
	if h.Flags.Has(FlagAck) {
		if c.acked {
			return Event{}, c.spendControl(now, GuardSettingsFlood, errSettingsFlood)
		}
		c.acked = true
		c.dec.TableSizeAcked(c.local.HeaderTableSize)
		if d := int64(c.local.InitialWindowSize) - DefaultInitialWindowSize; d != 0 {
			for _, s := range c.streams {
				s.recv.avail += d
				s.recv.late = max(-d, 0) // a smaller window: what the peer took before it read it may follow
			}
		}
		return Event{}, nil
	}
	if c.c.Frames > 1 {
		if err := c.spendControl(now, GuardSettingsFlood, errSettingsFlood); err != nil {
			return Event{}, err
		}
	}
	old, oldTable := c.peer.InitialWindowSize, c.peer.HeaderTableSize
	if err := c.peer.Apply(payload); err != nil {
		return Event{}, c.fail(err.(*ConnError), noGuard)
	}
	if c.peer.HeaderTableSize < oldTable {
		c.encUpdate = true
	}
	if d := int64(c.peer.InitialWindowSize) - int64(old); d != 0 {
		for _, s := range c.streams {
			if int64(s.send)+d > MaxWindowSize {
				return Event{}, c.fail(errSettingsOverflow, noGuard)
			}
			s.send += sendWindow(d)
		}
	}
	c.out = AppendSettingsAck(c.out)
	if err := c.queue(); err != nil {
		return Event{}, err
	}
	return Event{Kind: EventSettings}, nil
}

func (c *Conn) ping(now int64, h FrameHeader, payload []byte) (Event, error) {
	data := PingData(payload)
	if h.Flags.Has(FlagAck) {
		return Event{Kind: EventPingAck, Ping: data}, nil
	}
	if !c.spendCredit() {
		if err := c.spendControl(now, GuardPingFlood, errPingFlood); err != nil {
			return Event{}, err
		}
	}
	c.out = AppendPing(c.out, true, data)
	c.c.PingsAnswered++
	return Event{}, c.queue()
}

func (c *Conn) windowUpdate(now int64, h FrameHeader, payload []byte) (Event, error) {
	incr := WindowIncrement(payload)
	if h.StreamID == 0 {
		if !c.connSend.grow(incr) {
			return Event{}, c.fail(errConnWindowOverflow, noGuard)
		}
	} else {
		s := c.streams[h.StreamID]
		if s == nil {
			if c.afterGoAway(h.StreamID) {
				return Event{}, nil
			}
			if c.idle(h.StreamID) {
				return Event{}, c.fail(errIdleStream, noGuard)
			}
			// Closed: WINDOW_UPDATEs may trail the stream's end (§5.1); ignore.
			if c.spendCredit() {
				return Event{}, nil
			}
			return Event{}, c.spendControl(now, GuardControlFlood, errControlFlood)
		}
		if !s.send.grow(incr) {
			return c.resetStream(now, s.id, ErrCodeFlowControl, noGuard, true)
		}
	}
	if !c.spendCredit() {
		if err := c.spendControl(now, GuardControlFlood, errControlFlood); err != nil {
			return Event{}, err
		}
	}
	return Event{Kind: EventWindow, Stream: h.StreamID}, nil
}

// OpenStream opens a new stream from this side (client role): the next odd id, never reused. It fails with
// ErrNoStream when the peer's SETTINGS_MAX_CONCURRENT_STREAMS is reached, after the peer's GOAWAY, or when
// the ids are used up.
func (c *Conn) OpenStream() (uint32, error) {
	if c.role != RoleClient {
		return 0, ErrRole
	}
	if c.err != nil || c.goAwayRecv || c.goAwaySent || c.nextOwn > MaxStreamID ||
		uint64(c.ownOpen) >= uint64(c.peer.MaxConcurrentStreams) {
		return 0, ErrNoStream
	}
	id := c.nextOwn
	c.nextOwn += 2
	c.newStream(id)
	c.ownOpen++
	return id, nil
}

// OwnStreamIDsLeft reports whether the connection has stream ids of its own left to open streams with.
// A connection has 2^30 (RFC 9113 §5.1.1) and never reuses one; a client that used them up must open a
// new connection (the owner retires this one as after a GOAWAY).
func (c *Conn) OwnStreamIDsLeft() bool { return c.nextOwn <= MaxStreamID }

// CanOpenStream reports whether OpenStream would succeed.
func (c *Conn) CanOpenStream() bool {
	return c.role == RoleClient && c.err == nil && !c.goAwayRecv && !c.goAwaySent && c.nextOwn <= MaxStreamID &&
		uint64(c.ownOpen) < uint64(c.peer.MaxConcurrentStreams)
}

// AppendHeaders appends a header section for stream id (HEADERS plus CONTINUATION frames, stateless HPACK,
// split at the peer's SETTINGS_MAX_FRAME_SIZE) to dst: a request head on a stream from OpenStream, a
// response head on a stream the peer opened, or trailers (endStream). It fails with ErrStreamNotOpen when
// this side may no longer send on the stream.
func (c *Conn) AppendHeaders(dst []byte, id uint32, fields []HeaderField, endStream bool) ([]byte, error) {
	s := c.streams[id]
	if c.err != nil || s == nil || !s.localOpen() {
		return dst, ErrStreamNotOpen
	}
	// The block is encoded after room for one frame header, which is filled in when the block fits one
	// frame; a larger block is re-framed into HEADERS + CONTINUATION.
	start := len(dst)
	dst = AppendFrameHeader(dst, FrameHeader{})
	if c.encUpdate {
		dst = append(dst, 0x20) // dynamic table size update: 0
		c.encUpdate = false
	}
	dst = AppendFields(dst, fields)
	block := dst[start+FrameHeaderLen:]
	if uint32(len(block)) <= c.peer.MaxFrameSize {
		f := FlagEndHeaders
		if endStream {
			f |= FlagEndStream
		}
		putFrameHeader(dst[start:], FrameHeader{Length: uint32(len(block)), Type: FrameHeaders, Flags: f, StreamID: id})
	} else {
		tmp := append([]byte(nil), block...)
		dst = AppendHeaderBlock(dst[:start], id, tmp, endStream, c.peer.MaxFrameSize)
	}
	s.headersOut++
	c.earnCredit()
	if endStream {
		c.endLocal(s)
	}
	return dst, nil
}

func (c *Conn) endLocal(s *stream) {
	s.closeLocal()
	s.blockedSince = 0
	if s.state == StateClosed {
		c.retire(s, false)
	}
}

// SendWindow is how many DATA bytes this side may send on stream id now (the smaller of the stream's and
// the connection's windows; 0 when the stream is not open for sending).
func (c *Conn) SendWindow(id uint32) int {
	s := c.streams[id]
	if c.err != nil || s == nil || !s.localOpen() {
		return 0
	}
	return int(max(0, min(int64(s.send), int64(c.connSend))))
}

// AppendData appends DATA frames for stream id carrying as much of data as the flow-control windows allow
// (never more), each at most the peer's SETTINGS_MAX_FRAME_SIZE, and returns how many bytes of data it
// took. endStream sets END_STREAM on the last frame once all of data is taken (an empty data with endStream
// sends an empty DATA frame, which needs no window). When not all of data fits, the stream counts as
// blocked from the last call that sent a byte of it: CheckStalls resets it if no more window comes
// within Limits.StallTimeout (a peer that reads slowly is not stalled; one that stops reading is).
func (c *Conn) AppendData(now int64, dst []byte, id uint32, data []byte, endStream bool) ([]byte, int, error) {
	s := c.streams[id]
	if c.err != nil || s == nil || !s.localOpen() {
		return dst, 0, ErrStreamNotOpen
	}
	sent := 0
	for {
		n := min(len(data)-sent, int(c.peer.MaxFrameSize), c.SendWindow(id))
		last := sent+n == len(data)
		if n == 0 && !(last && endStream) {
			break
		}
		var f Flags
		if last && endStream {
			f = FlagEndStream
		}
		dst = AppendFrameHeader(dst, FrameHeader{Length: uint32(n), Type: FrameData, Flags: f, StreamID: id})
		dst = append(dst, data[sent:sent+n]...)
		s.send -= sendWindow(n)
		c.connSend -= sendWindow(n)
		sent += n
		c.earnCredit()
		if last {
			break
		}
	}
	if sent < len(data) {
		if s.blockedSince == 0 || sent > 0 {
			s.blockedSince = now
		}
		return dst, sent, nil
	}
	s.blockedSince = 0
	if endStream {
		c.endLocal(s)
	}
	return dst, sent, nil
}

// CheckStalls resets (RST_STREAM CANCEL) one stream that has wanted to send with no window for longer than
// Limits.StallTimeout, and returns its id; ok is false when there is none. The owner calls it from its
// timer until ok is false, then drops what it had queued for those streams.
func (c *Conn) CheckStalls(now int64) (id uint32, ok bool, err error) {
	for _, s := range c.streams {
		if s.blockedSince != 0 && now-s.blockedSince >= int64(c.lim.StallTimeout) {
			id := s.id
			_, err := c.resetStream(now, id, ErrCodeCancel, GuardZeroWindow, true)
			return id, true, err
		}
	}
	return 0, false, nil
}

// NextStall returns when CheckStalls will next find a stream to reset if no window comes meanwhile: the
// time an owner's timer should fire. ok is false when no stream is waiting for a window.
func (c *Conn) NextStall() (at int64, ok bool) {
	for _, s := range c.streams {
		if s.blockedSince != 0 && (!ok || s.blockedSince < at) {
			at, ok = s.blockedSince, true
		}
	}
	if ok {
		at += int64(c.lim.StallTimeout)
	}
	return at, ok
}

// SetStallTimeout changes Limits.StallTimeout (a zero or negative d: the default) for the checks from
// now on.
func (c *Conn) SetStallTimeout(d time.Duration) {
	orDefault(&d, DefaultLimits().StallTimeout)
	c.lim.StallTimeout = d
}

// Reset resets a stream on the owner's behalf (e.g. its consumer went away, its provider connection was
// lost): RST_STREAM(code) in Output. It does not take from the peer's reset budget.
func (c *Conn) Reset(id uint32, code ErrCode) error {
	if c.err != nil {
		return c.err
	}
	if c.streams[id] == nil {
		return ErrStreamNotOpen
	}
	_, err := c.resetStream(0, id, code, noGuard, false)
	return err
}

// Ping queues a PING with data (this side's keepalive); its answer arrives as EventPingAck.
func (c *Conn) Ping(data [8]byte) {
	if c.err == nil {
		c.out = AppendPing(c.out, false, data)
	}
}

// GoAwayGracefully queues the first of a graceful shutdown's two GOAWAYs (RFC 9113 §6.8): NO_ERROR naming
// the largest stream id, so the streams the peer is opening right now are still served, followed by a PING
// with ping; once its answer arrives (EventPingAck) the peer has seen the GOAWAY, and GoAway(ErrCodeNo, …)
// names the real last stream.
func (c *Conn) GoAwayGracefully(debug string, ping [8]byte) {
	if c.err != nil || c.goAwaySent {
		return
	}
	c.goAwaySent, c.goAwayLast = true, MaxStreamID
	c.c.GoAwaySent, c.c.GoAwayCode = true, ErrCodeNo
	c.c.GoAwaysSent++
	c.out = AppendGoAway(c.out, MaxStreamID, ErrCodeNo, debug)
	c.out = AppendPing(c.out, false, ping)
}

// GoAway queues a GOAWAY with code: the peer's streams up to the last one seen are still served; later ones
// are ignored. It does not end the Conn; with a code other than NO_ERROR the owner should close after
// writing Output.
func (c *Conn) GoAway(code ErrCode, debug string) {
	if c.err != nil {
		return
	}
	last := c.lastPeer
	if c.goAwaySent {
		last = min(last, c.goAwayLast)
	}
	c.goAwaySent, c.goAwayLast = true, last
	c.c.GoAwaySent, c.c.GoAwayCode = true, code
	c.c.GoAwaysSent++
	c.out = AppendGoAway(c.out, last, code, debug)
}
