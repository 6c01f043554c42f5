package xds

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	sg "github.com/stormgate/stormgate/settings/stormgatev1"
)

// Two replicas serving the same file. The one the client is connected to
// dies; the client is on the other within a bounded time, applies nothing
// (same content-hash version, last-good settings kept), says so in its
// status and metrics, and takes the next change from the survivor.
func TestClientFailsOverBetweenReplicas(t *testing.T) {
	cps := map[string]*rawServer{}
	for range 2 {
		cp := startReplica(t, "v1", interval(10*time.Second))
		cps[cp.addr] = cp
	}
	var addrs []string
	for a := range cps {
		addrs = append(addrs, a)
	}
	var mu sync.Mutex
	var statuses []Status
	c := startClient(t, addrs[0], "pod-a.shop", func(cfg *ClientConfig) {
		cfg.Addresses = addrs
		cfg.OnStatus = func(s Status) { mu.Lock(); statuses = append(statuses, s); mu.Unlock() }
	})
	waitFor(t, 5*time.Second, "applied", func() bool { return c.version() != "" && c.connected() == 1 })
	first := c.c.Status().Server
	v1 := c.version()
	if got := testutil.ToFloat64(c.c.server.WithLabelValues(first)); got != 1 {
		t.Fatalf("stormgate_xds_control_plane{address=%s} = %v, want 1", first, got)
	}
	var other string
	for _, a := range addrs {
		if a != first {
			other = a
		}
	}

	killed := time.Now()
	cps[first].stop()
	waitFor(t, 5*time.Second, "connected to the other replica", func() bool {
		s := c.c.Status()
		return s.Connected && s.Server == other
	})
	took := time.Since(killed)
	t.Logf("failover: on %s %v after %s stopped", other, took.Round(time.Millisecond), first)
	if took > 2*time.Second {
		t.Errorf("failover took %v; the bound is one backoff_base (20ms here) plus a connect", took)
	}
	if _, v, calls := c.app.get(); v != v1 || calls != 1 {
		t.Errorf("settings changed across the failover: version %s after %d applies, want %s after 1", v, calls, v1)
	}
	st := c.c.Status()
	if st.Failovers != 1 || testutil.ToFloat64(c.c.failovers) != 1 ||
		testutil.ToFloat64(c.c.server.WithLabelValues(first)) != 0 || testutil.ToFloat64(c.c.server.WithLabelValues(other)) != 1 {
		t.Errorf("failover not counted: status %+v", st)
	}
	if !strings.HasPrefix(st.String(), "xds: connected to "+other) || !strings.Contains(st.String(), "running settings version "+v1) {
		t.Errorf("status line %q", st.String())
	}
	mu.Lock()
	sawDown := false
	for _, s := range statuses {
		if !s.Connected && s.Version == v1 && s.LastError != "" {
			sawDown = true
			if line := s.String(); !strings.Contains(line, "disconnected since") || !strings.Contains(line, "last good, unchanged") {
				t.Errorf("status line while disconnected: %q", line)
			}
		}
	}
	mu.Unlock()
	if !sawDown {
		t.Errorf("no status reported the disconnection")
	}

	cps[other].set(t, "", "v2", interval(12*time.Second))
	waitFor(t, 5*time.Second, "the next change from the survivor", func() bool { return c.interval() == 12*time.Second })
}

// An address that accepts TCP but never answers (a hung control plane, or a
// black hole) costs one ConnectTimeout, then the next address is used; an
// address that refuses costs nothing.
func TestClientSkipsDeadAndHungAddresses(t *testing.T) {
	cp := startReplica(t, "v1", interval(10*time.Second))

	hung, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	var hmu sync.Mutex
	go func() {
		for {
			c, err := hung.Accept()
			if err != nil {
				return
			}
			hmu.Lock()
			held = append(held, c)
			hmu.Unlock()
		}
	}()
	t.Cleanup(func() {
		hung.Close()
		hmu.Lock()
		for _, c := range held {
			c.Close()
		}
		hmu.Unlock()
	})
	refused, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := refused.Addr().String()
	refused.Close()

	start := time.Now()
	c := startClient(t, cp.addr, "n", func(cfg *ClientConfig) {
		cfg.Addresses = []string{dead, hung.Addr().String(), cp.addr}
		cfg.ConnectTimeout = 300 * time.Millisecond
		// Start at the dead address whatever the node id hashes to.
		cfg.Node.ID = nodeIDStartingAt(t, 0, 3)
	})
	waitFor(t, 10*time.Second, "applied from the third address", func() bool { return c.version() != "" })
	took := time.Since(start)
	t.Logf("dead + hung addresses skipped in %v", took.Round(time.Millisecond))
	if took > 3*time.Second {
		t.Errorf("took %v; want about one ConnectTimeout (300ms) plus two backoffs", took)
	}
}

// nodeIDStartingAt returns a node id whose hash makes a client with n
// addresses start at index i.
func nodeIDStartingAt(t *testing.T, i, n int) string {
	t.Helper()
	for k := range 1000 {
		id := "node-" + strings.Repeat("x", k%7) + string(rune('a'+k%26)) + string(rune('a'+k/26%26))
		c, err := NewClient(ClientConfig{Addresses: make4(n), Node: NodeInfo{ID: id}}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if c.first == i {
			return id
		}
	}
	t.Fatal("no node id found")
	return ""
}

func make4(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "127.0.0.1:1"
	}
	return out
}

// A control plane that takes the stream but never answers (wedged, or with
// no settings for this node: a bare snapshot cache without a snapshot) is
// left for the next address after FirstResponseTimeout.
func TestClientLeavesSilentControlPlane(t *testing.T) {
	silent := startRawServer(t) // no snapshot for any node: it never answers
	cp := startReplica(t, "v1", interval(10*time.Second))
	start := time.Now()
	c := startClient(t, cp.addr, "n", func(cfg *ClientConfig) {
		cfg.Addresses = []string{silent.addr, cp.addr}
		cfg.FirstResponseTimeout = 300 * time.Millisecond
		cfg.Node.ID = nodeIDStartingAt(t, 0, 2)
	})
	waitFor(t, 10*time.Second, "applied from the second address", func() bool { return c.version() != "" })
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("took %v; want about FirstResponseTimeout (300ms)", took)
	}
	if reqs := silent.requests(); len(reqs) == 0 {
		t.Fatalf("the client never asked the silent control plane: the test proves nothing")
	}
}

// A control plane that stays unreachable is logged at once, then not again within
// clientLogEvery however often the client retries (issue 16: one line per attempt
// flooded the log, 4 in 2 s at the default backoff).
func TestClientUnreachableLoggedOnce(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := lis.Addr().String()
	lis.Close()
	core, logs := observer.New(zap.WarnLevel)
	c, err := NewClient(ClientConfig{Addresses: []string{dead}, Node: NodeInfo{ID: "n"},
		BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond}, zap.New(core), nil)
	if err != nil {
		t.Fatal(err)
	}
	attempts := 0
	c.cfg.OnStatus = func(Status) { attempts++ }
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_ = c.Run(ctx, func(*sg.Settings, string) error { return nil })
	if attempts < 10 {
		t.Fatalf("only %d status changes in 500 ms", attempts)
	}
	lines := logs.All()
	if len(lines) != 1 || lines[0].Message != "xds control plane unreachable; keeping the last settings and retrying" ||
		!strings.Contains(lines[0].ContextMap()["error"].(string), "connection refused") {
		t.Fatalf("%d lines for %d status changes: %v", len(lines), attempts, lines)
	}
}
