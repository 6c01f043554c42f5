package proxy

import (
	"bufio"
	"bytes"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/stormgate/stormgate/keepalive"
)

// Provider lifecycle: what Stormgate does with requests while a provider starts,
// stops gracefully or dies, so that consumers see none of it when the provider's
// own answers or the kernel prove that a request never ran. docs/design.md has the
// table of provider events; in short:
//
//	| event                                   | requests
//	|-----------------------------------------|------------------------------------------------------------
//	| connection opens (start, restart)       | a not-executed answer within hold.not_executed_window is
//	|                                         | re-held (at most hold.not_executed_retries times, within the
//	|                                         | request's hold deadline); the pool pauses backoff_base,
//	|                                         | doubling, before sending again
//	| READONLY, or a closing=true answer      | drain: no connection of the provider takes new requests; they
//	|                                         | wait in the hold queue; in flight ones finish; READONLY
//	|                                         | connections close once empty; a request whose hold ends while
//	|                                         | the provider still serves is sent to it rather than failed
//	| WRITEABLE, drain.timeout, or, once the  | drain ends: connections take requests again (after a
//	| old connections are closed, a refused   | refused dial, new connections take them at once)
//	| dial or a heartbeat answered on a new   |
//	| connection                              |
//	| the provider's socket destroyed (any    | every request past what its application read (the kernel's
//	| end, announced by sock_diag)            | announcement: peerdiag.go) is re-held; the rows below are the
//	|                                         | fallback when no announcement comes
//	| FIN (provider closed, queue empty)      | requests the provider's kernel never acknowledged are re-held,
//	|                                         | once it refuses them with a RST (its socket is gone)
//	| RST (provider closed with unread bytes) | the last request handed to the kernel is re-held, if the
//	|                                         | namespace's reset counters rule out a SO_LINGER 0 abort
//	| anything else, silence                  | may have run: CHANNEL_INACTIVE, never retried
//
// Both re-hold rules rely on TCP as Linux implements it: a FIN from a provider that
// closed its socket (close(2): Java's Netty and dubbo-go's getty) means its
// application had read everything its kernel acknowledged, and takes nothing more; a
// RST at close means unread bytes were discarded, and unread bytes are always the end
// of what arrived. A provider may instead half-close and keep reading: so the FIN rule
// waits (up to finConfirm) for the provider's kernel to refuse the bytes past its FIN
// with a RST, and gives up, re-holding nothing, if it acknowledges any of them
// instead. That RST often arrives before Stormgate has read the FIN; the socket's
// error tells it from a RST alone (resetAfterFIN). A provider may also abort with
// SO_LINGER 0 after reading everything: a RST with nothing unread. Its kernel counts that reset apart from a close with unread
// bytes, and a provider on loopback shares Stormgate's network namespace, so both rules
// read the namespace's reset counters (vetoAbortive) and prove nothing when they do not
// explain the reset; such a reset anywhere in the namespace vetoes too (counted in
// stormgate_unread_proof_vetoed_total). What remains unprovable: a provider that
// half-closes, reads a request without acknowledging it yet (delayed ACK) and then
// aborts, within those few milliseconds. The rules are sound only for a provider in
// Stormgate's network namespace (loopback, the sidecar's case): for a provider on
// another host they are off (noteConnected).
//
// Re-holding needs the request's bytes after the kernel took them: each connection
// keeps the last replaySize bytes of requests it sent (replayRing), copied under
// upConn.mu when they are sent. A request that is no longer there is answered as
// before.

// replaySize is how many bytes of recently sent requests each provider connection
// keeps for re-holding. It covers every request in flight on a connection up to
// this many bytes; larger frames are never kept.
const replaySize = 64 << 10

// replayRing keeps the bytes of recently sent request frames by stream offset. It
// is guarded by its upConn's mu; frames are put in stream order.
type replayRing struct {
	buf []byte
	end uint64 // stream offset just past the last frame put
}

func (r *replayRing) put(off uint64, frame []byte) {
	if len(frame) > replaySize {
		return
	}
	if r.buf == nil {
		r.buf = make([]byte, replaySize)
	}
	n := copy(r.buf[off%replaySize:], frame)
	copy(r.buf, frame[n:])
	r.end = off + uint64(len(frame))
}

