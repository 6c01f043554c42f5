package transparent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"
)

// ip6tSOOriginalDst is IP6T_SO_ORIGINAL_DST from linux/netfilter_ipv6/ip6_tables.h (x/sys/unix lacks it).
// It has the same value as SO_ORIGINAL_DST but is read at level SOL_IPV6.
const ip6tSOOriginalDst = 80

// OriginalDst returns the destination a redirected TCP connection had before the nat table rewrote it:
// for a consumer that dialed 198.18.0.2:20880 and was REDIRECTed to Stormgate's port 15006, it returns
// 198.18.0.2:20880. fd is an accepted (connected) TCP socket. IPv4 connections on dual-stack IPv6
// sockets are handled (the address returned is plain IPv4).
//
// On a connection conntrack tracks but no nat rule rewrote, the kernel returns the connection's own local
// address: callers that must tell "redirected" from "dialed the proxy port directly" compare the result
// with the local address. When conntrack has no entry at all (nat not in use in this namespace) the error
// wraps ErrNoOriginalDst.
func OriginalDst(fd int) (netip.AddrPort, error) {
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: getsockname: %w", err)
	}
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return originalDst4(fd)
	case *unix.SockaddrInet6:
		if netip.AddrFrom16(a.Addr).Is4In6() {
			return originalDst4(fd)
		}
		return originalDst6(fd)
	default:
		return netip.AddrPort{}, fmt.Errorf("original destination: socket is not TCP/IP (%T)", sa)
	}
}

// OriginalDstConn is OriginalDst for a connection from the net package (or anything else that exposes
// its descriptor through syscall.Conn, such as a netpoll connection's file descriptor wrapper).
func OriginalDstConn(c syscall.Conn) (netip.AddrPort, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: %w", err)
	}
	var ap netip.AddrPort
	var opErr error
	if err := rc.Control(func(fd uintptr) { ap, opErr = OriginalDst(int(fd)) }); err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: %w", err)
	}
	return ap, opErr
}

func originalDst4(fd int) (netip.AddrPort, error) {
	// The kernel writes a struct sockaddr_in (16 bytes); IPv6Mreq (20 bytes) is merely a buffer big
	// enough that x/sys/unix already knows how to pass to getsockopt.
	m, err := unix.GetsockoptIPv6Mreq(fd, unix.SOL_IP, unix.SO_ORIGINAL_DST)
	if err != nil {
		return netip.AddrPort{}, origErr(err)
	}
	b := m.Multiaddr[:]
	if fam := binary.NativeEndian.Uint16(b[0:2]); fam != unix.AF_INET {
		return netip.AddrPort{}, fmt.Errorf("original destination: kernel returned address family %d, want AF_INET", fam)
	}
	port := binary.BigEndian.Uint16(b[2:4])
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), port), nil
}

func originalDst6(fd int) (netip.AddrPort, error) {
	// struct sockaddr_in6 (28 bytes) fits in IPv6MTUInfo, whose first field is exactly that struct.
	m, err := unix.GetsockoptIPv6MTUInfo(fd, unix.SOL_IPV6, ip6tSOOriginalDst)
	if err != nil {
		return netip.AddrPort{}, origErr(err)
	}
	if m.Addr.Family != unix.AF_INET6 {
		return netip.AddrPort{}, fmt.Errorf("original destination: kernel returned address family %d, want AF_INET6", m.Addr.Family)
	}
	var port [2]byte
	binary.NativeEndian.PutUint16(port[:], m.Addr.Port) // stored in network byte order
	return netip.AddrPortFrom(netip.AddrFrom16(m.Addr.Addr).Unmap(), binary.BigEndian.Uint16(port[:])), nil
}

func origErr(err error) error {
	if errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("%w: %w", ErrNoOriginalDst, err)
	}
	return fmt.Errorf("original destination: getsockopt: %w", err)
}
