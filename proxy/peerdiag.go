package proxy

import (
	"encoding/binary"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/stormgate/stormgate/keepalive"
)

// What the provider's application read, from its kernel.
//
// A provider on loopback shares Stormgate's network namespace, and Linux announces
// every TCP socket it destroys there to whoever listens on sock_diag's destroy groups
// (SKNLGRP_INET_TCP_DESTROY, SKNLGRP_INET6_TCP_DESTROY; no privilege needed, `ss -E`
// reads the same). The announcement of the provider's end of a connection carries
// its tcp_info and its receive queue: tcpi_bytes_received minus idiag_rqueue is
// exactly how much of Stormgate's stream the provider's application had read (its
// copied_seq) when the socket went: a close with unread bytes, a FIN, the kernel's
// close at SIGKILL. A request whose frame ends beyond that was never whole in the
// application's hands, so it never ran: fail re-holds it. This replaces the FIN and
// RST rules' inferences (peerend.go) whenever the announcement comes; they remain
// the fallback (no announcement within diagWait, a full netlink queue, a connection
// restored from a handover whose stream did not start at Stormgate's offset 0). An
// application that acted on bytes it only peeked at (MSG_PEEK) would defeat it; no
// Dubbo server does.
//
//	| provider's socket at its destruction     | requests re-held
//	|------------------------------------------|---------------------------------------------
//	| read R of the stream's bytes             | every request whose frame ends beyond R
//	| SO_LINGER 0 abort: counters zeroed       | refused; the FIN/RST rules decide
//	| announced within diagFresh of connecting | refused (perhaps an older socket's)
//	| no announcement within diagWait          | the FIN/RST rules decide (peerend.go)
//
// One process-wide netlink socket serves every connection; each loopback provider
// connection Stormgate dials registers the provider end's address pair at connect.
// The watcher has no clock of its own: a slot carries the clock of the server that
// registered it (Options.Clock), and every time the watcher keeps (diagFresh,
// diagReuseGuard) is read and aged on that clock.

// diagWait bounds how long fail waits for the announcement of a provider socket whose
// end (FIN or RST) Stormgate has seen: the kernel sends it when the socket is
// destroyed, microseconds after the provider's close on loopback.
const diagWait = 100 * time.Millisecond

// diagReuseGuard: an address pair registered again this soon after it was last
// released gets no announcement-based proof (a late announcement of the old socket
// could be taken for the new one's).
const diagReuseGuard = 10 * time.Second

// diagFresh: an announcement that comes this soon after its connection was registered
// proves nothing. The kernel queues announcements (a workqueue), so one for an older
// socket with the same address pair, destroyed just before the port was reused, can
// arrive just after the new connection registered.
const diagFresh = 50 * time.Millisecond

// diagKey is a provider connection seen from the provider's side: its own address
// (the announcement's source) and Stormgate's (the destination).
type diagKey struct{ provider, stormgate netip.AddrPort }

// diagSlot receives the announcement for one registered connection.
type diagSlot struct {
	done       chan struct{} // closed when the fields are set
	clock      keepalive.Clock
	registered time.Time // on clock
	early      bool      // announced within diagFresh of registering: perhaps an older socket's
	peerRead
}

// peerRead is what the provider's socket said when it was destroyed.
type peerRead struct {
	received uint64 // tcpi_bytes_received: stream bytes its kernel took in order
	unread   uint64 // idiag_rqueue: of those, the ones its application never read
}

// diagWatch is the process's listener on the destroy groups.
type diagWatch struct {
	mu       sync.Mutex
	slots    map[diagKey]*diagSlot
	released map[diagKey]diagStamp
	// tests: runs after each announcement is handled, with the destroyed socket's
	// address pair, also for one that proves nothing (an event for "it was refused").
	hookHandled atomic.Pointer[func(k diagKey)]
}

// diagStamp is when an address pair was released, on the clock of the slot that held it.
type diagStamp struct {
	clock keepalive.Clock
	at    time.Time
}

// recent reports whether the pair was released less than diagReuseGuard ago.
func (st diagStamp) recent() bool { return st.clock.Now().Sub(st.at) < diagReuseGuard }

var peerDiag struct {
	once sync.Once
	w    *diagWatch // nil when the kernel offers no destroy announcements
}

// diagWatcher returns the process's watcher, starting it on first use; nil when
// sock_diag's destroy groups cannot be joined.
func diagWatcher() *diagWatch {
	peerDiag.once.Do(func() {
		fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
		if err != nil {
			return
		}
		// Groups are numbered from 1: bit g-1 joins group g.
		const groups = 1<<(unix.SKNLGRP_INET_TCP_DESTROY-1) | 1<<(unix.SKNLGRP_INET6_TCP_DESTROY-1)
		if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: groups}); err != nil {
			unix.Close(fd)
			return
		}
		// Every TCP socket destroyed in the namespace is announced (consumers come and go
		// in storms): a larger queue loses fewer. A lost announcement only costs the proof.
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20)
		w := &diagWatch{slots: map[diagKey]*diagSlot{}, released: map[diagKey]diagStamp{}}
		peerDiag.w = w
		go w.run(fd)
	})
	return peerDiag.w
}

// register starts watching for the destruction of k's provider socket, on clock (the
// registering server's); nil when k was released too recently to tell its
// announcements apart.
func (w *diagWatch) register(k diagKey, clock keepalive.Clock) *diagSlot {
	w.mu.Lock()
	defer w.mu.Unlock()
	if st, ok := w.released[k]; ok && st.recent() {
		return nil
	}
	for old, st := range w.released { // keeps the map small: entries live diagReuseGuard
		if !st.recent() {
			delete(w.released, old)
		}
	}
	s := &diagSlot{done: make(chan struct{}), clock: clock, registered: clock.Now()}
	w.slots[k] = s
	return s
}

