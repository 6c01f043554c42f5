package proxy

import (
	"bytes"
	"encoding/binary"
	"io"
	"net/netip"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/stormgate/stormgate/internal/testkit"
	"github.com/stormgate/stormgate/keepalive"
	"github.com/stormgate/stormgate/peer"
)

// TestPeerReadAnnounced checks, on this kernel, what peerdiag.go relies on: a destroyed
// TCP socket is announced on sock_diag's destroy group with what it received and what
// of that its application never read, for a close with unread bytes and for a clean
// close; a SO_LINGER 0 abort is announced with its counters zeroed, which must never
// count as "read nothing".
func TestPeerReadAnnounced(t *testing.T) {
	w := testDiagWatch(t)
	for _, tc := range []struct {
		name             string
		read             int  // bytes the peer's application reads of the 100 sent
		linger0          bool // the peer aborts instead of closing
		announced        bool
		received, unread uint64
	}{
		{"close with unread bytes", 40, false, true, 100, 60},
		{"clean close", 100, false, true, 100, 0},
		{"SO_LINGER 0 abort", 100, true, false, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, s := pair(t)
			k, ok := diagKeyOf(fdOf(t, c))
			if !ok {
				t.Fatal("no address pair")
			}
			clk := keepalive.NewManualClock(time.Unix(1_000_000, 0))
			slot := w.register(k, clk)
			if slot == nil {
				t.Fatal("a fresh address pair was refused")
			}
			defer slot.release()
			if _, err := c.Write(bytes.Repeat([]byte{'a'}, 100)); err != nil {
				t.Fatal(err)
			}
			clk.Add(diagFresh) // announced sooner, the slot is marked early (checked below)
			if _, err := io.ReadFull(s, make([]byte, tc.read)); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 5*time.Second, "the bytes in the peer's socket", func() bool { return unread(s) == 100-tc.read })
			if tc.linger0 {
				_ = s.SetLinger(0)
			}
			handled := make(chan struct{}, 1)
			// The peer socket's own announcement: the listener it was accepted on has
			// the same address and is announced with peer 0.0.0.0:0 (ln closes in
			// pair, its announcement may come late); an abort zeroes the peer's port.
			hook := func(got diagKey) {
				if got.provider == k.provider && got.stormgate.Addr() == k.stormgate.Addr() {
					select {
					case handled <- struct{}{}:
					default:
					}
				}
			}
			w.hookHandled.Store(&hook)
			defer w.hookHandled.Store(nil)
			s.Close()
			// The watcher handles the announcement (delivering it first if it proves
			// something); only then is the slot's state final.
			select {
			case <-handled:
			case <-time.After(5 * time.Second):
				t.Fatal("no announcement of the peer socket's destruction")
			}
			select {
			case <-slot.done:
				if !tc.announced {
					t.Fatalf("announced %+v for a socket whose counters the kernel zeroes", slot.peerRead)
				}
				if slot.early || slot.received != tc.received || slot.unread != tc.unread {
					t.Fatalf("announced %+v, want received %d unread %d", slot.peerRead, tc.received, tc.unread)
				}
			default:
				if tc.announced {
					t.Fatal("the announcement of the peer socket's destruction was refused")
				}
			}
		})
	}
}

// announcement builds a sock_diag destroy message like the kernel's.
func announcement(family uint8, src, dst netip.AddrPort, rqueue uint32, received uint64, segsIn uint32, infoLen int) []byte {
	var info unix.TCPInfo
	info.Bytes_received, info.Segs_in = received, segsIn
	ib := make([]byte, infoLen)
	copy(ib, (*[unsafeSizeofTCPInfo]byte)(unsafePointer(&info))[:])
	msg := make([]byte, diagMsgLen)
	msg[diagFamily] = family
	binary.BigEndian.PutUint16(msg[diagSport:], src.Port())
	binary.BigEndian.PutUint16(msg[diagDport:], dst.Port())
	s16, d16 := src.Addr().As16(), dst.Addr().As16()
	if family == unix.AF_INET {
		s4, d4 := src.Addr().As4(), dst.Addr().As4()
		copy(msg[diagSrc:], s4[:])
		copy(msg[diagDst:], d4[:])
	} else {
		copy(msg[diagSrc:], s16[:])
		copy(msg[diagDst:], d16[:])
	}
	binary.NativeEndian.PutUint32(msg[diagRqueue:], rqueue)
	attr := make([]byte, 4+len(ib))
	binary.NativeEndian.PutUint16(attr[0:], uint16(len(attr)))
	binary.NativeEndian.PutUint16(attr[2:], diagAttrInfo)
	copy(attr[4:], ib)
	body := append(msg, attr...)
	hdr := make([]byte, unix.SizeofNlMsghdr)
	binary.NativeEndian.PutUint32(hdr[0:], uint32(len(hdr)+len(body)))
	binary.NativeEndian.PutUint16(hdr[4:], sockDiagByFam)
	return append(hdr, body...)
}

