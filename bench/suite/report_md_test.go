package main

import "testing"

// Only the per-request paths are held to 0 allocs/op: make bench of 2026-12-03 reported the hot paths'
// worst as 120,024 allocs/op because the handover's snapshot benchmark, in the same package, was counted.
func TestIsHotPath(t *testing.T) {
	for _, c := range []struct {
		r   MicroRow
		hot bool
	}{
		{MicroRow{Package: "proxy", Name: "HeartbeatReply"}, true},
		{MicroRow{Package: "proxy", Name: "ForwardAndRoute/dubbogo_echo/labels"}, true},
		{MicroRow{Package: "proxy", Name: "SnapshotSessions/compact=true/decode"}, false},
		{MicroRow{Package: "proxy/dubbo", Name: "Split"}, false},
	} {
		if got := isHotPath(c.r); got != c.hot {
			t.Errorf("%s %s: hot %v, want %v", c.r.Package, c.r.Name, got, c.hot)
		}
	}
}
