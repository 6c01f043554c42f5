package proxy

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudwego/netpoll"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/stormgate/stormgate/proxy/h2snap"
)

// A handover moves the whole data plane to another process (Stormgate's own
// upgrade) without closing a connection: Freeze stops it at frame boundaries and
// returns a Snapshot; the new process (the same PID after execve) passes it to
// Restore. Nothing in flight is lost or answered twice: every consumer and provider
// socket moves (its fd survives exec), and with each its unread bytes, its unsent
// bytes, and the books (pending tables, hold queues). If the handover fails before
// exec, Thaw resumes this process where it stopped.
//
//	| step (Freeze)            | what stops                                  | why
//	|--------------------------|---------------------------------------------|------------------------------------------
//	| 1 stash                  | handlers keep what they read, handle none   | the books stop changing from the wire
//	| 2 timers, dialers        | the wheel; the pools' reconnect loops       | no expiry, heartbeat or new connection
//	| 3 hold writers           | write(2); senders still queue               | what is unsent is known and stays ours
//	| 4 wait for tasks         | a fail, a flusher in progress               | their answers land in the held queues
//	| 5 park every poller      | netpoll reads nothing more                  | the stash is final
//	| 6 snapshot               |                                             | copies (handover.Exec keeps its sockets)
//
// Parking: with handlers on the pollers (ConfigureNetpoll), a handler that blocks
// blocks its poller. In step 5 every handler blocks after stashing, and one trigger
// connection per poller makes sure each poller runs one. netpoll cannot detach a
// connection from inside such a handler (see writer.close), so Freeze never detaches:
// the process image that ran the pollers is replaced by exec.

// handoverGate is what the handlers consult (holding, park).
type handoverGate struct {
	quiescing atomic.Bool // quiesce: the protocol beside Dubbo is brought to rest (Protocol.Quiesce)
	stashing  atomic.Bool
	parking   atomic.Bool
	parked    atomic.Int32
	mu        sync.Mutex
	release   chan struct{} // closed by thaw to unpark the pollers
	onPark    chan struct{} // a poller parked (parkPollers counts them); one slot, never blocks park
	peers     []int         // the other ends of the trigger connections

	// The bytes consumers sent while stashing, not yet handled: kept here rather than
	// in every session, since only a handover needs them.
	smu     sync.Mutex
	stashes map[*session][]byte
}

// stash keeps what a consumer's handler found to read while stashing.
func (g *handoverGate) stash(ss *session, r netpoll.Reader) {
	g.smu.Lock()
	if g.stashes == nil {
		g.stashes = make(map[*session][]byte)
	}
	if b := stashAll(g.stashes[ss], r); len(b) > 0 {
		g.stashes[ss] = b
	}
	g.smu.Unlock()
}

// stashed returns a consumer's stashed bytes.
func (g *handoverGate) stashed(ss *session) []byte {
	g.smu.Lock()
	defer g.smu.Unlock()
	return g.stashes[ss]
}

// takeStashes returns every consumer's stashed bytes and forgets them.
func (g *handoverGate) takeStashes() map[*session][]byte {
	g.smu.Lock()
	defer g.smu.Unlock()
	m := g.stashes
	g.stashes = nil
	return m
}

// holding reports whether handlers must stash instead of handling.
func (g *handoverGate) holding() bool { return g.stashing.Load() }

// park blocks the calling handler (and so its poller) while the pollers are parked.
func (g *handoverGate) park() {
	if !g.parking.Load() {
		return
	}
	g.mu.Lock()
	ch, onPark := g.release, g.onPark
	g.mu.Unlock()
	g.parked.Add(1)
	select {
	case onPark <- struct{}{}:
	default: // parkPollers has a wake-up pending: it counts again
	}
	<-ch
	g.parked.Add(-1)
}

// stashAll appends every byte r holds to dst and releases them.
func stashAll(dst []byte, r netpoll.Reader) []byte {
	if n := r.Len(); n > 0 {
		b, _ := r.Next(n)
		dst = append(dst, b...)
	}
	_ = r.Release()
	return dst
}