// release stops watching k.
func (w *diagWatch) release(k diagKey) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if s, ok := w.slots[k]; ok {
		delete(w.slots, k)
		w.released[k] = diagStamp{s.clock, s.clock.Now()}
	}
}

// run reads announcements until the socket fails.
func (w *diagWatch) run(fd int) {
	buf := make([]byte, 1<<16)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.ENOBUFS:
			continue // announcements were lost: their connections fall back to the FIN/RST rules
		case err != nil:
			return
		}
		for b := buf[:n]; len(b) >= unix.SizeofNlMsghdr; {
			l := int(binary.NativeEndian.Uint32(b[0:4]))
			if l < unix.SizeofNlMsghdr || l > len(b) {
				break
			}
			k, r, ok := parseDestroyed(b[:l])
			if ok {
				w.deliver(k, r)
			}
			if h := w.hookHandled.Load(); h != nil && k.provider.IsValid() {
				(*h)(k)
			}
			b = b[min(nlmAlign(l), len(b)):]
		}
	}
}

func (w *diagWatch) deliver(k diagKey, r peerRead) {
	w.mu.Lock()
	s := w.slots[k]
	var now time.Time
	if s != nil {
		now = s.clock.Now()
		delete(w.slots, k)
		w.released[k] = diagStamp{s.clock, now}
	}
	w.mu.Unlock()
	if s != nil {
		s.peerRead, s.early = r, now.Sub(s.registered) < diagFresh
		close(s.done)
	}
}

func nlmAlign(n int) int { return (n + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1) }

// Layout of a sock_diag announcement (linux/inet_diag.h): nlmsghdr, inet_diag_msg,
// then attributes, among them INET_DIAG_INFO with the socket's struct tcp_info.
const (
	diagMsgLen     = 72 // sizeof(struct inet_diag_msg)
	diagFamily     = 0  // idiag_family
	diagSport      = 4  // id.idiag_sport, network order
	diagDport      = 6  // id.idiag_dport
	diagSrc        = 8  // id.idiag_src[4]
	diagDst        = 24 // id.idiag_dst[4]
	diagRqueue     = 56 // idiag_rqueue
	diagAttrInfo   = 2  // INET_DIAG_INFO
	sockDiagByFam  = 20 // SOCK_DIAG_BY_FAMILY, the announcement's nlmsg_type
	tcpInfoRecvOff = int(unsafe.Offsetof(unix.TCPInfo{}.Bytes_received))
	tcpInfoSegsIn  = int(unsafe.Offsetof(unix.TCPInfo{}.Segs_in))
)

// parseDestroyed reads one announcement: the destroyed socket's own address and its
// peer's, what it received and what of that its application never read.
func parseDestroyed(m []byte) (k diagKey, r peerRead, ok bool) {
	if len(m) < unix.SizeofNlMsghdr+diagMsgLen || binary.NativeEndian.Uint16(m[4:6]) != sockDiagByFam {
		return k, r, false
	}
	d := m[unix.SizeofNlMsghdr:]
	var src, dst netip.Addr
	switch d[diagFamily] {
	case unix.AF_INET:
		src = netip.AddrFrom4([4]byte(d[diagSrc : diagSrc+4]))
		dst = netip.AddrFrom4([4]byte(d[diagDst : diagDst+4]))
	case unix.AF_INET6:
		src = netip.AddrFrom16([16]byte(d[diagSrc : diagSrc+16]))
		dst = netip.AddrFrom16([16]byte(d[diagDst : diagDst+16]))
	default:
		return k, r, false
	}
	k = diagKey{
		provider:  netip.AddrPortFrom(src.Unmap(), binary.BigEndian.Uint16(d[diagSport:])),
		stormgate: netip.AddrPortFrom(dst.Unmap(), binary.BigEndian.Uint16(d[diagDport:])),
	}
	r.unread = uint64(binary.NativeEndian.Uint32(d[diagRqueue:]))
	for a := d[diagMsgLen:]; len(a) >= 4; {
		l := int(binary.NativeEndian.Uint16(a[0:2]))
		if l < 4 || l > len(a) {
			break
		}
		if binary.NativeEndian.Uint16(a[2:4]) == diagAttrInfo && l-4 >= max(tcpInfoRecvOff, tcpInfoSegsIn)+8 {
			r.received = binary.NativeEndian.Uint64(a[4+tcpInfoRecvOff:])
			// A socket reset by SO_LINGER 0 (tcp_disconnect) is announced with its counters
			// zeroed: no segment in, nothing received. Such an announcement says nothing.
			segsIn := binary.NativeEndian.Uint32(a[4+tcpInfoSegsIn:])
			return k, r, segsIn > 0 && r.unread <= r.received
		}
		a = a[min((l+3)&^3, len(a)):]
	}
	return k, r, false
}

// diagKeyOf is the provider-side address pair of the connection on fd.
func diagKeyOf(fd int) (diagKey, bool) {
	la, err1 := unix.Getsockname(fd)
	pa, err2 := unix.Getpeername(fd)
	if err1 != nil || err2 != nil {
		return diagKey{}, false
	}
	l, ok1 := sockaddrAddrPort(la)
	p, ok2 := sockaddrAddrPort(pa)
	return diagKey{provider: p, stormgate: l}, ok1 && ok2
}

func sockaddrAddrPort(sa unix.Sockaddr) (netip.AddrPort, bool) {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port)), true
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr).Unmap(), uint16(a.Port)), true
	}
	return netip.AddrPort{}, false
}
