package proxy

import (
	"encoding/binary"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
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
// Each Server has its own watcher (Server.diag): one netlink socket and one goroutine
// reading it, started by the first loopback provider connection that can use the
// proof (none for a provider elsewhere) and stopped by Close, last, after every
// goroutine that may wait for an announcement has returned. Each such connection
// registers the provider end's address pair at connect and releases it at its death.
// The socket is CLOEXEC: at a handover's exec it closes with the old process image,
// and the restored Server opens its own (a frozen Server keeps its watcher: Thaw
// resumes connections that stay registered). A kernel without the destroy groups
// leaves the FIN/RST rules alone, as they were.
//
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
	w          *diagWatch    // the watcher it is registered with; nil in tests that build a slot
	key        diagKey
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

// diagWatch is a Server's listener on the destroy groups.
type diagWatch struct {
	f    *os.File      // the netlink socket, in Go's poller; nil in tests that build a watcher
	done chan struct{} // closed when run has returned

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

// peerDiag is a Server's watcher, started on first use (Server.diag). Its zero value
// is ready; close ends it for good.
type peerDiag struct {
	mu  sync.Mutex
	w   *diagWatch
	off bool // the kernel offers no destroy announcements, or the server closed
}

// watcher returns the server's watcher, starting it on first use; nil when sock_diag's
// destroy groups cannot be joined or the server is closed.
func (d *peerDiag) watcher() *diagWatch {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.w == nil && !d.off {
		w, err := startDiagWatch()
		switch {
		case err == nil:
			d.w = w
		case err != unix.EMFILE && err != unix.ENFILE && err != unix.ENOBUFS && err != unix.ENOMEM:
			d.off = true // not offered here: not asked again at every connection
		}
	}
	return d.w
}

// watch starts watching for the destruction of the provider's end of the connection on
// fd (a loopback provider connection that carried nothing yet), on clock; nil when it
// is not watched.
func (d *peerDiag) watch(fd int, clock keepalive.Clock) *diagSlot {
	k, ok := diagKeyOf(fd)
	if !ok {
		return nil
	}
	if w := d.watcher(); w != nil {
		return w.register(k, clock)
	}
	return nil
}

// close stops the watcher and waits for its goroutine; watcher returns nil afterwards.
// Slots still registered are never announced (their waits end at diagWait).
func (d *peerDiag) close() {
	d.mu.Lock()
	w := d.w
	d.w, d.off = nil, true
	d.mu.Unlock()
	if w != nil {
		w.close()
	}
}

func newDiagWatch() *diagWatch {
	return &diagWatch{slots: map[diagKey]*diagSlot{}, released: map[diagKey]diagStamp{}, done: make(chan struct{})}
}

// startDiagWatch joins the destroy groups and starts reading them.
//
// How close stops the reader: closing a netlink socket does not wake a recvfrom blocked
// on it (Linux), and netlink has no shutdown(2) (EOPNOTSUPP). So the socket is
// non-blocking and handed to Go's poller (os.NewFile), and run reads it through
// RawConn.Read: a wait for the socket is a poller wait, which File.Close ends at once
// (the read returns an error), and File.Close returns once the fd is closed. The
// alternatives cost more: a poll(2) on the socket and an eventfd blocks a thread and
// adds an fd; a receive timeout (SO_RCVTIMEO) that checks a stop flag wakes the
// process for nothing and delays Close by up to the timeout. No thread stays blocked in
// recvfrom either.
func startDiagWatch() (*diagWatch, error) {
	// CLOEXEC from the start: a handover's exec (or any fork+exec meanwhile) never inherits it.
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return nil, err
	}
	// Groups are numbered from 1: bit g-1 joins group g.
	const groups = 1<<(unix.SKNLGRP_INET_TCP_DESTROY-1) | 1<<(unix.SKNLGRP_INET6_TCP_DESTROY-1)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: groups}); err != nil {
		unix.Close(fd)
		return nil, err
	}
	// Every TCP socket destroyed in the namespace is announced (consumers come and go
	// in storms): a larger queue loses fewer. A lost announcement only costs the proof.
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20)
	w := newDiagWatch()
	w.f = os.NewFile(uintptr(fd), "sock_diag")
	rc, err := w.f.SyscallConn()
	if err != nil {
		w.f.Close()
		return nil, err
	}
	go func() { defer close(w.done); w.run(rc) }() // owned by the Server's peerDiag: close waits for it
	return w, nil
}

// close ends run and waits for it; the socket is closed when it returns.
func (w *diagWatch) close() {
	_ = w.f.Close()
	<-w.done
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
	s := &diagSlot{done: make(chan struct{}), w: w, key: k, clock: clock, registered: clock.Now()}
	w.slots[k] = s
	return s
}

// release stops watching s's connection (a no-op once announced, for a slot that was
// never registered, and for nil).
func (s *diagSlot) release() {
	if s == nil || s.w == nil {
		return
	}
	w := s.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.slots[s.key] == s {
		delete(w.slots, s.key)
		w.released[s.key] = diagStamp{s.clock, s.clock.Now()}
	}
}

// run reads announcements until the socket is closed (close) or fails.
func (w *diagWatch) run(rc syscall.RawConn) {
	buf := make([]byte, 1<<16)
	var n int
	var rerr error
	recv := func(fd uintptr) bool {
		n, _, rerr = unix.Recvfrom(int(fd), buf, 0)
		return rerr != unix.EAGAIN // EAGAIN: wait in the poller for the next announcement
	}
	for {
		if err := rc.Read(recv); err != nil {
			return // closed
		}
		switch {
		case rerr == unix.EINTR:
			continue
		case rerr == unix.ENOBUFS:
			continue // announcements were lost: their connections fall back to the FIN/RST rules
		case rerr != nil:
			return
		}
		w.handle(buf[:n])
	}
}

// handle delivers every announcement in one datagram.
func (w *diagWatch) handle(b []byte) {
	for len(b) >= unix.SizeofNlMsghdr {
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
