package admission

import (
	"errors"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"
)

// TestOpenSocketIPv6Fallback: "[::]:port" on a kernel without IPv6 becomes an IPv4 wildcard socket
// (what an injected manifest's [::] listener needs on nodes booted with ipv6.disable=1); a specific
// IPv6 address, or any other error, is not papered over.
func TestOpenSocketIPv6Fallback(t *testing.T) {
	noIPv6 := func(calls *[]int) func(int) (int, error) {
		return func(family int) (int, error) {
			*calls = append(*calls, family)
			if family == unix.AF_INET6 {
				return -1, unix.EAFNOSUPPORT
			}
			return 42, nil
		}
	}
	var calls []int
	fd, family, bind, err := openSocket(netip.MustParseAddrPort("[::]:15006"), noIPv6(&calls))
	if err != nil || fd != 42 || family != unix.AF_INET || bind != netip.MustParseAddrPort("0.0.0.0:15006") {
		t.Fatalf("[::] without IPv6: fd %d family %d bind %v err %v; want an IPv4 socket on 0.0.0.0:15006", fd, family, bind, err)
	}
	if len(calls) != 2 || calls[0] != unix.AF_INET6 {
		t.Fatalf("socket families tried %v, want AF_INET6 then AF_INET", calls)
	}

	calls = nil
	if _, _, _, err := openSocket(netip.MustParseAddrPort("[2001:db8::1]:15006"), noIPv6(&calls)); !errors.Is(err, unix.EAFNOSUPPORT) {
		t.Fatalf("a specific IPv6 address without IPv6: err %v, want EAFNOSUPPORT", err)
	}
	failing := func(int) (int, error) { return -1, unix.EMFILE }
	if _, _, _, err := openSocket(netip.MustParseAddrPort("[::]:15006"), failing); !errors.Is(err, unix.EMFILE) {
		t.Fatalf("EMFILE: err %v, want it returned", err)
	}

	// With IPv6 present (this machine), [::] stays one dual-stack AF_INET6 socket.
	_, family, bind, err = openSocket(netip.MustParseAddrPort("[::]:0"), func(f int) (int, error) { return 7, nil })
	if err != nil || family != unix.AF_INET6 || bind != netip.MustParseAddrPort("[::]:0") {
		t.Fatalf("[::] with IPv6: family %d bind %v err %v", family, bind, err)
	}
}
