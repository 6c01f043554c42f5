package triple

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/sys/unix"

	"github.com/stormgate/stormgate/keepalive"
	"github.com/stormgate/stormgate/proxy"
)

// Helpers this package's tests share with proxy's own (harness_test.go, methods_test.go, rearm_test.go),
// over what a protocol sees of the core.

// svc is the Dubbo service of the test provider (peer.Provider).
const svc = "org.stormgate.Greeter"

// series reads every sample of the family name from reg, keyed by its labels as "k=v,k=v" in label
// order; histograms by their sample count.
func series(t testing.TB, reg prometheus.Gatherer, name string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var kv []string
			for _, l := range m.GetLabel() {
				kv = append(kv, l.GetName()+"="+l.GetValue())
			}
			out[strings.Join(kv, ",")] = metricNumber(m)
		}
	}
	return out
}

func metricNumber(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return 0
}

// holdOutcome is stormgate_hold_outcomes_total{outcome=o} of srv.
func holdOutcome(t testing.TB, srv *proxy.Server, o proxy.HoldOutcome) float64 {
	t.Helper()
	return metric(t, srv, "stormgate_hold_outcomes_total", "outcome="+o.String())
}

// stepClockUntil moves clk in steps of step, up to limit, until cond holds; each step waits a little for
// what runs on other goroutines to catch up with it.
func stepClockUntil(t testing.TB, clk *keepalive.ManualClock, srv *proxy.Server, limit, step time.Duration, what string, cond func() bool) {
	t.Helper()
	for moved := time.Duration(0); !cond(); moved += step {
		if moved >= limit {
			// Moved as far as the new value allows, and more: give the goroutines that
			// act on what fired a real-time grace before judging.
			waitFor(t, 10*time.Second, what+" within "+limit.String()+" on the clock", cond)
			return
		}
		clk.Add(step)
		envOf(srv).Wheel().Advance(clk.Now())
		time.Sleep(2 * time.Millisecond)
	}
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

// parseOwn parses the package's own sources, not its tests, for the tests that check its shape.
func parseOwn(t *testing.T, mode parser.Mode) (*token.FileSet, []*ast.File) {
	t.Helper()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, mode)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return fset, files
}