// Snapshot is the data plane's state at a handover. It refers to sockets by fd number:
// valid in this process, and in the process image exec starts (handover.Exec clears FD_CLOEXEC on
// FDs, and only on them).
type Snapshot struct {
	Taken    time.Time         `json:"taken"` // on the freezing server's clock (Options.Clock)
	Sessions []SessionSnapshot `json:"sessions"`
	Pools    []PoolSnapshot    `json:"pools"`

	decoded time.Duration // how long UnmarshalBinary took, of size bytes
	size    int
	compact bool // MarshalBinary writes the consumers as one blob (SetCompact)
}

// SessionSnapshot is one consumer connection.
type SessionSnapshot struct {
	Proto   string             `json:"proto,omitempty"` // "" Dubbo, "unknown" (In decides), "h2" (H2)
	H2      *H2SessionSnapshot `json:"h2,omitempty"`
	FD      int                `json:"fd"`
	Remote  string             `json:"remote"`
	Port    uint16             `json:"port"`           // pool key: the original destination port in transparent mode, else 0
	Idle    time.Duration      `json:"idle"`           // since the consumer last sent anything
	In      []byte             `json:"in,omitempty"`   // read, not handled: a partial frame and what followed
	Skip    int                `json:"skip,omitempty"` // bytes of a refused frame still to discard
	Out     []byte             `json:"out,omitempty"`  // not written yet; Out[:Sent] went out already
	Sent    int                `json:"sent,omitempty"`
	Partial time.Duration      `json:"partial,omitempty"` // age of the partial frame, for frame_read_timeout
}

// The protocols of SessionSnapshot.Proto. Snapshots from before HTTP/2 have none: Dubbo.
const (
	SnapDubbo   = ""
	SnapUnknown = "unknown" // not decided yet: its first bytes (In) decide, as they would have
	SnapH2      = "h2"      // HTTP/2: H2
)

// The HTTP/2 part of a consumer's snapshot (package h2snap: the protocol writes and reads it, the core
// carries it).
type (
	H2SessionSnapshot = h2snap.Session
	H2CallSnapshot    = h2snap.Call
	H2KeptSnapshot    = h2snap.Kept
)

// PoolSnapshot is one provider address: its connections and its hold queue.
type PoolSnapshot struct {
	Addr         string           `json:"addr"`
	Port         uint16           `json:"port"`
	ReadonlySent bool             `json:"readonly_sent,omitempty"`
	Conns        []UpConnSnapshot `json:"conns"`
	Held         []HeldSnapshot   `json:"held,omitempty"`
}

// UpConnSnapshot is one provider connection with its pending table.
type UpConnSnapshot struct {
	FD      int               `json:"fd"`
	Slot    int               `json:"slot"`
	State   int32             `json:"state"`
	NextID  int64             `json:"next_id"`
	In      []byte            `json:"in,omitempty"`
	Skip    int               `json:"skip,omitempty"`
	Out     []byte            `json:"out,omitempty"`
	Sent    int               `json:"sent,omitempty"`
	Pending []PendingSnapshot `json:"pending,omitempty"`
}

// PendingSnapshot is one request on a provider connection.
type PendingSnapshot struct {
	UpstreamID int64         `json:"up"`
	Session    int           `json:"s"` // index in Sessions; -1: the consumer left; -2: Stormgate's heartbeat
	ID         int64         `json:"id"`
	Serial     byte          `json:"ser"`
	Age        time.Duration `json:"age"`
	Off        uint64        `json:"off"` // offset in the connection's Out; with N 0: written before it
	N          int           `json:"n"`
}

// HeldSnapshot is one held request.
type HeldSnapshot struct {
	Session int           `json:"s"`
	ID      int64         `json:"id"`
	Serial  byte          `json:"ser"`
	Age     time.Duration `json:"age"`
	Frame   []byte        `json:"frame"`
}

