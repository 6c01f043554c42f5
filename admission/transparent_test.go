package admission

import (
	"net"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/stormgate/stormgate/transparent/netnstest"
	"go.uber.org/zap/zaptest"
)

// TestTransparentRedirect checks SO_ORIGINAL_DST and the inbound-port allow-list against real
// iptables REDIRECT rules, in a network namespace the test creates (root only).
func TestTransparentRedirect(t *testing.T) {
	ns := netnstest.New(t, "sg-adm")
	cfg := testConfig()
	cfg.Transparent = true
	cfg.InboundPorts = []uint16{20880}
	var a *Admitter
	inNetns(t, ns, func() {
		var err error
		if a, err = Listen(cfg, zaptest.NewLogger(t), nil); err != nil {
			t.Error(err)
		}
	})
	if a == nil {
		t.FailNow()
	}
	proxyPort := strconv.Itoa(a.Addr().(*net.TCPAddr).Port)
	for _, port := range []string{"20880", "20999"} {
		ns.Run(t, "iptables", "-t", "nat", "-A", "OUTPUT", "-p", "tcp", "-d", "127.0.0.1",
			"--dport", port, "-j", "REDIRECT", "--to-ports", proxyPort)
	}
	rec := newRecorder(t)
	done := make(chan error, 1)
	go func() { done <- a.Serve(t.Context(), rec) }()
	t.Cleanup(func() { a.Close(); <-done })

	var allowed, refused net.Conn
	inNetns(t, ns, func() {
		var err error
		if allowed, err = net.DialTimeout("tcp", "127.0.0.1:20880", 2*time.Second); err != nil {
			t.Error(err)
			return
		}
		if refused, err = net.DialTimeout("tcp", "127.0.0.1:20999", 2*time.Second); err != nil {
			t.Error(err)
		}
	})
	if allowed == nil || refused == nil {
		t.FailNow()
	}
	defer allowed.Close()
	defer refused.Close()

	c := rec.next(2 * time.Second)
	if want := netip.MustParseAddrPort("127.0.0.1:20880"); c.OrigDst != want {
		t.Errorf("OrigDst = %v, want %v", c.OrigDst, want)
	}
	if c.Local.Port() != uint16(a.Addr().(*net.TCPAddr).Port) {
		t.Errorf("Local = %v, want the proxy port %s", c.Local, proxyPort)
	}
	echoOnce(t, allowed, fdConn(t, c.FD), "redirected")
	expectFIN(t, refused, 2*time.Second)
	waitFor(t, time.Second, "port_not_allowed counted", func() bool { return a.Stats().Rejected[ReasonPortNotAllowed] == 1 })
}

// inNetns runs f with its sockets in ns (netnstest.Namespace.Do).
func inNetns(t *testing.T, ns *netnstest.Namespace, f func()) {
	t.Helper()
	if err := ns.Do(func() error { f(); return nil }); err != nil {
		t.Fatal(err)
	}
}