// copyOut returns a copy of the frame put at off, if no later frame overwrote it.
func (r *replayRing) copyOut(off uint64, n int) ([]byte, bool) {
	if r.buf == nil || n <= 0 || n > replaySize || off+uint64(n) > r.end || r.end-off > replaySize {
		return nil, false
	}
	out := make([]byte, n)
	m := copy(out, r.buf[off%replaySize:])
	copy(out[m:], r.buf)
	return out, true
}

// connLife is one provider connection's part of the lifecycle.
type connLife struct {
	windowFrom  atomic.Int64 // start of the not-executed window (connect, READONLY/WRITEABLE/closing)
	ring        replayRing   // under upConn.mu
	ackBase     uint64       // tcpi_bytes_acked right after connect (the SYN); set before the connection is used
	ackOK       bool
	resets      atomic.Pointer[resetCounts] // the namespace's reset counters at connect or the last heartbeat check
	end         peerEnd                     // the first peer end seen; under w.fdMu, read after w.close
	endFD       int                         // after a FIN: a dup of the socket, to watch for the RST (fail closes it); -1 when none
	gotReadonly atomic.Bool                 // the provider sent READONLY on this connection
	draining    atomic.Bool                 // a connection to the draining provider: readonly until the drain ends
	late        atomic.Bool                 // made during a drain: to the draining provider or to its successor
	probe       atomic.Bool                 // a heartbeat is out to tell which (probeAnswered)
	diag        *diagSlot                   // the provider socket's destruction, announced (peerdiag.go); nil when not watched
	diagKey     diagKey
}

// TCP states (include/net/tcp_states.h).
const (
	tcpClose     = 7 // after a RST
	tcpCloseWait = 8 // after the peer's FIN
)

// peerEnd is what the kernel knew when the connection's end was first seen.
type peerEnd struct {
	state   uint8  // tcpi_state; 0 when not read
	acked   uint64 // stream bytes the provider's kernel acknowledged
	pastFIN bool   // state CLOSE_WAIT from a RST that refused bytes past the FIN (resetAfterFIN)
	read    bool   // acked is what the provider's application read, from its socket's destruction (peerdiag.go)
	dropped string // why the proof was given up (the end then proves nothing), for the log
}

// String is the end as the close log shows it.
func (e peerEnd) String() string {
	var s string
	switch {
	case e.state == tcpCloseWait && e.pastFIN:
		s = "FIN then RST"
	case e.state == tcpCloseWait:
		s = "FIN"
	case e.state == tcpClose:
		s = "RST"
	default:
		s = "unknown"
	}
	if e.read {
		s += "; the provider's application had read " + strconv.FormatUint(e.acked, 10) + " bytes"
	}
	if e.dropped != "" {
		s += " (no proof: " + e.dropped + ")"
	}
	return s
}

// drop gives up the proof (unseen is then false), keeping what was seen for the log.
func (e peerEnd) drop(why string) peerEnd {
	e.dropped = why
	return e
}

// unseen reports whether the frame [off, off+n), which the kernel took (it ends at or
// before final, the stream's end), provably never reached the provider's
// application:
//   - after a FIN the application had read exactly what its kernel acknowledged:
//     a frame ending beyond that arrived after it closed;
//   - after a RST the provider closed with unread bytes, which are the end of what
//     arrived: the last frame sent is unread (or never arrived).
func (e peerEnd) unseen(off uint64, n int, final uint64) bool {
	if n <= 0 || e.dropped != "" {
		return false // a request restored from a handover that the kernel took before it, or no proof
	}
	end := off + uint64(n)
	if e.read {
		return end > e.acked // never whole in the application's hands
	}
	switch e.state {
	case tcpCloseWait:
		return end > e.acked
	case tcpClose:
		return end == final
	}
	return false
}

// noteConnected reads the acknowledged-bytes base of a new connection. The FIN and RST
// rules stay off (ackOK false) for a provider that is not on loopback.
func (l *connLife) noteConnected(fd int, now int64) {
	l.windowFrom.Store(now)
	l.endFD = -1
	if !loopbackPeer(fd) {
		return
	}
	l.noteResets()
	info, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
	if err != nil {
		return
	}
	l.ackBase, l.ackOK = info.Bytes_acked, true
	// The announcement counts the provider's bytes from the connection's first: it
	// matches Stormgate's stream offsets only on a connection that carried nothing yet
	// (not one restored from a handover).
	if info.Bytes_acked == 1 && info.Bytes_sent == 0 {
		if w := diagWatcher(); w != nil {
			if k, ok := diagKeyOf(fd); ok {
				l.diagKey, l.diag = k, w.register(k)
			}
		}
	}
}

