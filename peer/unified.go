package peer

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/stormgate/stormgate/proxy/dubbo"
	"github.com/stormgate/stormgate/proxy/h2"
)

// UnifiedEcho is one port serving both Dubbo 2 and Triple, as Dubbo 3's port unification does: the
// provider a sidecar with upstream.protocol both expects. One listener and one accept loop; the first
// bytes of each connection pick its half: the Dubbo magic (0xdabb) an EchoProvider, the whole HTTP/2
// client preface a TripleEcho. The half serves the connection as if it had accepted it, those bytes
// included (replayConn), and checks and counts what it reads as it does alone. First bytes that can be
// neither close the connection and are recorded as a violation (kind "unknown protocol"): a correct
// proxy never sends them.
//
// Kill ends both halves at once (the listener, the connections still being sniffed, every connection
// of either half, as each half's Kill does: Config.Kill of the Dubbo half says how); Restart listens
// again on the same port. Both halves keep their duplicate-key checks across restarts.
//
// Goroutines: the accept loop while listening, one sniffer per connection until its first bytes
// decided (no timeout: a connection that sends nothing waits for a kill), and the halves' own. Kill
// and Close wait for all of them. All methods are safe for concurrent use.
type UnifiedEcho struct {
	log    *zap.Logger
	dubbo  *EchoProvider
	triple *TripleEcho
	kill   KillMode

	acceptWG, sniffWG sync.WaitGroup

	mu       sync.Mutex // guards ln, sniffing and closed
	ln       net.Listener
	sniffing map[*net.TCPConn]struct{}
	closed   bool

	kills, accepted, foreign, undecided, silent, toDubbo, toTriple, nviol atomic.Uint64

	violMu     sync.Mutex
	violations []Violation
}

// SniffStats counts what a UnifiedEcho's listener accepted and where it went.
type SniffStats struct {
	ConnsAccepted uint64 `json:"conns_accepted"`
	Dubbo         uint64 `json:"dubbo"`     // handed to the Dubbo half
	Triple        uint64 `json:"triple"`    // handed to the Triple half
	Foreign       uint64 `json:"foreign"`   // first bytes neither: closed, and each a violation
	Undecided     uint64 `json:"undecided"` // closed by the peer before its first bytes decided
	// Silent were still undecided when a kill or Close ended them: peers that had not spoken yet, such
	// as an idle Dubbo client (a proxy's provider connection says nothing until it carries a request
	// or a heartbeat), where an HTTP/2 client sends its preface at once.
	Silent uint64 `json:"silent"`
}

// UnifiedStats is a snapshot of a UnifiedEcho's counters: each half's and the listener's.
type UnifiedStats struct {
	Dubbo  EchoStats   `json:"dubbo"`
	Triple TripleStats `json:"triple"`
	Sniff  SniffStats  `json:"sniff"`
}

// StartUnifiedEcho listens on dcfg.Addr and starts accepting. dcfg configures the Dubbo half, and the
// listener: its RecvBuf and MaxSegment apply to connections of both halves, its Kill to both; tcfg
// configures the Triple half (its Addr and Kill are not used). log may be nil.
func StartUnifiedEcho(dcfg EchoConfig, tcfg TripleConfig, log *zap.Logger) (*UnifiedEcho, error) {
	if log == nil {
		log = zap.NewNop()
	}
	d := newEcho(dcfg, log)
	ln, err := d.listen()
	if err != nil {
		return nil, err
	}
	tcfg.Addr, tcfg.Kill = ln.Addr().String(), dcfg.Kill
	u := &UnifiedEcho{log: log, dubbo: d, triple: newTripleEcho(tcfg, log), kill: dcfg.Kill,
		sniffing: make(map[*net.TCPConn]struct{})}
	d.serve(ln, false)
	u.triple.serve(ln, false)
	u.mu.Lock()
	u.serveLocked(ln)
	u.mu.Unlock()
	return u, nil
}

// Addr returns the listening address (the same after a Restart).
func (u *UnifiedEcho) Addr() string { return u.dubbo.Addr() }

// SetReading changes how the Dubbo half reads (the Triple half always reads normally).
func (u *UnifiedEcho) SetReading(r Reading) { u.dubbo.SetReading(r) }

// Stall stops the Dubbo half's reading for d from now.
func (u *UnifiedEcho) Stall(d time.Duration) { u.dubbo.Stall(d) }

// serveLocked starts the accept loop on ln. The caller holds mu.
func (u *UnifiedEcho) serveLocked(ln net.Listener) {
	u.ln = ln
	u.acceptWG.Go(func() { acceptEach(ln, u.log, "unified echo provider", func(nc *net.TCPConn) { u.sniffConn(ln, nc) }) })
}

// sniffConn starts reading a connection's first bytes, unless ln was killed meanwhile.
func (u *UnifiedEcho) sniffConn(ln net.Listener, nc *net.TCPConn) {
	serial := u.accepted.Add(1)
	u.mu.Lock()
	if u.ln != ln {
		u.mu.Unlock()
		_ = nc.SetLinger(0)
		_ = nc.Close()
		return
	}
	u.sniffing[nc] = struct{}{}
	u.sniffWG.Add(1)
	u.mu.Unlock()
	go u.sniff(ln, serial, nc)
}