func TestParseDestroyed(t *testing.T) {
	p4, s4 := netip.MustParseAddrPort("127.0.0.1:20880"), netip.MustParseAddrPort("127.0.0.1:40001")
	p6, s6 := netip.MustParseAddrPort("[::1]:20880"), netip.MustParseAddrPort("[::1]:40001")
	full := int(unsafeSizeofTCPInfo)
	for _, tc := range []struct {
		name string
		msg  []byte
		ok   bool
		k    diagKey
		r    peerRead
	}{
		{"IPv4", announcement(unix.AF_INET, p4, s4, 60, 100, 5, full), true, diagKey{p4, s4}, peerRead{100, 60}},
		{"IPv6", announcement(unix.AF_INET6, p6, s6, 0, 7, 3, full), true, diagKey{p6, s6}, peerRead{7, 0}},
		{"zeroed counters (SO_LINGER 0)", announcement(unix.AF_INET, p4, s4, 0, 0, 0, full), false, diagKey{}, peerRead{}},
		{"more unread than received", announcement(unix.AF_INET, p4, s4, 101, 100, 5, full), false, diagKey{}, peerRead{}},
		{"tcp_info too short", announcement(unix.AF_INET, p4, s4, 0, 100, 5, tcpInfoRecvOff), false, diagKey{}, peerRead{}},
		{"truncated", announcement(unix.AF_INET, p4, s4, 0, 100, 5, full)[:40], false, diagKey{}, peerRead{}},
		{"unknown family", announcement(99, p4, s4, 0, 100, 5, full), false, diagKey{}, peerRead{}},
	} {
		k, r, ok := parseDestroyed(tc.msg)
		if ok != tc.ok || (ok && (k != tc.k || r != tc.r)) {
			t.Errorf("%s: %v %+v %+v, want %v %+v %+v", tc.name, ok, k, r, tc.ok, tc.k, tc.r)
		}
	}
	// Cut anywhere, a message never panics.
	m := announcement(unix.AF_INET, p4, s4, 60, 100, 5, full)
	for i := range m {
		parseDestroyed(m[:i])
	}
}

const unsafeSizeofTCPInfo = unsafe.Sizeof(unix.TCPInfo{})

func unsafePointer(p *unix.TCPInfo) unsafe.Pointer { return unsafe.Pointer(p) }

// TestPeerReadTooEarly: an announcement within diagFresh of registering may be an older
// socket's with the same address pair (the kernel queues them): it is marked and proves
// nothing. The slot's clock never moves, so the announcement is early however long the
// kernel takes to send it.
func TestPeerReadTooEarly(t *testing.T) {
	w := testDiagWatch(t)
	c, s := pair(t)
	k, _ := diagKeyOf(fdOf(t, c))
	clk := keepalive.NewManualClock(time.Unix(1_000_000, 0))
	slot := w.register(k, clk)
	defer slot.release()
	s.Close()
	select {
	case <-slot.done:
		if !slot.early {
			t.Fatalf("announced %v after registering on the slot's clock, not marked early", clk.Now().Sub(slot.registered))
		}
	case <-time.After(2 * time.Second):
		t.Fatal("no announcement")
	}
	l := peerProof{diag: slot, end: peerEnd{state: tcpCloseWait}}
	if _, ok := l.providerRead(100, time.After); ok {
		t.Fatal("an early announcement proved something")
	}
}

// TestDiagTimesOnTheSlotsClock: the watcher's times are read on the registering
// server's clock: an address pair released is refused until diagReuseGuard has passed
// on the clock that released it (whichever clock registers it next), and an
// announcement is early until diagFresh has passed on the slot's clock.
func TestDiagTimesOnTheSlotsClock(t *testing.T) {
	w := newDiagWatch() // its maps only: no socket
	k := diagKey{netip.MustParseAddrPort("127.0.0.1:20880"), netip.MustParseAddrPort("127.0.0.1:40000")}
	clk := keepalive.NewManualClock(time.Unix(1_000_000, 0))
	other := keepalive.NewManualClock(time.Unix(9_000_000, 0))

	s := w.register(k, clk)
	clk.Add(diagFresh - time.Nanosecond)
	w.deliver(k, peerRead{received: 10})
	<-s.done
	if !s.early {
		t.Fatal("announced diagFresh-1ns after registering on its clock, not marked early")
	}
	for _, c := range []*keepalive.ManualClock{clk, other} {
		if w.register(k, c) != nil {
			t.Fatal("an address pair announced just now was registered again")
		}
	}
	clk.Add(diagReuseGuard - time.Nanosecond)
	if w.register(k, other) != nil {
		t.Fatal("registered again diagReuseGuard-1ns after its release on the releasing clock")
	}
	clk.Add(time.Nanosecond)
	s = w.register(k, other)
	if s == nil {
		t.Fatal("refused diagReuseGuard after its release")
	}
	other.Add(diagFresh)
	w.deliver(k, peerRead{received: 10})
	<-s.done
	if s.early {
		t.Fatal("announced diagFresh after registering on its clock, marked early")
	}
	s.release() // announced: a no-op
	if len(w.slots) != 0 || len(w.released) != 1 {
		t.Fatalf("%d slots, %d released after the announcement", len(w.slots), len(w.released))
	}
}

