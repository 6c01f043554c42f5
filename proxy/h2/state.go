package h2

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
)

// A Conn at rest, as data, for Stormgate's upgrade (docs/design.md §14.12): the old process quiesces an
// HTTP/2 connection, Export takes its state, the Snapshot carries it as JSON across execve with the socket,
// and RestoreConn rebuilds a Conn that answers every later frame, and every owner call, exactly as the
// original would have. At rest means: Output written, no header block half assembled, the handshake done
// and this side's SETTINGS acknowledged, no connection error. Streams may be open (a request received and
// waiting to be forwarded, an answer waiting for the consumer's window).
//
// What crosses, field by field (Conn, then stream):
//
//	| field                      | crosses as                 | why
//	|----------------------------|----------------------------|--------------------------------------------------
//	| role                       | Role, must be cfg.Role's   | the id rules and which streams are whose
//	| lim                        | rebuilt from cfg.Limits    | the new process's settings; the owner re-applies
//	|                            |                            | SetStallTimeout as it does for a new Conn
//	| phase                      | Phase, "active" only       | Export refuses before the handshake is done
//	| local, peer                | Local, Peer                | what each side announced: the peer goes on by them
//	| acked                      | Acked, true only           | before the ack the peer may index a dynamic table
//	| connWin                    | ConnWin                    | the window this side announced (not cfg's)
//	| dec                        | rebuilt: empty, acked at 0 | once the 0 is acked no block can refer to an
//	|                            |                            | entry (RFC 7541 §4.2): the table is empty
//	| asm                        | rebuilt, closed            | Export refuses while a block is open
//	| streams                    | Streams, by id             | the per-stream state below
//	| free                       | rebuilt empty              | a pool of spare structs, not state
//	| peerOpen, ownOpen          | PeerOpen, OwnOpen, checked | counted against Streams on restore
//	| lastPeer, nextOwn          | LastPeer, NextOwn          | ids never go back; closed vs idle depends on them
//	| connSend, connRecv         | ConnSend, ConnRecv         | the peer's view of the windows must not move
//	| encUpdate                  | EncUpdate                  | a table size update still owed to the peer
//	| goAwaySent/Recv, …Last     | GoAway*                    | what each side promised; new streams depend on it
//	| recent, recentIdx          | Recent (slot order),       | slot by slot: a closed stream found twice (closed,
//	|                            | RecentNext                 | then reset) is answered by its first slot
//	| owedHeaders                | OwedHeaders                | header blocks still free on streams reset here
//	| resets, control            | rebuilt full               | token buckets on the old process's clock
//	| credit                     | Credit                     | free answers the data already sent has earned
//	| emptyRun                   | EmptyRun                   | a run of empty frames must not restart at a handover
//	| queued, out                | rebuilt empty              | Export refuses while Output holds anything
//	| err                        | rebuilt nil                | Export refuses a failed connection
//	| c (Counters)               | rebuilt zero               | metrics count per process (an owner that meters
//	|                            |                            | deltas of them starts its meter at zero too);
//	|                            |                            | Counters.Frames makes the first SETTINGS read free
//	|                            |                            | of the control budget, so one more is: one token
//	|                            |                            | of a budget that starts full anyway
//	| stream.id, state           | ID, State                  | open, half-closed (local or remote): a closed
//	|                            |                            | stream is not tracked
//	| stream.send, recv          | Send, Recv                 | the windows, as for the connection
//	| stream.headersIn/Out       | HeadersIn, HeadersOut      | head or trailers next
//	| stream.blockedSince        | rebuilt 0                  | a time on the old owner's clock: the owner re-arms
//	|                            |                            | it by offering the waiting answer (AppendData)