// FDs lists every socket the snapshot refers to.
func (sn *Snapshot) FDs() []int {
	var fds []int
	for _, s := range sn.Sessions {
		fds = append(fds, s.FD)
	}
	for _, p := range sn.Pools {
		for _, c := range p.Conns {
			fds = append(fds, c.FD)
		}
	}
	return fds
}

// MarshalBinary encodes the snapshot: JSON, or, when SetCompact said so, compactMagic, the JSON's
// length, the JSON without the consumers, and the consumers as one blob after it (handover_compact.go:
// outside the JSON, which would scan it byte by byte twice).
func (sn *Snapshot) MarshalBinary() ([]byte, error) {
	if !sn.compact {
		return json.Marshal(sn)
	}
	c := *sn
	c.Sessions = nil
	js, err := json.Marshal(&c)
	if err != nil {
		return nil, err
	}
	b := append([]byte(compactMagic), binary.AppendUvarint(nil, uint64(len(js)))...)
	return appendSessions(append(b, js...), sn.Sessions)
}

// compactMagic opens a snapshot written compact (JSON opens with '{').
const compactMagic = "SGC"

// UnmarshalBinary decodes what MarshalBinary wrote, compact or not (the restore logs how long it took).
func (sn *Snapshot) UnmarshalBinary(b []byte) error {
	start := time.Now()
	defer func() { sn.decoded, sn.size = time.Since(start), len(b) }()
	defer debug.SetGCPercent(debug.SetGCPercent(-1)) // as restore: all of it is live
	rest, ok := bytes.CutPrefix(b, []byte(compactMagic))
	if !ok {
		return json.Unmarshal(b, sn)
	}
	n, k := binary.Uvarint(rest)
	if k <= 0 || n > uint64(len(rest)-k) {
		return errCompact
	}
	if err := json.Unmarshal(rest[k:k+int(n)], sn); err != nil {
		return err
	}
	var err error
	sn.Sessions, err = parseSessions(rest[k+int(n):])
	return err
}

// ErrFrozen is returned by Freeze when a handover is already under way.
var ErrFrozen = errors.New("proxy: already frozen for a handover")

// Freeze stops the data plane at frame boundaries and returns its state (see the
// table above). Afterwards the Server handles nothing until Thaw; the caller execs
// the new process with the snapshot, or calls Thaw if it cannot. Freeze the listener
// (admission) first: a connection handed to ServeFD during a freeze is lost. ctx
// bounds the wait for the pollers to park. With Triple on, HTTP/2 is quiesced first
// (proxy/triple/handover.go): a call on a provider stream that does not end within
// h2QuiesceBudget makes Freeze fail, with everything serving as before.
func (s *Server) Freeze(ctx context.Context) (*Snapshot, error) {
	return s.FreezeWith(ctx, FreezeOptions{})
}

// FreezeOptions changes what Freeze does with what will not come to rest.
type FreezeOptions struct {
	// EndOpenCalls: HTTP/2 calls still on provider streams (or still sending their answer to a consumer
	// that does not read) when the quiesce's budget is up are ended, rather than the freeze failing: the
	// consumer gets grpc-status 14 UNAVAILABLE saying why, the provider's stream is reset (CANCEL), and the
	// consumer's connection is handed over with the others. For long streams (server, client or
	// bidirectional streaming), which may stay open for hours; a unary call still running after the budget
	// ends the same way, and may have run (`sidecar upgrade --end-streams`).
	EndOpenCalls bool
}

// FreezeWith is Freeze with options.
func (s *Server) FreezeWith(ctx context.Context, opts FreezeOptions) (*Snapshot, error) {
	if !netpollInline() {
		return nil, errors.New("proxy: Freeze needs handlers on the pollers (ConfigureNetpoll)")
	}
	if s.handover.stashing.Load() || s.handover.quiescing.Load() {
		return nil, ErrFrozen
	}
	triple := s.cfg.Load().Protocols.Triple()
	for attempt := 1; ; attempt++ {
		if triple {
			if err := s.quiesce(ctx, opts.EndOpenCalls); err != nil {
				return nil, fmt.Errorf("proxy: freeze: %w", err)
			}
		}
		sn, err := s.freeze(ctx)
		// A consumer's frame read between the quiesce and the parking can leave its connection
		// not at rest (a header block half read): thawed, quiesce again.
		if errors.Is(err, ErrNotAtRest) && attempt < 3 {
			s.log.Info("an HTTP/2 connection moved during the freeze; quiescing again", zap.Error(err))
			continue
		}
		return sn, err
	}
}