// providerRead returns how much of the stream the provider's application had read
// when its socket was destroyed, waiting up to diagWait for the announcement. It needs
// the provider's end seen (FIN or RST) and an announcement consistent with it: the
// provider's kernel received at least what it acknowledged to Stormgate, and no more
// than Stormgate sent (final). A socket reset by SO_LINGER 0 is announced with its
// counters (and its peer port) zeroed; this check refuses such an announcement even
// if it matched.
func (l *connLife) providerRead(final uint64) (uint64, bool) {
	s := l.diag
	if s == nil || (l.end.state != tcpClose && l.end.state != tcpCloseWait) {
		return 0, false
	}
	t := time.NewTimer(diagWait)
	defer t.Stop()
	select {
	case <-s.done:
	case <-t.C:
		return 0, false
	}
	if s.early || s.received < l.end.acked || s.received > final {
		return 0, false
	}
	return s.received - s.unread, true
}

// releaseDiag stops watching for the provider socket's destruction.
func (l *connLife) releaseDiag() {
	if l.diag != nil {
		if w := diagWatcher(); w != nil {
			w.release(l.diagKey)
		}
		l.diag = nil
	}
}

// readEnd is the connection's end when the provider's application is known to have
// read exactly read bytes; the dup kept for confirmFIN is closed.
func (l *connLife) readEnd(read uint64) peerEnd {
	if l.endFD >= 0 {
		unix.Close(l.endFD)
		l.endFD = -1
	}
	e := l.end
	e.acked, e.read = read, true
	return e
}

// loopbackPeer reports whether the socket's peer is a loopback address.
func loopbackPeer(fd int) bool {
	sa, err := unix.Getpeername(fd)
	if err != nil {
		return false
	}
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return a.Addr[0] == 127
	case *unix.SockaddrInet6:
		return netip.AddrFrom16(a.Addr).Unmap().IsLoopback()
	}
	return false
}

// notePeerEnd records what the kernel says about the connection's end, once, while
// the fd is still open: call it before w.close.
func (uc *upConn) notePeerEnd() { uc.w.withFD(uc.life.captureEnd) }

// captureEnd reads the connection's end from fd, once; after a FIN it keeps a dup of
// the socket for confirmFIN.
func (l *connLife) captureEnd(fd int) {
	if !l.ackOK || l.end.state != 0 {
		return
	}
	info, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
	if err != nil || info.Bytes_acked < l.ackBase {
		return
	}
	l.end = peerEnd{state: info.State, acked: info.Bytes_acked - l.ackBase}
	if info.State == tcpClose && resetAfterFIN(fd) {
		// The provider's FIN came first and its RST refused bytes sent past it, before
		// Stormgate read the FIN: the FIN rule, already confirmed by that RST.
		l.end.state, l.end.pastFIN = tcpCloseWait, true
		return
	}
	if info.State == tcpCloseWait {
		if d, err := unix.Dup(fd); err == nil {
			l.endFD = d
		}
	}
}

// resetAfterFIN reports whether the RST that closed the socket came after the peer's
// FIN: Linux leaves EPIPE as the socket's error for a RST received in CLOSE_WAIT and
// ECONNRESET for one received on an established connection (tcp_reset). Reading the
// error clears it; 0 (already read by a write) proves nothing.
func resetAfterFIN(fd int) bool {
	errno, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
	return err == nil && unix.Errno(errno) == unix.EPIPE
}

// lostFate says, in the answer to a request lost with its connection, what is known of
// it: that the provider received it (its application read it, as its socket's
// destruction announced, or its kernel acknowledged it before a FIN), or nothing.
func (l *connLife) lostFate(end peerEnd, off uint64, n int) string {
	e := off + uint64(n)
	if end.read && e <= end.acked || l.end.state == tcpCloseWait && e <= l.end.acked {
		return "the provider had received it before it closed; it may or may not have run"
	}
	return "it may or may not have run"
}

// resetCounts are the TcpExt counters of /proc/net/netstat that say why the kernel of
// this network namespace reset connections, in three groups. unread (TCPAbortOnClose):
// an application closed with bytes unread. ambiguous (TCPAbortOnData): bytes arrived
// after the application closed, or it closed with SO_LINGER 0 and nothing unread (Linux
// counts both there). other (TCPAbortOnLinger, TCPAbortOnMemory, TCPAbortOnTimeout,
// TCPAbortFailed): resets that say nothing of what was read. A provider on loopback
// shares the namespace, so its kernel's reasons are counted here.
type resetCounts struct{ unread, ambiguous, other uint64 }

