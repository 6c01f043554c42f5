package admission

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"golang.org/x/sys/unix"
)

// TestTransparentRedirect checks SO_ORIGINAL_DST and the inbound-port allow-list against real
// iptables REDIRECT rules, in a network namespace the test creates (root only).
func TestTransparentRedirect(t *testing.T) {
	ns := newTestNetns(t)
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
		run(t, "ip", "netns", "exec", ns, "iptables", "-t", "nat", "-A", "OUTPUT", "-p", "tcp", "-d", "127.0.0.1",
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

// newTestNetns creates a network namespace with loopback up and removes it when the test ends.
// It skips the test unless it runs as root with iproute2.
func newTestNetns(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: needs root to create a network namespace")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("skipping: needs iproute2")
	}
	var b [4]byte
	rand.Read(b[:])
	ns := "sg-adm-" + hex.EncodeToString(b[:])
	run(t, "ip", "netns", "add", ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	run(t, "ip", "-n", ns, "link", "set", "lo", "up")
	return ns
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

// inNetns runs f on an OS thread that has entered the namespace: sockets f creates belong to
// it. The thread is never unlocked, so it exits with the goroutine and its namespace never
// leaks into the rest of the process.
func inNetns(t *testing.T, ns string, f func()) {
	t.Helper()
	nsf, err := os.Open("/var/run/netns/" + ns)
	if err != nil {
		t.Fatal(err)
	}
	defer nsf.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		if err := unix.Setns(int(nsf.Fd()), unix.CLONE_NEWNET); err != nil {
			t.Errorf("setns: %v", err)
			return
		}
		f()
	}()
	<-done
}