// freeze is Freeze's work after the quiesce: stop, park, copy.
func (s *Server) freeze(ctx context.Context) (*Snapshot, error) {
	g := &s.handover
	if !g.stashing.CompareAndSwap(false, true) {
		return nil, ErrFrozen
	}
	start := s.clock.Now()
	g.mu.Lock()
	g.release = make(chan struct{})
	if g.onPark == nil {
		g.onPark = make(chan struct{}, 1)
	}
	g.mu.Unlock()

	s.stopWheel()
	pools := s.poolList()
	for _, p := range pools {
		p.dubbo.freeze()
	}
	s.eachWriter(func(w *Writer) { w.hold() })
	s.tasks.Wait()
	if err := g.parkPollers(ctx); err != nil {
		s.Thaw()
		return nil, fmt.Errorf("proxy: freeze: %w", err)
	}
	sn, err := s.snapshot(pools)
	if err != nil {
		s.Thaw()
		return nil, fmt.Errorf("proxy: freeze: %w", err)
	}
	s.log.Info("data plane frozen for a handover", zap.Int("consumers", len(sn.Sessions)),
		zap.Int("pools", len(sn.Pools)), zap.Duration("took", s.clock.Now().Sub(start)))
	return sn, nil
}

// parkPollers blocks every netpoll poller in a handler: one trigger connection per
// poller (netpoll assigns new connections to pollers round robin) gets one byte.
func (g *handoverGate) parkPollers(ctx context.Context) error {
	g.parking.Store(true)
	n := Pollers()
	for range 2 * n {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		c, err := netpoll.NewFDConnection(fds[0])
		if err != nil {
			unix.Close(fds[0])
			unix.Close(fds[1])
			return err
		}
		_ = c.SetOnRequest(func(_ context.Context, c netpoll.Connection) error {
			r := c.Reader()
			_ = r.Skip(r.Len())
			_ = r.Release()
			g.park()
			return nil
		})
		g.peers = append(g.peers, fds[1])
		_, _ = unix.Write(fds[1], []byte{1})
	}
	for int(g.parked.Load()) < n {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d pollers parked: %w", g.parked.Load(), n, ctx.Err())
		case <-g.onPark:
		}
	}
	return nil
}

// Thaw resumes a frozen Server in this process: what was read meanwhile is handled,
// writers write again, timers and reconnect loops run. A no-op when not frozen.
func (s *Server) Thaw() {
	g := &s.handover
	if !g.stashing.Load() {
		return
	}
	// The pollers are parked (or never were): nothing else touches the stashes now.
	for _, p := range s.poolList() {
		for uc := range p.dubbo.conns() {
			if len(uc.stash) > 0 {
				in := uc.stash
				uc.stash = nil
				uc.consume(&sliceSource{b: in})
			}
		}
	}
	for ss, in := range g.takeStashes() {
		ss.handleStashed(in)
	}
	s.eachWriter(func(w *Writer) { w.resume(nil, 0) })
	g.stashing.Store(false)
	g.parking.Store(false)
	g.mu.Lock()
	close(g.release)
	peers := g.peers
	g.peers = nil
	g.mu.Unlock()
	for _, fd := range peers {
		// The trigger's end sees the hangup and netpoll closes it from its poller: a
		// netpoll Close here could race its handler's return (see writer.close).
		_ = unix.Close(fd)
	}
	s.startWheel()
	for _, p := range s.poolList() {
		p.dubbo.thaw()
	}
	s.resume()
	s.log.Info("data plane thawed: serving again in this process")
}

