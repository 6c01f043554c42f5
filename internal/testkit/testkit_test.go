package testkit

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestServeLoopback: each connection reaches serve as a non-blocking fd, with the client's address.
func TestServeLoopback(t *testing.T) {
	type served struct {
		fd     int
		remote netip.AddrPort
	}
	got := make(chan served, 1)
	addr := ServeLoopback(t, func(fd int, remote, _ netip.AddrPort) { got <- served{fd, remote} })
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	select {
	case s := <-got:
		defer unix.Close(s.fd)
		if want := nc.LocalAddr().(*net.TCPAddr).AddrPort(); s.remote != want {
			t.Errorf("remote %v, want the client's %v", s.remote, want)
		}
		fl, err := unix.FcntlInt(uintptr(s.fd), unix.F_GETFL, 0)
		if err != nil || fl&unix.O_NONBLOCK == 0 {
			t.Errorf("the fd's flags %#x (%v), want O_NONBLOCK", fl, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no connection served")
	}
}
