package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// dialTCP connects to addr (an IP literal or a name, and a port) with a
// non-blocking socket and returns the connected fd, for netpoll.NewFDConnection.
// Unlike netpoll's own dialer it reports the kernel's reason for a failure
// (ECONNREFUSED, ETIMEDOUT, ...), which is what an operator needs to read in the log.
// It blocks its goroutine for up to timeout.
func dialTCP(addr string, timeout time.Duration) (int, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return -1, err
	}
	pn, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return -1, fmt.Errorf("bad port in %q", addr)
	}
	deadline := time.Now().Add(timeout)
	ip, err := netip.ParseAddr(host)
	if err != nil {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		ips, lerr := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		cancel()
		if lerr != nil || len(ips) == 0 {
			return -1, fmt.Errorf("resolve %s: %w", host, lerr)
		}
		ip = ips[0]
	}
	ip = ip.Unmap()
	var sa unix.Sockaddr
	family := unix.AF_INET
	if ip.Is4() {
		sa = &unix.SockaddrInet4{Port: int(pn), Addr: ip.As4()}
	} else {
		family = unix.AF_INET6
		sa = &unix.SockaddrInet6{Port: int(pn), Addr: ip.As16()}
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := connectWait(fd, sa, deadline); err != nil {
		unix.Close(fd)
		return -1, err
	}
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	return fd, nil
}

func connectWait(fd int, sa unix.Sockaddr, deadline time.Time) error {
	err := unix.Connect(fd, sa)
	if err == nil {
		return nil
	}
	if err != unix.EINPROGRESS && err != unix.EINTR {
		return err
	}
	for {
		ms := int(time.Until(deadline).Milliseconds())
		if ms <= 0 {
			return unix.ETIMEDOUT
		}
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
		n, err := unix.Poll(pfd, ms)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			continue // re-check the deadline
		}
		soerr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
		if err != nil {
			return err
		}
		if soerr != 0 {
			return unix.Errno(soerr)
		}
		return nil
	}
}

// dialMeaning says what a connect error means for an operator.
func dialMeaning(err error) string {
	var errno unix.Errno
	if !errors.As(err, &errno) {
		return "see the error"
	}
	switch errno {
	case unix.ECONNREFUSED:
		return "nothing listens on that port: the provider is down or still starting"
	case unix.ETIMEDOUT:
		return "no answer within upstream.connect_timeout: the host is down or packets are dropped"
	case unix.EHOSTUNREACH, unix.ENETUNREACH:
		return "no route to the provider's address"
	case unix.ECONNRESET:
		return "the provider reset the connection (its accept queue may be full)"
	case unix.EMFILE, unix.ENFILE:
		return "Stormgate is out of file descriptors: raise the open-file limit (ulimit -n)"
	case unix.EADDRNOTAVAIL:
		return "no local port or address available (ephemeral ports exhausted?)"
	}
	return "see the error"
}