// quiesce brings the protocol beside Dubbo to rest before a freeze (Protocol.Quiesce: HTTP/2 calls end or
// wait, proxy/triple/handover.go); Thaw resumes it. On an error it is resumed already.
func (s *Server) quiesce(ctx context.Context, endOpen bool) error {
	s.handover.quiescing.Store(true)
	if err := s.protocols[protoH2].Quiesce(ctx, endOpen); err != nil {
		s.handover.quiescing.Store(false)
		return err
	}
	return nil
}

// resume undoes quiesce.
func (s *Server) resume() {
	if s.handover.quiescing.CompareAndSwap(true, false) {
		s.protocols[protoH2].Resume()
	}
}

// eachWriter calls f for the writer of every live connection.
func (s *Server) eachWriter(f func(*Writer)) {
	for _, p := range s.poolList() {
		for uc := range p.dubbo.conns() {
			f(&uc.w)
		}
	}
	s.sessions.each(func(ss *session) { f(&ss.w) })
}

// snapshot copies the frozen state.
func (s *Server) snapshot(pools []*pool) (*Snapshot, error) {
	now := s.now()
	sn := &Snapshot{Taken: s.clock.Now()}
	index := map[*session]int{}
	var err error
	s.sessions.each(func(ss *session) {
		if ss.closing.Load() || err != nil {
			return // closing anyway: its fd keeps CLOEXEC and closes at exec
		}
		st := SessionSnapshot{FD: ss.w.fd, Remote: ss.remote.String(), Port: ss.pool.port,
			Idle: time.Duration(now - ss.idle.Last())}
		stash := s.handover.stashed(ss)
		if ss.down == nil { // its first bytes decide, as they would have
			st.Proto, st.In = SnapUnknown, append([]byte(nil), stash...)
		} else if ok, herr := ss.down.Snapshot(&st, stash, now); herr != nil || !ok {
			err = herr // !ok: it ends in a GOAWAY; its fd keeps CLOEXEC and closes at exec
			return
		}
		st.Out, st.Sent, _ = ss.w.export()
		index[ss] = len(sn.Sessions)
		sn.Sessions = append(sn.Sessions, st)
	})
	if err != nil {
		return nil, err
	}
	sessionOf := func(ss *session) int {
		if ss == nil {
			return -2
		}
		if i, ok := index[ss]; ok {
			return i
		}
		return -1
	}
	for _, p := range pools {
		ps := PoolSnapshot{Addr: p.addr, Port: p.port, ReadonlySent: p.readonlySent.Load()}
		for uc := range p.dubbo.conns() {
			if uc.state.Load() == stateClosed {
				continue
			}
			in, skip := uc.rd.exportPartial()
			out, sent, base := uc.w.export()
			cs := UpConnSnapshot{FD: uc.w.fd, Slot: uc.slot, State: uc.state.Load(), NextID: uc.nextID,
				In: append(in, uc.stash...), Skip: skip, Out: out, Sent: sent}
			// The send queue never reached the writer: its two-way requests are re-held by whoever
			// serves next, its one-way ones go at the end of the unsent stream. A copy: Thaw keeps it.
			nextID := uc.nextID
			uc.sendq.each(func(e *queued) {
				if e.oneWay {
					nextID++
					f := append([]byte(nil), e.frame...)
					s.codec.SetID(f, nextID)
					cs.Out = append(cs.Out, f...)
					return
				}
				ps.Held = append(ps.Held, HeldSnapshot{Session: sessionOf(e.sess), ID: e.id, Serial: e.serial,
					Age: time.Duration(now - e.arrived), Frame: e.frame})
			})
			cs.NextID = nextID
			for id, e := range uc.pending.All() {
				ent := PendingSnapshot{UpstreamID: id, Session: sessionOf(e.sess), ID: e.id, Serial: e.serial,
					Age: time.Duration(now - e.arrived)}
				if e.off >= base { // in Out; before base the kernel took it whole
					ent.Off, ent.N = e.off-base, e.n
				}
				cs.Pending = append(cs.Pending, ent)
			}
			ps.Conns = append(ps.Conns, cs)
		}
		p.hold.mu.Lock()
		p.hold.eachLocked(func(e *held) {
			ps.Held = append(ps.Held, HeldSnapshot{Session: sessionOf(e.sess), ID: e.id, Serial: e.serial,
				Age: time.Duration(now - e.arrived), Frame: e.frame})
		})
		p.hold.mu.Unlock()
		sn.Pools = append(sn.Pools, ps)
	}
	return sn, nil
}

