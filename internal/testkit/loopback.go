package testkit

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// ServeLoopback listens on 127.0.0.1 and hands every accepted connection to serve as a non-blocking
// fd (a proxy.Server's ServeFD), as admission does, without pacing; it returns the address. The
// listening socket is blocking and served by one goroutine; the test's cleanup shuts it down
// (shutdown(2) wakes it) and waits for it.
func ServeLoopback(t testing.TB, serve func(fd int, remote, origDst netip.AddrPort)) string {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 4096); err != nil {
		t.Fatal(err)
	}
	sa, _ := unix.Getsockname(fd)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			nfd, sa, err := unix.Accept4(fd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
			if err == unix.EINTR || err == unix.ECONNABORTED {
				continue
			}
			if errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE) {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			if err != nil {
				return // shut down
			}
			_ = unix.SetsockoptInt(nfd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
			serve(nfd, PeerAddr(sa), netip.AddrPort{})
		}
	})
	t.Cleanup(func() {
		_ = unix.Shutdown(fd, unix.SHUT_RDWR)
		wg.Wait()
		_ = unix.Close(fd)
	})
	return fmt.Sprintf("127.0.0.1:%d", sa.(*unix.SockaddrInet4).Port)
}

// PeerAddr is an accepted IPv4 connection's peer address (accept(2)'s sockaddr), the zero AddrPort for
// any other.
func PeerAddr(sa unix.Sockaddr) netip.AddrPort {
	if s4, ok := sa.(*unix.SockaddrInet4); ok {
		return netip.AddrPortFrom(netip.AddrFrom4(s4.Addr), uint16(s4.Port))
	}
	return netip.AddrPort{}
}

// AwayAddr is a loopback address nothing listens on yet: a provider that is away until the test starts
// one there.
func AwayAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