// ConnState is a Conn at rest as plain data (every field exported and JSON-encodable), for a handover to
// another process: Export takes it, RestoreConn rebuilds the Conn from it. See the table above for what
// each field holds.
type ConnState struct {
	Role           Role             `json:"role"`
	Phase          string           `json:"phase"`
	Local          Settings         `json:"local"`
	Peer           Settings         `json:"peer"`
	Acked          bool             `json:"acked"`
	ConnWin        uint32           `json:"conn_win"`
	PeerOpen       int              `json:"peer_open,omitempty"`
	OwnOpen        int              `json:"own_open,omitempty"`
	LastPeer       uint32           `json:"last_peer,omitempty"`
	NextOwn        uint32           `json:"next_own"`
	ConnSend       int64            `json:"conn_send"`
	ConnRecv       RecvState        `json:"conn_recv"`
	EncUpdate      bool             `json:"enc_update,omitempty"`
	GoAwaySent     bool             `json:"goaway_sent,omitempty"`
	GoAwayRecv     bool             `json:"goaway_recv,omitempty"`
	GoAwayLast     uint32           `json:"goaway_last,omitempty"`
	PeerGoAwayLast uint32           `json:"peer_goaway_last,omitempty"`
	Recent         []RecentStream   `json:"recent,omitempty"` // slot by slot, trailing empty slots left out
	RecentNext     int              `json:"recent_next,omitempty"`
	OwedHeaders    int64            `json:"owed_headers,omitempty"`
	Credit         int              `json:"credit,omitempty"`
	EmptyRun       int              `json:"empty_run,omitempty"`
	Streams        []StreamSnapshot `json:"streams,omitempty"` // by increasing id
}

// RecvState is a receive window: what the peer may still send, and what the owner consumed that no
// WINDOW_UPDATE has handed back yet.
type RecvState struct {
	Avail   int64 `json:"avail"`
	Unacked int64 `json:"unacked,omitempty"`
}

// RecentStream is a recently closed stream; ResetUs: this side reset it, so the peer's frames in flight
// on it are ignored rather than errors (RFC 9113 §5.4.2). ID 0 is an empty slot.
type RecentStream struct {
	ID      uint32 `json:"id"`
	ResetUs bool   `json:"reset_us,omitempty"`
}

// StreamSnapshot is one tracked stream.
type StreamSnapshot struct {
	ID         uint32      `json:"id"`
	State      StreamState `json:"state"`
	Send       int64       `json:"send"`
	Recv       RecvState   `json:"recv"`
	HeadersIn  uint8       `json:"headers_in,omitempty"`
	HeadersOut uint8       `json:"headers_out,omitempty"`
}

// ErrNotAtRest: Export refused; the error's text says why (errors.Is(err, ErrNotAtRest)).
var ErrNotAtRest = errors.New("h2: connection not at rest")

var phaseNames = [...]string{phasePreface: "preface", phaseSettings: "settings", phaseActive: "active"}

// Export returns the Conn's state. It refuses (ErrNotAtRest, wrapped with the reason) while the connection
// has failed, Output is not empty, the preface or the peer's first SETTINGS is pending, this side's
// SETTINGS are not acknowledged (the peer's header blocks may still use a dynamic table whose entries the
// decoder holds), or a header block is being assembled (CONTINUATION expected). It does not change the
// Conn.
func (c *Conn) Export() (ConnState, error) {
	if err := c.AtRest(); err != nil {
		return ConnState{}, err
	}
	st := ConnState{
		Role:           c.role,
		Phase:          phaseNames[c.phase],
		Local:          c.local,
		Peer:           c.peer,
		Acked:          c.acked,
		ConnWin:        c.connWin,
		PeerOpen:       c.peerOpen,
		OwnOpen:        c.ownOpen,
		LastPeer:       c.lastPeer,
		NextOwn:        c.nextOwn,
		ConnSend:       int64(c.connSend),
		ConnRecv:       RecvState{Avail: c.connRecv.avail, Unacked: c.connRecv.unacked},
		EncUpdate:      c.encUpdate,
		GoAwaySent:     c.goAwaySent,
		GoAwayRecv:     c.goAwayRecv,
		GoAwayLast:     c.goAwayLast,
		PeerGoAwayLast: c.peerGoAwayLast,
		RecentNext:     c.recentIdx,
		OwedHeaders:    c.owedHeaders,
		Credit:         min(c.credit, exportCreditMax),
		EmptyRun:       c.emptyRun,
	}
	n := len(c.recent)
	for n > 0 && c.recent[n-1] == (closedStream{}) {
		n--
	}
	if n > 0 {
		st.Recent = make([]RecentStream, n)
		for i, r := range c.recent[:n] {
			st.Recent[i] = RecentStream{ID: r.id, ResetUs: r.resetUs}
		}
	}
	if len(c.streams) > 0 {
		st.Streams = make([]StreamSnapshot, 0, len(c.streams))
		for _, s := range c.streams {
			st.Streams = append(st.Streams, StreamSnapshot{ID: s.id, State: s.state, Send: int64(s.send),
				Recv: RecvState{Avail: s.recv.avail, Unacked: s.recv.unacked}, HeadersIn: s.headersIn,
				HeadersOut: s.headersOut})
		}
		slices.SortFunc(st.Streams, func(a, b StreamSnapshot) int { return cmp.Compare(a.ID, b.ID) })
	}
	return st, nil
}