// Restore builds a Server that resumes the state of sn (from Freeze, in this
// process or in the one before exec). Start it as usual: it adopts the snapshot's
// connections and dials only for slots that have none.
func Restore(sn *Snapshot, cfg Config, opts Options) (*Server, error) {
	s, err := New(cfg, opts)
	if err != nil {
		return nil, err
	}
	s.restoring = sn
	return s, nil
}

// restore is Start's work for a restored Server: the books and the sockets back in
// place, then what was read during the handover handled, then serving.
func (s *Server) restore(sn *Snapshot) error {
	// No garbage collection until every consumer is served again: the new image's heap grows
	// from almost nothing to every session's books within the restore, nearly all of it live, and
	// each collection on the way (the goal starts at 4 MB and doubles) takes a core the waiting
	// consumers need.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	now := s.now()
	cfg := s.cfg.Load()
	start := s.clock.Now()
	var books, input time.Duration // where the restore's time went, for its log line
	// Pools first, without their loops: sessions and pending entries refer to them.
	pools := map[uint16]*pool{}
	newPool := func(addr string, port uint16) *pool {
		p := newPoolStopped(s, addr, port)
		if up := p.ups[protoH2]; up != nil {
			// The plug-in's provider connections did not cross: dialled at once, so that they are up
			// when the consumers are served again (the calls that waited through the handover go
			// first). Dubbo's start once adopted (thaw, below).
			up.Start(cfg.UpstreamConns)
		}
		return p
	}
	for _, ps := range sn.Pools {
		p := newPool(ps.Addr, ps.Port)
		p.readonlySent.Store(ps.ReadonlySent)
		pools[ps.Port] = p
	}
	poolFor := func(port uint16) *pool {
		if p, ok := pools[port]; ok {
			return p
		}
		addr := cfg.Upstream
		if cfg.Transparent {
			addr = netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), port).String()
		}
		p := newPool(addr, port)
		pools[port] = p
		return p
	}
	// Sessions: their writers held until everything is in place. Built on every core: the
	// consumers wait from the freeze until the first of them is served again, and building
	// their sessions is most of the restore's books (allocation and first touches of a new
	// heap: 72-90 ms for 10,000 consumers on one core, upgrade-bench).
	sessions := make([]*session, len(sn.Sessions))
	gone := &session{srv: s} // for requests whose consumer left: their answers are dropped
	gone.closing.Store(true)
	sessionPools := make([]*pool, len(sn.Sessions))
	for i, st := range sn.Sessions {
		sessionPools[i] = poolFor(st.Port) // makes pools: not on the workers
	}
	eachInParallel(len(sn.Sessions), func(i int) {
		st := &sn.Sessions[i]
		remote, _ := netip.ParseAddrPort(st.Remote)
		ss := newSession(s, sessionPools[i], nil, st.FD, remote)
		ss.w.held = true
		ss.idle.Touch(now - int64(st.Idle))
		sessions[i] = ss
		var err error
		if st.Proto != SnapUnknown { // else its first bytes decide, as they would have
			err = ss.restoreProtocol(st, now)
		}
		if err != nil {
			s.logRestoreFailure(ss, err)
			ss.closing.Store(true)
			_ = unix.Close(st.FD)
		}
	})
	sessionAt := func(i int) *session {
		if i >= 0 && i < len(sessions) {
			return sessions[i]
		}
		return gone
	}
	// Provider connections with their books.
	var ups []*upConn
	for _, ps := range sn.Pools {
		p := pools[ps.Port]
		for _, cs := range ps.Conns {
			uc, err := p.dubbo.adopt(cs)
			if err != nil {
				return err
			}
			for _, e := range cs.Pending {
				var r request
				if e.Session != -2 {
					r = request{sess: sessionAt(e.Session), id: e.ID, serial: e.Serial, arrived: now - int64(e.Age)}
					s.accept(r)
				}
				uc.pending.Add(e.UpstreamID, pending{request: r, off: e.Off, n: e.N})
				uc.npending.Add(1)
			}
			ups = append(ups, uc)
		}
		held := make([]held, 0, len(ps.Held))
		for _, h := range ps.Held {
			r := request{sess: sessionAt(h.Session), id: h.ID, serial: h.Serial, arrived: now - int64(h.Age)}
			s.accept(r)
			held = append(held, heldEntry(r, h.Frame))
		}
		defer p.hold.rehold(held, HoldReheld) // once the connections take requests
	}
	s.mu.Lock()
	for port, p := range pools {
		s.pools[port] = p
	}
	s.mu.Unlock()
	books = s.clock.Now().Sub(start)
	// What was read during the handover, in order: answers, then requests.
	for i, uc := range ups {
		uc.consume(&sliceSource{b: restoredIn(sn, i)})
	}
	for i, ss := range sessions {
		st := &sn.Sessions[i]
		if st.Proto == SnapDubbo {
			defer ss.dubbo.partialAgain(st, now)
		}
		if !ss.closing.Load() {
			ss.handleStashed(st.In)
		}
	}
	input = s.clock.Now().Sub(start) - books
	// Serving: handlers on, writers on, timers armed.
	for _, uc := range ups {
		if err := uc.serve(); err != nil {
			return err
		}
	}
	// On every core too: the last consumer registered waits for all before it (each a
	// netpoll connection, an epoll_ctl, its timer; 250-450 ms for 10,000 on one core).
	eachInParallel(len(sessions), func(i int) {
		ss := sessions[i]
		if ss.closing.Load() {
			return
		}
		if err := s.serveRestored(ss); err != nil {
			s.logRestoreFailure(ss, err)
			return
		}
		ss.w.resume(sn.Sessions[i].Out, sn.Sessions[i].Sent)
	})
	for i, uc := range ups {
		c := restoredUp(sn, i)
		uc.w.resume(c.Out, c.Sent)
	}
	for _, p := range pools {
		p.dubbo.thaw()
	}
	took := s.clock.Now().Sub(start)
	s.log.Info("data plane restored from a handover", zap.Int("consumers", len(sessions)),
		zap.Int("provider_connections", len(ups)), zap.Duration("since_freeze", s.clock.Now().Sub(sn.Taken)),
		zap.Duration("took", took), zap.Duration("decode", sn.decoded), zap.Int("state_bytes", sn.size),
		zap.Duration("books", books), zap.Duration("input", input), zap.Duration("register", took-books-input))
	return nil
}

