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
	"golang.org/x/sys/unix"

	"github.com/stormgate/stormgate/keepalive"
)

// What a dead provider read, from its kernel: the proof that lets fail re-hold a
// request the kernel took (lifecycle.go has the table of provider ends).
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

// peerProof is one provider connection's part of the proof: what the kernel said of
// the connection at its start and at its end.
type peerProof struct {
	ackBase uint64 // tcpi_bytes_acked right after connect (the SYN); set before the connection is used
	ackOK   bool
	resets  atomic.Pointer[resetCounts] // the namespace's reset counters at connect or the last heartbeat check
	end     peerEnd                     // the first peer end seen; under w.fdMu, read after w.close
	endFD   int                         // after a FIN: a dup of the socket, to watch for the RST (fail closes it); -1 when none
	diag    *diagSlot                   // the provider socket's destruction, announced (peerdiag.go); nil when not watched
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
// rules stay off (ackOK false) for a provider that is not on loopback. The
// announcement comes from the server's watcher (diag), its times on clock
// (Options.Clock).
func (l *peerProof) noteConnected(fd int, clock keepalive.Clock, diag *peerDiag) {
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
		l.diag = diag.watch(fd, clock)
	}
}

// providerRead returns how much of the stream the provider's application had read
// when its socket was destroyed, waiting up to diagWait for the announcement. It needs
// the provider's end seen (FIN or RST) and an announcement consistent with it: the
// provider's kernel received at least what it acknowledged to Stormgate, and no more
// than Stormgate sent (final). A socket reset by SO_LINGER 0 is announced with its
// counters (and its peer port) zeroed; this check refuses such an announcement even
// if it matched.
func (l *peerProof) providerRead(final uint64, after afterFunc) (uint64, bool) {
	s := l.diag
	if s == nil || (l.end.state != tcpClose && l.end.state != tcpCloseWait) {
		return 0, false
	}
	select {
	case <-s.done:
	case <-after(diagWait):
		return 0, false
	}
	if s.early || s.received < l.end.acked || s.received > final {
		return 0, false
	}
	return s.received - s.unread, true
}

// releaseDiag stops watching for the provider socket's destruction.
func (l *peerProof) releaseDiag() {
	l.diag.release()
	l.diag = nil
}

// readEnd is the connection's end when the provider's application is known to have
// read exactly read bytes; the dup kept for confirmFIN is closed.
func (l *peerProof) readEnd(read uint64) peerEnd {
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
func (uc *upConn) notePeerEnd() { uc.w.withFD(uc.proof.captureEnd) }

// captureEnd reads the connection's end from fd, once; after a FIN it keeps a dup of
// the socket for confirmFIN.
func (l *peerProof) captureEnd(fd int) {
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
func (l *peerProof) lostFate(end peerEnd, off uint64, n int) string {
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
func (l *peerProof) noteResets() {
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
func (l *peerProof) vetoAbortive(e peerEnd, vetoed prometheus.Counter, after afterFunc) peerEnd {
	if e.state != tcpClose && e.state != tcpCloseWait {
		return e
	}
	base := l.resets.Load()
	if base == nil {
		return e.drop("the namespace's reset counters are not readable")
	}
	<-after(resetSettle)
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
func (l *peerProof) confirmFIN(final uint64, after afterFunc) peerEnd {
	e, fd := l.end, l.endFD
	l.endFD = -1
	if fd < 0 {
		return e
	}
	defer unix.Close(fd)
	if e.state != tcpCloseWait || final <= e.acked {
		return e // nothing past the FIN's acknowledgement
	}
	deadline := after(finConfirm)
	for {
		info, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
		switch {
		case err != nil || info.Bytes_acked-l.ackBase > e.acked:
			return e.drop("the provider acknowledged bytes past its FIN (a half-close)")
		case info.State == tcpClose:
			return e
		}
		select { // the kernel announces no RST: look again every millisecond of the clock
		case <-deadline:
			return e.drop("no RST for the bytes past its FIN within " + finConfirm.String())
		case <-after(time.Millisecond):
		}
	}
}

// afterFunc is the server's clock's wait (Server.after): the proof's waits are on
// Options.Clock, so a test on a manual clock decides when they end.
type afterFunc func(time.Duration) <-chan time.Time
