package triple

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/stormgate/stormgate/proxy"
)

// Helpers over what a protocol sees of the core. What this package's tests share with proxy's own is
// internal/testkit's (a poll, metric series, the clock's steps, the handover child's parent side) and
// proxy/proxytest's (the test settings, the handover child).

// svc is the Dubbo service of the test provider (peer.Provider).
const svc = "org.stormgate.Greeter"

// holdOutcome is stormgate_hold_outcomes_total{outcome=o} of srv.
func holdOutcome(t testing.TB, srv *proxy.Server, o proxy.HoldOutcome) float64 {
	t.Helper()
	return metric(t, srv, "stormgate_hold_outcomes_total", "outcome="+o.String())
}

// diagAvailable reports whether the kernel offers sock_diag destroy announcements (proxy's peerdiag.go,
// the proof behind proxy.ReadProof).
func diagAvailable() bool {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	const groups = 1<<(unix.SKNLGRP_INET_TCP_DESTROY-1) | 1<<(unix.SKNLGRP_INET6_TCP_DESTROY-1)
	return unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: groups}) == nil
}