// eachInParallel calls f for 0..n-1, split in contiguous ranges over up to GOMAXPROCS
// goroutines (one when n is small), and returns when every call has. f must be safe to
// run for different i at once.
func eachInParallel(n int, f func(i int)) {
	// A goroutine costs about a microsecond, a session several: a few sessions are worth
	// one. (Small, too, so that the handover tests' dozens of consumers use every worker.)
	const minPerWorker = 8
	workers := max(min(runtime.GOMAXPROCS(0), n/minPerWorker), 1)
	var wg sync.WaitGroup
	for w := range workers {
		lo, hi := n*w/workers, n*(w+1)/workers
		run := func() {
			for i := lo; i < hi; i++ {
				f(i)
			}
		}
		if w == workers-1 {
			run() // the last range on the caller's goroutine
			continue
		}
		wg.Go(run)
	}
	wg.Wait()
}

// restoredUp is the i-th provider connection of sn, counting over pools in order.
func restoredUp(sn *Snapshot, i int) UpConnSnapshot {
	for _, p := range sn.Pools {
		if i < len(p.Conns) {
			return p.Conns[i]
		}
		i -= len(p.Conns)
	}
	return UpConnSnapshot{}
}

func restoredIn(sn *Snapshot, i int) []byte { return restoredUp(sn, i).In }