// AtRest is nil when Export would succeed now, else why not (ErrNotAtRest, wrapped): Export's check
// without its copy, for an owner that waits for rest.
func (c *Conn) AtRest() error {
	if why := c.notAtRest(); why != "" {
		return fmt.Errorf("%w: %s", ErrNotAtRest, why)
	}
	return nil
}

func (c *Conn) notAtRest() string {
	switch {
	case c.err != nil:
		return "the connection failed: " + c.err.Error()
	case len(c.out) > 0:
		return fmt.Sprintf("Output holds %d bytes not written yet", len(c.out))
	case c.phase == phasePreface:
		return "the client connection preface has not arrived"
	case c.phase == phaseSettings:
		return "the peer's first SETTINGS has not arrived"
	case !c.acked:
		return "this side's SETTINGS are not acknowledged: the peer's header blocks may still use a dynamic table"
	case c.asm.Open():
		return "a header block is being assembled (CONTINUATION expected)"
	}
	return ""
}

// RestoreConn rebuilds a Conn from Export's state. cfg supplies the Limits, and its role must be st's; the
// rest of cfg is ignored (what this side announced is in st). The guards' budgets start full and the
// Counters at zero, the header decoder with an empty table held at the acknowledged size (0), Output
// empty. It returns an error, never panics, for a state no Conn could have had.
func RestoreConn(cfg Config, st ConnState) (*Conn, error) {
	if err := st.check(cfg.Role); err != nil {
		return nil, fmt.Errorf("h2: cannot restore the connection: %w", err)
	}
	lim := cfg.Limits.withDefaults()
	c := &Conn{
		role:           st.Role,
		lim:            lim,
		phase:          phaseActive,
		local:          st.Local,
		acked:          true,
		peer:           st.Peer,
		connWin:        st.ConnWin,
		dec:            NewHeaderDecoder(st.Local.MaxHeaderListSize),
		asm:            NewAssembler(int(st.Local.MaxHeaderListSize), lim.MaxContinuations),
		streams:        make(map[uint32]*stream, len(st.Streams)),
		peerOpen:       st.PeerOpen,
		ownOpen:        st.OwnOpen,
		lastPeer:       st.LastPeer,
		nextOwn:        st.NextOwn,
		connSend:       sendWindow(st.ConnSend),
		connRecv:       recvWindow{avail: st.ConnRecv.Avail, unacked: st.ConnRecv.Unacked},
		encUpdate:      st.EncUpdate,
		goAwaySent:     st.GoAwaySent,
		goAwayRecv:     st.GoAwayRecv,
		goAwayLast:     st.GoAwayLast,
		peerGoAwayLast: st.PeerGoAwayLast,
		recentIdx:      st.RecentNext,
		owedHeaders:    st.OwedHeaders,
		resets:         newBucket(lim.ResetBurst, lim.ResetRate),
		control:        newBucket(lim.ControlBurst, lim.ControlRate),
		credit:         st.Credit,
		emptyRun:       st.EmptyRun,
	}
	c.dec.TableSizeAcked(st.Local.HeaderTableSize)
	for i, r := range st.Recent {
		c.recent[i] = closedStream{id: r.ID, resetUs: r.ResetUs}
	}
	for _, s := range st.Streams {
		c.streams[s.ID] = &stream{id: s.ID, state: s.State, send: sendWindow(s.Send),
			recv: recvWindow{avail: s.Recv.Avail, unacked: s.Recv.Unacked}, headersIn: s.HeadersIn,
			headersOut: s.HeadersOut}
	}
	return c, nil
}

