package main

import (
	"fmt"
	"net/netip"
	"strings"
)

// parseAddrList parses "127.0.0.2-127.0.0.20,127.0.1.1": addresses and inclusive ranges.
func parseAddrList(s string) ([]netip.Addr, error) {
	var out []netip.Addr
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := netip.ParseAddr(strings.TrimSpace(lo))
		if err != nil {
			return nil, fmt.Errorf("source address %q: %w", part, err)
		}
		b := a
		if isRange {
			if b, err = netip.ParseAddr(strings.TrimSpace(hi)); err != nil {
				return nil, fmt.Errorf("source address %q: %w", part, err)
			}
			if b.Less(a) || a.BitLen() != b.BitLen() {
				return nil, fmt.Errorf("source range %q is empty or mixes families", part)
			}
		}
		for x := a; ; x = x.Next() {
			out = append(out, x)
			if len(out) > 65536 {
				return nil, fmt.Errorf("source addresses: more than 65,536")
			}
			if x == b {
				break
			}
		}
	}
	return out, nil
}

// loopbackSources returns n addresses 127.0.0.2, 127.0.0.3, ... for spreading many connections.
func loopbackSources(n int) []netip.Addr {
	out := make([]netip.Addr, 0, n)
	a := netip.AddrFrom4([4]byte{127, 0, 0, 2})
	for range n {
		out = append(out, a)
		a = a.Next()
	}
	return out
}