// sniff reads the connection's first bytes until they decide its protocol (at most the 24 bytes of
// the HTTP/2 client preface) and hands it to its half, or closes it. serial numbers the listener's
// connections (1, 2, ... over the provider's life).
func (u *UnifiedEcho) sniff(ln net.Listener, serial uint64, nc *net.TCPConn) {
	defer u.sniffWG.Done()
	var buf [len(h2.ClientPreface)]byte
	n, proto := 0, sniffUndecided
	var err error
	for proto == sniffUndecided && err == nil && n < len(buf) {
		var m int
		m, err = nc.Read(buf[n:])
		n += m
		proto = sniffProtocol(buf[:n])
	}
	u.mu.Lock()
	delete(u.sniffing, nc)
	killed := u.ln != ln
	u.mu.Unlock()
	switch proto {
	case sniffDubbo:
		u.toDubbo.Add(1)
		u.dubbo.serveConn(ln, &replayConn{TCPConn: nc, head: buf[:n]})
	case sniffTriple:
		u.toTriple.Add(1)
		u.triple.serveConn(ln, &replayConn{TCPConn: nc, head: buf[:n]})
	case sniffForeign:
		u.foreign.Add(1)
		u.violation(Violation{Conn: serial, Kind: "unknown protocol",
			Detail: fmt.Sprintf("first bytes % x: neither the Dubbo magic nor the HTTP/2 client preface", buf[:n])})
		_ = nc.Close()
	default: // the peer closed, or Kill ended it, before the first bytes decided
		if killed {
			u.silent.Add(1)
		} else {
			u.undecided.Add(1)
		}
		_ = nc.Close()
	}
}

// The protocols a connection's first bytes can decide.
const (
	sniffUndecided = iota // a prefix of the Dubbo magic or of the HTTP/2 client preface: read on
	sniffDubbo
	sniffTriple
	sniffForeign
)

// sniffProtocol decides a connection's protocol from its first bytes: Dubbo once they begin with the
// magic 0xdabb, Triple once they are the whole HTTP/2 client preface, foreign as soon as they can be
// neither.
func sniffProtocol(b []byte) int {
	switch {
	case len(b) == 0:
		return sniffUndecided
	case b[0] == dubbo.Magic0:
		switch {
		case len(b) == 1:
			return sniffUndecided
		case b[1] == dubbo.Magic1:
			return sniffDubbo
		}
		return sniffForeign
	}
	switch n, err := h2.CheckPreface(b); {
	case err != nil:
		return sniffForeign
	case n > 0:
		return sniffTriple
	}
	return sniffUndecided
}

func (u *UnifiedEcho) violation(v Violation) {
	if u.nviol.Add(1) > uint64(u.dubbo.maxViol) {
		return
	}
	u.log.Warn("unified echo provider: violation", zap.Stringer("violation", v))
	u.violMu.Lock()
	u.violations = append(u.violations, v)
	u.violMu.Unlock()
}

// Kill closes the listener and ends every connection of both halves at once, as each half's Kill
// does, and waits for every goroutine but the Triple half's delayed answers. Connecting fails until
// Restart; killing a killed provider does nothing.
func (u *UnifiedEcho) Kill() {
	u.mu.Lock()
	ln := u.ln
	u.ln = nil
	sniffing := make([]*net.TCPConn, 0, len(u.sniffing))
	for c := range u.sniffing {
		sniffing = append(sniffing, c)
	}
	u.mu.Unlock()
	if ln == nil {
		return
	}
	_ = ln.Close()
	u.acceptWG.Wait()
	closeLike := u.kill.closes(u.kills.Load())
	for _, c := range sniffing {
		if !closeLike {
			_ = c.SetLinger(0)
		}
		_ = c.Close()
	}
	u.sniffWG.Wait() // none is handed over after this: the halves' Kill ends them all
	var halves sync.WaitGroup
	halves.Go(u.dubbo.Kill)
	halves.Go(u.triple.Kill)
	halves.Wait()
	u.kills.Add(1)
}

// Restart listens again on the provider's address after Kill; both halves serve again.
func (u *UnifiedEcho) Restart() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	switch {
	case u.closed:
		return errors.New("peer: unified echo provider is closed")
	case u.ln != nil:
		return errors.New("peer: unified echo provider is already listening")
	}
	ln, err := u.dubbo.listen()
	if err != nil {
		return err
	}
	if err := errors.Join(u.dubbo.restart(ln), u.triple.restart(ln)); err != nil {
		_ = ln.Close()
		return err
	}
	u.serveLocked(ln)
	return nil
}

// Close kills the provider for good and waits for every goroutine. It is safe to call more than once.
func (u *UnifiedEcho) Close() error {
	u.mu.Lock()
	u.closed = true
	u.mu.Unlock()
	u.Kill()
	return errors.Join(u.dubbo.Close(), u.triple.Close())
}

// Stats returns a snapshot of both halves' counters and the listener's.
func (u *UnifiedEcho) Stats() UnifiedStats {
	return UnifiedStats{Dubbo: u.dubbo.Stats(), Triple: u.triple.Stats(), Sniff: SniffStats{
		ConnsAccepted: u.accepted.Load(), Dubbo: u.toDubbo.Load(), Triple: u.toTriple.Load(),
		Foreign: u.foreign.Load(), Undecided: u.undecided.Load(), Silent: u.silent.Load(),
	}}
}

// Violations returns what each half recorded (Protocol "dubbo" or "triple"; their Conn numbers are
// each half's own) and the connections whose first bytes were neither (Protocol "").
func (u *UnifiedEcho) Violations() []Violation {
	var all []Violation
	for _, half := range []struct {
		name string
		vs   []Violation
	}{{"dubbo", u.dubbo.Violations()}, {"triple", u.triple.Violations()}} {
		for _, v := range half.vs {
			v.Protocol = half.name
			all = append(all, v)
		}
	}
	u.violMu.Lock()
	defer u.violMu.Unlock()
	return append(all, u.violations...)
}