// check finds what no Conn at rest could have had.
func (st *ConnState) check(role Role) error {
	if st.Role != RoleServer && st.Role != RoleClient {
		return fmt.Errorf("unknown role %d", st.Role)
	}
	if st.Role != role {
		return fmt.Errorf("role %d, the Config's is %d", st.Role, role)
	}
	if st.Phase != phaseNames[phaseActive] {
		return fmt.Errorf("phase %q: only an active connection is exported", st.Phase)
	}
	if !st.Acked {
		return errors.New("this side's SETTINGS not acknowledged")
	}
	if err := st.checkSettings(); err != nil {
		return err
	}
	if err := st.checkWindows(); err != nil {
		return err
	}
	if err := st.checkIDs(); err != nil {
		return err
	}
	if err := st.checkStreams(); err != nil {
		return err
	}
	switch {
	case st.GoAwayLast > MaxStreamID || !st.GoAwaySent && st.GoAwayLast != 0:
		return fmt.Errorf("GOAWAY last stream %d (sent: %v)", st.GoAwayLast, st.GoAwaySent)
	case st.GoAwaySent && st.LastPeer > st.GoAwayLast:
		// Streams above a sent GOAWAY's last id are ignored, never opened.
		return fmt.Errorf("last peer stream %d above the GOAWAY's %d", st.LastPeer, st.GoAwayLast)
	case st.PeerGoAwayLast > MaxStreamID || !st.GoAwayRecv && st.PeerGoAwayLast != 0:
		return fmt.Errorf("peer's GOAWAY last stream %d (received: %v)", st.PeerGoAwayLast, st.GoAwayRecv)
	case st.OwedHeaders < 0 || st.Role == RoleServer && st.OwedHeaders != 0:
		return fmt.Errorf("%d header blocks owed on a %v connection", st.OwedHeaders, roleName(st.Role))
	case st.Credit < 0 || st.Credit > maxCredit:
		return fmt.Errorf("credit %d outside 0..%d", st.Credit, maxCredit)
	case st.EmptyRun < 0:
		return fmt.Errorf("empty frame run %d", st.EmptyRun)
	}
	return nil
}

func roleName(r Role) string {
	if r == RoleClient {
		return "client"
	}
	return "server"
}

// checkSettings: what NewConn announces (table size 0: the decoder's state is empty), and what a peer's
// SETTINGS can set (Settings.Apply's bounds).
func (st *ConnState) checkSettings() error {
	l, p := st.Local, st.Peer
	switch {
	case l.HeaderTableSize != 0:
		return fmt.Errorf("this side announced HEADER_TABLE_SIZE %d, not 0", l.HeaderTableSize)
	case l.MaxHeaderListSize == 0 || l.MaxConcurrentStreams == 0:
		return errors.New("this side's MAX_HEADER_LIST_SIZE or MAX_CONCURRENT_STREAMS is 0")
	case l.InitialWindowSize > MaxWindowSize || p.InitialWindowSize > MaxWindowSize:
		return fmt.Errorf("initial window %d / %d above 2^31-1", l.InitialWindowSize, p.InitialWindowSize)
	case l.MaxFrameSize < DefaultMaxFrameSize || l.MaxFrameSize > MaxFrameSizeLimit ||
		p.MaxFrameSize < DefaultMaxFrameSize || p.MaxFrameSize > MaxFrameSizeLimit:
		return fmt.Errorf("max frame size %d / %d outside 16384..16777215", l.MaxFrameSize, p.MaxFrameSize)
	}
	return nil
}