var (
	resetUnread    = []string{"TCPAbortOnClose"}
	resetAmbiguous = []string{"TCPAbortOnData"}
	resetOther     = []string{"TCPAbortOnLinger", "TCPAbortOnMemory", "TCPAbortOnTimeout", "TCPAbortFailed"}
)

// readResetCounts reads the counters; false when they are not available.
func readResetCounts() (resetCounts, bool) {
	b, err := os.ReadFile("/proc/net/netstat")
	if err != nil {
		return resetCounts{}, false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	var names []string
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || f[0] != "TcpExt:" {
			continue
		}
		if names == nil {
			names = f
			continue
		}
		var c resetCounts
		found := 0
		for i, n := range names {
			if i >= len(f) {
				break
			}
			v, err := strconv.ParseUint(f[i], 10, 64)
			switch {
			case err != nil:
			case slices.Contains(resetUnread, n):
				c.unread += v
				found++
			case slices.Contains(resetAmbiguous, n):
				c.ambiguous += v
				found++
			case slices.Contains(resetOther, n):
				c.other += v
				found++
			}
		}
		return c, found == len(resetUnread)+len(resetAmbiguous)+len(resetOther)
	}
	return resetCounts{}, false
}

// noteResets takes the reset counters as the connection's baseline (at connect, and at
// each heartbeat check, so that the window a veto looks at stays short).
func (l *connLife) noteResets() {
	if c, ok := readResetCounts(); ok {
		l.resets.Store(&c)
	} else {
		l.resets.Store(nil)
	}
}

// resetSettle is how long fail waits after a peer's RST before it reads the counters:
// the peer's kernel counts the reset right after sending it.
const resetSettle = 2 * time.Millisecond

// vetoAbortive keeps a peer end's proof only if the kernel's counters, since the
// baseline, explain the provider's resets: after a RST alone, a close with unread bytes
// was counted and nothing else (a SO_LINGER 0 abort after reading everything counts as
// ambiguous); after a FIN confirmed by a RST, nothing but unread or ambiguous resets (the
// bytes past the FIN draw an ambiguous one). A veto is counted, and the requests are
// answered as lost. Resets of other connections in the namespace in the meantime veto
// too: the rule errs towards answering.
func (l *connLife) vetoAbortive(e peerEnd, vetoed prometheus.Counter) peerEnd {
	if e.state != tcpClose && e.state != tcpCloseWait {
		return e
	}
	base := l.resets.Load()
	if base == nil {
		return e.drop("the namespace's reset counters are not readable")
	}
	time.Sleep(resetSettle)
	now, ok := readResetCounts()
	explained := ok && now.other == base.other
	if e.state == tcpClose {
		explained = explained && now.unread > base.unread && now.ambiguous == base.ambiguous
	}
	if !explained {
		vetoed.Inc()
		return e.drop("vetoed: the namespace's reset counters do not explain it")
	}
	return e
}

// finConfirm bounds the wait for a provider that sent a FIN to refuse the bytes past it.
// On loopback the RST comes within microseconds; a half-closed provider's delayed ACK
// within 40 ms.
const finConfirm = 100 * time.Millisecond

// confirmFIN decides the FIN rule once the connection is closed: a frame that ends past
// what the provider acknowledged before its FIN is unseen only if the provider's kernel
// then refused it (a RST: the socket is closed) without acknowledging any of it. It
// returns end, changed to no proof when that is not seen within finConfirm. final is the
// stream's end; the dup of the socket is closed.
func (l *connLife) confirmFIN(final uint64) peerEnd {
	e, fd := l.end, l.endFD
	l.endFD = -1
	if fd < 0 {
		return e
	}
	defer unix.Close(fd)
	if e.state != tcpCloseWait || final <= e.acked {
		return e // nothing past the FIN's acknowledgement
	}
	for deadline := time.Now().Add(finConfirm); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		info, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
		switch {
		case err != nil || info.Bytes_acked-l.ackBase > e.acked:
			return e.drop("the provider acknowledged bytes past its FIN (a half-close)")
		case info.State == tcpClose:
			return e
		}
	}
	return e.drop("no RST for the bytes past its FIN within " + finConfirm.String())
}

