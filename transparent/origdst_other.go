//go:build !linux

package transparent

import (
	"errors"
	"net/netip"
	"syscall"
)

var errNotLinux = errors.New("original destination: SO_ORIGINAL_DST exists only on Linux")

// OriginalDst is available only on Linux; elsewhere it always fails.
func OriginalDst(fd int) (netip.AddrPort, error) { return netip.AddrPort{}, errNotLinux }

// OriginalDstConn is available only on Linux; elsewhere it always fails.
func OriginalDstConn(c syscall.Conn) (netip.AddrPort, error) { return netip.AddrPort{}, errNotLinux }