func (st *ConnState) checkWindows() error {
	switch {
	case st.ConnWin > MaxWindowSize || st.ConnWin < DefaultInitialWindowSize || st.ConnWin < st.Local.InitialWindowSize:
		return fmt.Errorf("connection window %d", st.ConnWin)
	case st.ConnSend < 0 || st.ConnSend > MaxWindowSize:
		return fmt.Errorf("connection send window %d outside 0..2^31-1", st.ConnSend)
	case st.ConnRecv.Avail < 0 || st.ConnRecv.Avail > MaxWindowSize ||
		st.ConnRecv.Unacked < 0 || st.ConnRecv.Unacked > MaxWindowSize:
		return fmt.Errorf("connection receive window %+v outside 0..2^31-1", st.ConnRecv)
	}
	return nil
}

// checkIDs: servers never open streams and clients never accept them (no push), so every stream id is
// odd, the peer's below LastPeer, this side's below NextOwn.
func (st *ConnState) checkIDs() error {
	if st.Role == RoleServer {
		if st.NextOwn != 1 {
			return fmt.Errorf("a server's next own stream %d: servers open none", st.NextOwn)
		}
		if st.LastPeer > MaxStreamID || st.LastPeer != 0 && st.LastPeer%2 == 0 {
			return fmt.Errorf("last peer stream %d", st.LastPeer)
		}
		return nil
	}
	if st.LastPeer != 0 {
		return fmt.Errorf("a client's last peer stream %d: clients accept none", st.LastPeer)
	}
	if st.NextOwn%2 == 0 || st.NextOwn > MaxStreamID+2 {
		return fmt.Errorf("next own stream %d", st.NextOwn)
	}
	return nil
}

// used reports whether id is a stream id that has been opened: odd, and at most LastPeer (server) or
// below NextOwn (client).
func (st *ConnState) used(id uint32) bool {
	if id%2 == 0 {
		return false
	}
	if st.Role == RoleServer {
		return id <= st.LastPeer
	}
	return id < st.NextOwn
}

func (st *ConnState) checkStreams() error {
	open := make(map[uint32]bool, len(st.Streams))
	for _, s := range st.Streams {
		switch {
		case !st.used(s.ID):
			return fmt.Errorf("stream %d was never opened (last peer %d, next own %d)", s.ID, st.LastPeer, st.NextOwn)
		case open[s.ID]:
			return fmt.Errorf("stream %d twice", s.ID)
		case s.State != StateOpen && s.State != StateHalfClosedLocal && s.State != StateHalfClosedRemote:
			return fmt.Errorf("stream %d tracked in state %v", s.ID, s.State)
		case !inWindow(s.Send) || !inWindow(s.Recv.Avail) || s.Recv.Unacked < 0 || s.Recv.Unacked > MaxWindowSize:
			return fmt.Errorf("stream %d windows %d %+v beyond 2^31-1", s.ID, s.Send, s.Recv)
		}
		open[s.ID] = true
	}
	// Every stream is the peer's on a server and this side's on a client.
	peerOpen, ownOpen := len(st.Streams), 0
	if st.Role == RoleClient {
		peerOpen, ownOpen = 0, len(st.Streams)
	}
	if st.PeerOpen != peerOpen || st.OwnOpen != ownOpen {
		return fmt.Errorf("open counts %d/%d, streams %d/%d", st.PeerOpen, st.OwnOpen, peerOpen, ownOpen)
	}
	if uint64(st.PeerOpen) > uint64(st.Local.MaxConcurrentStreams) {
		return fmt.Errorf("%d peer streams open, this side allows %d", st.PeerOpen, st.Local.MaxConcurrentStreams)
	}
	if len(st.Recent) > maxRecentClosed || st.RecentNext < 0 || st.RecentNext >= maxRecentClosed {
		return fmt.Errorf("%d recently closed streams, next slot %d", len(st.Recent), st.RecentNext)
	}
	for _, r := range st.Recent {
		if r.ID != 0 && (!st.used(r.ID) || open[r.ID]) {
			return fmt.Errorf("recently closed stream %d never opened or still open", r.ID)
		}
	}
	return nil
}

// inWindow: a window a SETTINGS decrease may have taken below zero, never beyond ±(2^31-1).
func inWindow(w int64) bool { return w >= -MaxWindowSize && w <= MaxWindowSize }