// withFD runs f with the writer's fd while it is open (close waits for it), so the
// fd number cannot be closed and reused under f.
func (w *writer) withFD(f func(fd int)) {
	w.fdMu.Lock()
	defer w.fdMu.Unlock()
	if !w.fdClosed {
		f(w.fd)
	}
}

// replayCopy returns a copy of the request frame sent at off.
func (uc *upConn) replayCopy(off uint64, n int) ([]byte, bool) {
	uc.mu.Lock()
	defer uc.mu.Unlock()
	return uc.life.ring.copyOut(off, n)
}

// inWindow reports whether not-executed answers on this connection are re-held now.
func (uc *upConn) inWindow(now int64, cfg *Config) bool {
	return cfg.NotExecutedWindow > 0 && now-uc.life.windowFrom.Load() < int64(cfg.NotExecutedWindow)
}

// reholdNotExecuted puts a request back in the hold queue when the provider's answer
// proves it never ran and the rules allow; false leaves the answer to be passed on.
func (uc *upConn) reholdNotExecuted(pe pending, frame []byte, now int64) bool {
	p := uc.pool
	srv := p.srv
	why := srv.codec.NotExecuted(frame)
	if why == "" {
		p.life.answered()
		return false
	}
	cfg := srv.cfg.Load()
	outcome := notRunPassedOn
	switch {
	case !uc.inWindow(now, cfg):
		outcome = notRunOutsideWindow
	case int(pe.tries) < cfg.NotExecutedRetries:
		b, ok := uc.replayCopy(pe.off, pe.n)
		if !ok {
			break
		}
		d := p.life.nextPause(cfg)
		srv.sendByOf(&pe.request, b, cfg)
		if now+int64(d) >= holdUntil(&pe.request, cfg) {
			break // its hold would end before the retry: the provider's own answer is the better one
		}
		pe.tries++
		srv.m.life.notRunCounter(why, notRunReheld).Inc()
		p.life.pause(now, d)
		if pe.tries == 1 {
			srv.log.Debug("the provider answered that it did not run a request; holding it and retrying",
				zap.String("provider", p.addr), zap.String("answer", why), zap.Duration("pause", d))
		}
		p.hold.rehold([]held{{request: pe.request, frame: b}}, holdReheldNotRun)
		return true
	}
	srv.m.life.notRunCounter(why, outcome).Inc()
	return false
}

// poolLife is a pool's part of the lifecycle.
type poolLife struct {
	pauseUntil  atomic.Int64 // no request goes out before this after a not-executed answer
	pauseStreak atomic.Int32 // not-executed answers since the last ordinary one
	drainSince  atomic.Int64 // the provider is draining since; 0 when not
	gone        atomic.Bool  // during a drain: a dial was refused, the draining provider no longer listens
	drainTimer  keepalive.Timer
}

// answered notes an ordinary answer: the provider serves, pauses start small again.
func (l *poolLife) answered() {
	if l.pauseStreak.Load() != 0 {
		l.pauseStreak.Store(0)
	}
}

// nextPause is how long the next not-executed answer stops sending: backoff_base,
// doubling with each such answer in a row, capped at backoff_max.
func (l *poolLife) nextPause(cfg *Config) time.Duration {
	d := cfg.BackoffBase << min(l.pauseStreak.Load(), 20)
	if d > cfg.BackoffMax || d <= 0 {
		d = cfg.BackoffMax
	}
	return d
}

// pause stops sending until now+d and counts one more not-executed answer in a row.
func (l *poolLife) pause(now int64, d time.Duration) {
	l.pauseStreak.Add(1)
	until := now + int64(d)
	for {
		old := l.pauseUntil.Load()
		if old >= until || l.pauseUntil.CompareAndSwap(old, until) {
			return
		}
	}
}

// shortenPause ends a pause by until at the latest (backoff_max lowered live).
func (l *poolLife) shortenPause(until int64) {
	for {
		old := l.pauseUntil.Load()
		if old <= until || l.pauseUntil.CompareAndSwap(old, until) {
			return
		}
	}
}

// paused reports whether sending waits for a pause, and until when.
func (p *pool) paused() (until int64, ok bool) {
	u := p.life.pauseUntil.Load()
	if u == 0 {
		return 0, false
	}
	if p.srv.now() >= u {
		p.life.pauseUntil.CompareAndSwap(u, 0)
		return 0, false
	}
	return u, true
}

