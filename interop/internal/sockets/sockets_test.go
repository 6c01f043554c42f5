package sockets

import (
	"net"
	"net/netip"
	"testing"
)

func TestParseAddr(t *testing.T) {
	cases := []struct {
		in   string
		want string
	}{
		{"0100007F:1F90", "127.0.0.1:8080"},
		{"00000000:0050", "0.0.0.0:80"},
		{"0000000000000000FFFF00000100007F:5BA0", "127.0.0.1:23456"}, // IPv4-mapped, unmapped
		{"00000000000000000000000001000000:0016", "[::1]:22"},
	}
	for _, c := range cases {
		got, err := parseAddr(c.in)
		if err != nil {
			t.Fatalf("parseAddr(%q): %v", c.in, err)
		}
		if got.String() != c.want {
			t.Errorf("parseAddr(%q) = %s, want %s", c.in, got, c.want)
		}
	}
	for _, bad := range []string{"", "0100007F", "0100007F:", "01007F:0050", "zz00007F:0050", "0100007F:123456"} {
		if _, err := parseAddr(bad); err == nil {
			t.Errorf("parseAddr(%q) succeeded, want error", bad)
		}
	}
}

// TestCountsRealSockets opens real loopback connections and checks both counters see exactly them.
func TestCountsRealSockets(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	lnAddr := netip.MustParseAddrPort(ln.Addr().String())
	const n = 3
	for range n {
		c, err := net.Dial("tcp4", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
	}
	if got, err := CountLocalPort(lnAddr.Port()); err != nil || got != n {
		t.Errorf("CountLocalPort = %d, %v; want %d", got, err, n)
	}
	if got, err := CountOwnTo(lnAddr); err != nil || got != n {
		t.Errorf("CountOwnTo = %d, %v; want %d", got, err, n)
	}
	if ok, err := OwnListening(lnAddr.Port()); err != nil || !ok {
		t.Errorf("OwnListening(%d) = %v, %v; want true", lnAddr.Port(), ok, err)
	}
	ln.Close()
	if ok, err := OwnListening(lnAddr.Port()); err != nil || ok {
		t.Errorf("OwnListening(%d) after Close = %v, %v; want false", lnAddr.Port(), ok, err)
	}
}
