package testkit

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
)

// childRole makes this test binary TestStartChild's child.
const childRole = "STORMGATE_TESTKIT_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childRole) != "" {
		fmt.Println("noise")
		fmt.Println("ready " + os.Getenv(childRole))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestStartChild: the child is this binary in the role env names; Next passes over the lines before
// the one asked for.
func TestStartChild(t *testing.T) {
	c := StartChild(t, childRole+"=42")
	if got := c.Next("ready "); got != "42" {
		t.Errorf("Next(%q) = %q, want 42", "ready ", got)
	}
}

// TestSeries: each series by its labels in label order; counters and gauges by value, histograms by
// their count; other families left out.
func TestSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "calls_total"}, []string{"method", "code"})
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "duration_seconds"})
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "open"})
	reg.MustRegister(c, h, g)
	c.WithLabelValues("echo", "OK").Add(3)
	c.WithLabelValues("fail", "OK").Inc()
	h.Observe(0.1)
	h.Observe(2)
	g.Set(7)
	if got := Series(t, reg, "calls_total"); len(got) != 2 || got["code=OK,method=echo"] != 3 || got["code=OK,method=fail"] != 1 {
		t.Errorf("calls_total: %v", got)
	}
	if got := Series(t, reg, "duration_seconds"); len(got) != 1 || got[""] != 2 {
		t.Errorf("duration_seconds: %v", got)
	}
	if got := Series(t, reg, "open"); len(got) != 1 || got[""] != 7 {
		t.Errorf("open: %v", got)
	}
	if got := Series(t, reg, "absent"); len(got) != 0 {
		t.Errorf("absent: %v", got)
	}
}

// TestServeLoopback: each connection reaches serve as a non-blocking fd, with the client's address.
func TestServeLoopback(t *testing.T) {
	type served struct {
		fd     int
		remote netip.AddrPort
	}
	got := make(chan served, 1)
	addr := ServeLoopback(t, func(fd int, remote, _ netip.AddrPort) { got <- served{fd, remote} })
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	select {
	case s := <-got:
		defer unix.Close(s.fd)
		if want := nc.LocalAddr().(*net.TCPAddr).AddrPort(); s.remote != want {
			t.Errorf("remote %v, want the client's %v", s.remote, want)
		}
		fl, err := unix.FcntlInt(uintptr(s.fd), unix.F_GETFL, 0)
		if err != nil || fl&unix.O_NONBLOCK == 0 {
			t.Errorf("the fd's flags %#x (%v), want O_NONBLOCK", fl, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no connection served")
	}
}