// drainTrigger labels stormgate_provider_drains_total{trigger}.
type drainTrigger uint8

const (
	drainReadonly drainTrigger = iota
	drainClosing
	nDrainTriggers
)

var drainTriggerNames = [nDrainTriggers]string{drainReadonly: "readonly", drainClosing: "closing"}

// draining reports whether the provider is shutting down gracefully.
func (p *pool) draining() bool { return p.life.drainSince.Load() != 0 }

// checkClosing starts a drain when an answer says the provider is closing.
func (p *pool) checkClosing(frame []byte) {
	if !p.draining() && p.srv.codec.Closing(frame) {
		p.startDrain(drainClosing)
	}
}

// startDrain stops sending new requests to the provider: every connection takes only
// what is in flight, new ones wait in the hold queue, until endDrain.
func (p *pool) startDrain(trigger drainTrigger) {
	srv := p.srv
	now := srv.now()
	if !p.life.drainSince.CompareAndSwap(0, now) {
		return
	}
	p.life.gone.Store(false)
	cfg := srv.cfg.Load()
	srv.m.life.drains[trigger].Inc()
	srv.log.Info("provider is shutting down gracefully: new requests wait in the hold queue until it is back",
		zap.String("provider", p.addr), zap.String("signal", drainTriggerNames[trigger]),
		zap.Duration("at_most", cfg.DrainTimeout), zap.String("requests", holdPolicyText(cfg)))
	for _, sl := range p.slotList() {
		if uc := sl.uc.Load(); uc != nil {
			uc.life.draining.Store(true)
			uc.state.CompareAndSwap(stateReady, stateReadonly)
			uc.life.windowFrom.Store(now)
		}
	}
	srv.wheel.Schedule(&p.life.drainTimer, cfg.DrainTimeout)
	p.connChanged()
}

// endDrain lets the provider's connections take requests again.
func (p *pool) endDrain(why string) {
	srv := p.srv
	since := p.life.drainSince.Swap(0)
	if since == 0 {
		return
	}
	srv.wheel.Stop(&p.life.drainTimer)
	now := srv.now()
	srv.log.Info("provider drain over: connections take requests again", zap.String("provider", p.addr),
		zap.String("why", why), zap.Duration("after", time.Duration(now-since)))
	for _, sl := range p.slotList() {
		if uc := sl.uc.Load(); uc != nil && !p.retiring(uc.slot) {
			uc.life.draining.Store(false)
			uc.life.late.Store(false)
			uc.life.probe.Store(false)
			uc.state.CompareAndSwap(stateReadonly, stateReady)
			uc.life.gotReadonly.Store(false)
			uc.life.windowFrom.Store(now)
		}
	}
	p.connChanged()
	p.hold.dispatch()
}

// followDrain makes a new connection follow a drain in progress; call it right after the
// connection is stored in its slot. Until the drain ends it takes no requests: it may
// reach the draining provider (a Java server accepts and closes new connections while
// it closes; dubbo-go serves on until it exits) or its successor. Once the draining
// provider no longer listens (a refused dial), new connections are to the successor.
func (p *pool) followDrain(uc *upConn) {
	if !p.draining() || p.life.gone.Load() {
		return
	}
	uc.life.draining.Store(true)
	uc.life.late.Store(true)
	uc.state.CompareAndSwap(stateReady, stateReadonly)
	if !p.draining() { // endDrain may have looked at the slots before uc was in one
		uc.life.draining.Store(false)
		uc.life.late.Store(false)
		uc.state.CompareAndSwap(stateReadonly, stateReady)
		return
	}
	p.drainDone()
}

// dialFailed notes, during a drain, that the draining provider no longer listens:
// connections made from now on take requests; the drain ends once no connection to the
// old provider is left (a provider may close its listener first and drain its
// connections after).
func (p *pool) dialFailed() {
	if p.draining() {
		p.life.gone.Store(true)
		p.drainDone()
	}
}

