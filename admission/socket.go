package admission

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// newListenSocket creates, binds and listens a non-blocking TCP socket with an explicit backlog
// (net.Listen cannot: golang/go#39000). It returns the raw fd, the bound address and whether the
// socket is AF_INET6.
func newListenSocket(s *settings) (int, netip.AddrPort, bool, error) {
	fd, family, bindAddr, err := openSocket(s.addr, func(family int) (int, error) {
		return unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_TCP)
	})
	if err != nil {
		return -1, netip.AddrPort{}, false, fmt.Errorf("admission: socket: %w", err)
	}
	fail := func(op string, err error) (int, netip.AddrPort, bool, error) {
		unix.Close(fd)
		return -1, netip.AddrPort{}, false, fmt.Errorf("admission: %s %s: %w", op, s.addr, err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		return fail("SO_REUSEADDR", err)
	}
	if family == unix.AF_INET6 && bindAddr.Addr().IsUnspecified() {
		// "[::]:port" serves IPv4 too, as net.Listen does.
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0); err != nil {
			return fail("IPV6_V6ONLY", err)
		}
	}
	if err := applyListenerOptions(fd, s); err != nil {
		return fail("setsockopt", err)
	}
	if err := unix.Bind(fd, toSockaddr(bindAddr)); err != nil {
		return fail("bind", err)
	}
	if err := unix.Listen(fd, s.backlog); err != nil {
		return fail("listen", err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return fail("getsockname", err)
	}
	return fd, fromSockaddr(sa), family == unix.AF_INET6, nil
}

// openSocket opens the socket for addr with open(family). "[::]:port" on a kernel without IPv6
// (booted with ipv6.disable=1: socket(AF_INET6) fails with EAFNOSUPPORT) falls back to an IPv4
// socket on 0.0.0.0:port, as net.Listen does: "every address" then means every IPv4 address, and one
// setting (or injected manifest) serves dual-stack and IPv4-only nodes alike.
func openSocket(addr netip.AddrPort, open func(family int) (int, error)) (fd, family int, bindAddr netip.AddrPort, err error) {
	family = unix.AF_INET
	if addr.Addr().Is6() {
		family = unix.AF_INET6
	}
	fd, err = open(family)
	if err != nil && family == unix.AF_INET6 && addr.Addr().IsUnspecified() && errors.Is(err, unix.EAFNOSUPPORT) {
		addr = netip.AddrPortFrom(netip.IPv4Unspecified(), addr.Port())
		family = unix.AF_INET
		fd, err = open(family)
	}
	return fd, family, addr, err
}

// applyListenerOptions sets the options that accepted sockets inherit from the listener
// (TCP_NODELAY, SO_KEEPALIVE, TCP_KEEPIDLE: copied when the kernel clones the listener's
// socket), so the accept loop needs no per-connection setsockopt; and TCP_FASTOPEN.
// Called at creation and on Update; affects connections accepted afterwards.
func applyListenerOptions(fd int, s *settings) error {
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, boolInt(s.cfg.TCPNoDelay)); err != nil {
		return fmt.Errorf("TCP_NODELAY: %w", err)
	}
	if s.keepIdleSecs > 0 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, s.keepIdleSecs); err != nil {
			return fmt.Errorf("TCP_KEEPIDLE: %w", err)
		}
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE, boolInt(s.keepIdleSecs > 0)); err != nil {
		return fmt.Errorf("SO_KEEPALIVE: %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_FASTOPEN, s.cfg.TCPFastOpen); err != nil {
		return fmt.Errorf("TCP_FASTOPEN: %w", err)
	}
	return nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func toSockaddr(ap netip.AddrPort) unix.Sockaddr {
	if ap.Addr().Is4() {
		return &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	}
	return &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
}

// fromSockaddr converts an accept/getsockname address; IPv4-mapped IPv6 is unmapped.
func fromSockaddr(sa unix.Sockaddr) netip.AddrPort {
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port))
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), uint16(sa.Port))
	}
	return netip.AddrPort{}
}

// originalDst returns the destination a connection had before iptables REDIRECT/DNAT
// (SO_ORIGINAL_DST, from conntrack). ok is false when the kernel has no such record
// (no NAT on this connection or no conntrack), and the caller uses the local address.
func originalDst(fd int, ipv6Socket bool) (netip.AddrPort, bool) {
	if !ipv6Socket {
		// struct sockaddr_in is 16 bytes: the size of IPv6Mreq, whose getter is the
		// plain getsockopt into a 16-byte buffer.
		m, err := unix.GetsockoptIPv6Mreq(fd, unix.SOL_IP, unix.SO_ORIGINAL_DST)
		if err != nil {
			return netip.AddrPort{}, false
		}
		b := m.Multiaddr[:]
		if binary.NativeEndian.Uint16(b[0:2]) != unix.AF_INET {
			return netip.AddrPort{}, false
		}
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), binary.BigEndian.Uint16(b[2:4])), true
	}
	// IPv6 socket: an IPv4 client (mapped address) is tracked by the IPv4 table.
	if ap, ok := originalDst(fd, false); ok {
		return ap, true
	}
	var raw unix.RawSockaddrInet6
	n := uint32(unsafe.Sizeof(raw))
	if _, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_IPV6, ip6tSoOriginalDst,
		uintptr(unsafe.Pointer(&raw)), uintptr(unsafe.Pointer(&n)), 0); errno != 0 || raw.Family != unix.AF_INET6 {
		return netip.AddrPort{}, false
	}
	port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&raw.Port))[:])
	return netip.AddrPortFrom(netip.AddrFrom16(raw.Addr).Unmap(), port), true
}

// ip6tSoOriginalDst is IP6T_SO_ORIGINAL_DST (linux/netfilter_ipv6/ip6_tables.h).
const ip6tSoOriginalDst = 80

// closeWithFIN closes an accepted connection so that the peer sees an orderly FIN, not a RST.
// Linux resets a connection closed with unread received data, and a storm's consumers often
// send their first request right after connecting, so the receive queue is discarded first
// (recv with MSG_TRUNC discards TCP data without copying). Data arriving after the close
// still draws a RST; nothing short of lingering half-closed avoids that.
func closeWithFIN(fd int) {
	for range 4 {
		n, _, errno := unix.Syscall6(unix.SYS_RECVFROM, uintptr(fd), 0, 1<<30,
			unix.MSG_TRUNC|unix.MSG_DONTWAIT, 0, 0)
		if errno != 0 || n == 0 {
			break
		}
	}
	unix.Close(fd)
}

// errTemporary marks accept errors after which the loop backs off and retries
// (out of fds or kernel memory): the pending handshakes stay in the kernel queue.
func acceptErrTemporary(err error) bool {
	return errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE) ||
		errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.ENOMEM)
}

// acceptErrRetry marks accept errors about one connection only (accept(2): pending network
// errors of the new socket are passed to accept): try the next one at once.
func acceptErrRetry(err error) bool {
	switch {
	case errors.Is(err, unix.EINTR), errors.Is(err, unix.ECONNABORTED), errors.Is(err, unix.EPROTO),
		errors.Is(err, unix.EPERM), errors.Is(err, unix.ENETDOWN), errors.Is(err, unix.ENOPROTOOPT),
		errors.Is(err, unix.EHOSTDOWN), errors.Is(err, unix.ENONET), errors.Is(err, unix.EHOSTUNREACH),
		errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.ENETUNREACH):
		return true
	}
	return false
}