func heldEntry(r request, frame []byte) held { return held{request: r, frame: frame} }

// serveRestored registers a restored consumer connection with netpoll.
func (s *Server) serveRestored(ss *session) error {
	conn, err := netpoll.NewFDConnection(ss.w.fd)
	if err != nil {
		return err
	}
	ss.conn = conn
	s.sessions.add(ss)
	s.m.downConns[ss.proto.Load()].Inc()
	if t := s.cfg.Load().DownstreamIdleTimeout; t > 0 {
		s.wheel.Schedule(&ss.timer, max(ss.idle.Remaining(s.now(), t), time.Millisecond))
	}
	_ = conn.AddCloseCallback(ss.onClosed)
	_ = conn.SetOnRequest(ss.onRequest)
	if !conn.IsActive() {
		_ = conn.Close()
	}
	return nil
}

// sliceSource is a ByteSource over bytes in memory (a handover's stash).
type sliceSource struct{ b []byte }

func (r *sliceSource) Len() int { return len(r.b) }

func (r *sliceSource) Peek(n int) ([]byte, error) {
	if n > len(r.b) {
		return nil, errors.New("short")
	}
	return r.b[:n], nil
}

func (r *sliceSource) Next(n int) ([]byte, error) {
	p, err := r.Peek(n)
	if err == nil {
		r.b = r.b[n:]
	}
	return p, err
}

func (r *sliceSource) Skip(n int) error {
	_, err := r.Next(n)
	return err
}

// exportPartial returns the bytes of an unfinished frame (to be handled again ahead
// of what follows it) and how many bytes of a refused frame are still to discard.
func (fr *frameReader) exportPartial() ([]byte, int) {
	switch {
	case fr.buf != nil:
		return append([]byte(nil), fr.buf...), fr.skip
	case fr.hlen > 0:
		return append([]byte(nil), fr.hdr[:fr.hlen]...), fr.skip
	}
	return nil, fr.skip
}

// RestoreConsumer makes fd (a connected, non-blocking socket) a consumer connection of the Server's
// one provider pool, restored from st by its protocol (Protocol.Restore) as Start's restore does each
// consumer of a snapshot, but alone, on a running Server, and with its writer held (what it would write
// stays queued). It is for tests of a protocol's restore (package proxy/triple); an upgrade uses Restore.
func (s *Server) RestoreConsumer(fd int, st *SessionSnapshot) error {
	p := s.poolList()[0]
	ss := newSession(s, p, nil, fd, netip.AddrPort{})
	ss.w.held = true
	return ss.restoreProtocol(st, s.now())
}

// restoreProtocol rebuilds the protocol state of a consumer from its snapshot (Protocol.Restore).
func (ss *session) restoreProtocol(st *SessionSnapshot, now int64) error {
	var i uint32
	switch st.Proto {
	case SnapDubbo:
		i = protoDubbo
	case SnapH2:
		i = protoH2
	default:
		return fmt.Errorf("a consumer of protocol %q, which this build does not know", st.Proto)
	}
	d, err := ss.srv.protocols[i].Restore(Consumer{ss}, ss.pool.ups[i], st, now)
	if err != nil {
		return err
	}
	ss.down = d
	ss.proto.Store(i) // after down: whoever reads proto reads down
	return nil
}

// handleStashed handles what a consumer sent during a handover (Thaw, restore), as its handler would have.
func (ss *session) handleStashed(in []byte) {
	ss.input(&sliceSource{b: in})
}

// logRestoreFailure says why a consumer connection from a handover could not be restored.
func (s *Server) logRestoreFailure(ss *session, err error) {
	s.log.Warn("a consumer connection could not be restored; closing it", zap.Stringer("peer", ss.remote), zap.Error(err))
}