// drainDone moves a drain on when connections close or open: once no connection that
// was open when the drain started is left, the drain ends if the provider no longer
// listens; otherwise each connection made since is probed with a heartbeat, and the
// first answer ends the drain (the provider serves new connections: its successor, or
// a draining dubbo-go provider that still serves and will say closing again). A Java
// server that is closing closes new connections without answering.
func (p *pool) drainDone() {
	if !p.draining() {
		return
	}
	var late []*upConn
	for _, sl := range p.slotList() {
		uc := sl.uc.Load()
		if uc == nil || !uc.life.draining.Load() || uc.state.Load() == stateClosed {
			continue
		}
		if !uc.life.late.Load() {
			return // a connection to the draining provider is still open
		}
		late = append(late, uc)
	}
	if p.life.gone.Load() {
		p.endDrain("the draining provider stopped listening and its connections are closed")
		return
	}
	for _, uc := range late {
		if uc.life.probe.CompareAndSwap(false, true) {
			var buf [64]byte
			uc.sendControl(p.srv.codec.AppendHeartbeatRequest(buf[:0], 0), true) // the id is the connection's
		}
	}
}

// probeAnswered ends a drain: a connection made after the draining provider's last
// connection closed answered its heartbeat.
func (p *pool) probeAnswered(uc *upConn) {
	uc.life.probe.Store(false)
	p.endDrain("the provider answers on a new connection after its old ones closed")
}

// sendToDraining sends a request whose hold ended on a connection of a draining
// provider that still serves, rather than failing it.
func (p *pool) sendToDraining(r request, frame []byte) bool {
	if !p.draining() || r.sess.closing.Load() {
		return false
	}
	for _, sl := range p.slotList() {
		if uc := sl.uc.Load(); uc != nil && !p.retiring(uc.slot) && uc.sendIn(r, frame, true) {
			return true
		}
	}
	return false
}

// not-executed answer outcomes, labels of stormgate_not_executed_answers_total{outcome}.
type notRunOutcome uint8

const (
	notRunReheld notRunOutcome = iota
	notRunPassedOn
	notRunOutsideWindow
	nNotRunOutcomes
)

var notRunOutcomeNames = [nNotRunOutcomes]string{
	notRunReheld:        "reheld",
	notRunPassedOn:      "passed_on",
	notRunOutsideWindow: "outside_window",
}

// lifeMetrics are the lifecycle's counters.
type lifeMetrics struct {
	notRun     map[string]*[nNotRunOutcomes]prometheus.Counter
	drains     [nDrainTriggers]prometheus.Counter
	vetoed     prometheus.Counter
	collectors []prometheus.Collector
}

func newLifeMetrics(reasons []string) lifeMetrics {
	m := lifeMetrics{notRun: make(map[string]*[nNotRunOutcomes]prometheus.Counter, len(reasons)+1)}
	reasons = append(reasons[:len(reasons):len(reasons)], "unknown")
	notRun := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stormgate_not_executed_answers_total",
		Help: "Provider answers proving the request never ran (service not exported yet or any more, thread pool " +
			"full), by answer and outcome: reheld (back to the hold queue, sent again), passed_on (retries or hold " +
			"deadline used up), outside_window (not within hold.not_executed_window of a connect or state change)."},
		[]string{"reason", "outcome"})
	for _, r := range reasons {
		var cs [nNotRunOutcomes]prometheus.Counter
		for i := range cs {
			cs[i] = notRun.WithLabelValues(r, notRunOutcomeNames[i])
		}
		m.notRun[r] = &cs
	}
	drains := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stormgate_provider_drains_total",
		Help: "Graceful shutdowns of the provider seen, by signal (readonly: a READONLY event; closing: an answer " +
			"carrying closing=true)."}, []string{"trigger"})
	for i := range m.drains {
		m.drains[i] = drains.WithLabelValues(drainTriggerNames[i])
	}
	m.vetoed = prometheus.NewCounter(prometheus.CounterOpts{Name: "stormgate_unread_proof_vetoed_total",
		Help: "Provider connections that ended with a FIN or RST whose requests could not be proven unread because " +
			"the network namespace's kernel counted resets that prove nothing (SO_LINGER 0 aborts, timeouts) in the " +
			"meantime, or no reset for unread bytes: their requests were answered as lost instead of sent again."})
	m.collectors = []prometheus.Collector{notRun, drains, m.vetoed}
	return m
}

// notRunCounter returns the counter of one answer and outcome; reasons the codec
// did not list at start share the "unknown" series.
func (m *lifeMetrics) notRunCounter(why string, o notRunOutcome) prometheus.Counter {
	cs, ok := m.notRun[why]
	if !ok {
		cs = m.notRun["unknown"]
	}
	return cs[o]
}