// TestDiagWatcherEndsWithServer: the sock_diag watcher belongs to the Server whose
// provider connections it watches. Once Close has returned, its goroutine has
// returned and its netlink socket is closed: nothing of it outlives the Server.
func TestDiagWatcherEndsWithServer(t *testing.T) {
	f := newFixture(t, peer.ProviderConfig{}) // a loopback provider: its connections are watched
	if len(diagSockets(t)) == 0 {
		t.Skip("sock_diag destroy announcements are not available here: no watcher to stop")
	}
	// The watcher's goroutine is started with its socket; under load it may not have run yet.
	waitFor(t, 10*time.Second, "the watcher's goroutine reading the sock_diag socket", func() bool { return diagRunners() == 1 })
	f.srv.Close()
	if n := diagRunners(); n != 0 {
		t.Errorf("%d sock_diag watcher goroutines still running after Close", n)
	}
	if s := diagSockets(t); len(s) != 0 {
		t.Errorf("sock_diag sockets still open after Close: %v", s)
	}
}

// TestDiagWatchCloseWakesItsReader: close ends a watcher whose goroutine is waiting
// for an announcement (closing a netlink socket alone would not wake a recvfrom), and
// closes its socket.
func TestDiagWatchCloseWakesItsReader(t *testing.T) {
	before := len(diagSockets(t))
	w, err := startDiagWatch()
	if err != nil {
		t.Skipf("sock_diag destroy announcements are not available here: %v", err)
	}
	if n := len(diagSockets(t)); n != before+1 {
		t.Fatalf("%d sock_diag sockets after starting a watcher, want %d", n, before+1)
	}
	// Waiting in the poller: parked in its read loop, not handling anything.
	waitFor(t, 5*time.Second, "the watcher waiting for an announcement", func() bool {
		for _, g := range bytes.Split(allStacks(), []byte("\n\n")) {
			if bytes.Contains(g, []byte("proxy.(*diagWatch).run(")) && bytes.Contains(g, []byte("runtime_pollWait")) {
				return true
			}
		}
		return false
	})
	closed := make(chan struct{})
	go func() { defer close(closed); w.close() }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("close did not wake the watcher's reader")
	}
	select {
	case <-w.done:
	default:
		t.Fatal("close returned before run did")
	}
	if n := len(diagSockets(t)); n != before {
		t.Fatalf("%d sock_diag sockets after close, want %d", n, before)
	}
}

// testDiagWatch is a watcher of the test's own, closed at its end; the test is skipped
// where the kernel offers no destroy announcements.
func testDiagWatch(t *testing.T) *diagWatch {
	t.Helper()
	w, err := startDiagWatch()
	if err != nil {
		t.Skipf("sock_diag destroy announcements are not available here: %v", err)
	}
	t.Cleanup(w.close)
	return w
}

// diagAvailable reports whether the kernel offers destroy announcements.
func diagAvailable() bool {
	w, err := startDiagWatch()
	if err == nil {
		w.close()
	}
	return err == nil
}

// diagSockets lists this process's sock_diag netlink sockets ("fd -> socket:[inode]").
func diagSockets(t *testing.T) []string {
	t.Helper()
	out, err := testkit.DiagSockets()
	if err != nil {
		t.Skip("cannot list netlink sockets:", err)
	}
	return out
}

// diagRunners counts the goroutines in a sock_diag watcher's read loop.
func diagRunners() int {
	return bytes.Count(allStacks(), []byte("proxy.(*diagWatch).run("))
}

// allStacks is every goroutine's stack.
func allStacks() []byte {
	for buf := make([]byte, 1<<20); ; buf = make([]byte, 2*len(buf)) {
		if n := runtime.Stack(buf, true); n < len(buf) {
			return buf[:n]
		}
	}
}
