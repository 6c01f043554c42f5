package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stormgate/stormgate/peer"
	"github.com/stormgate/stormgate/proxy/dubbo"
	"github.com/stormgate/stormgate/proxy/h2"
)

func newTestSuite(t *testing.T) *Suite {
	t.Helper()
	s := &Suite{out: t.TempDir(), log: io.Discard}
	t.Cleanup(s.cleanup)
	return s
}

func TestProcReadyLinesAndKill(t *testing.T) {
	s := newTestSuite(t)
	var mu sync.Mutex
	var lines []string
	p, err := s.start(context.Background(), procSpec{
		name:    "sh",
		argv:    []string{"sh", "-c", "echo starting >&2; echo 'READY 4242'; sleep 30 & wait"},
		readyRe: regexp.MustCompile(`^READY (\d+)`),
		onLine:  func(l string) { mu.Lock(); lines = append(lines, l); mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	m, err := p.Ready(context.Background(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if m[1] != "4242" {
		t.Fatalf("submatch %q", m)
	}
	if p.Exited() {
		t.Fatal("exited early")
	}
	start := time.Now()
	p.Kill() // the whole group, the backgrounded sleep included: otherwise the pipes stay open for 30 s
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Kill took %v: the child's children kept the pipes open", d)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(lines, "|") != "starting|READY 4242" && strings.Join(lines, "|") != "READY 4242|starting" {
		t.Fatalf("lines %q", lines)
	}
}

func TestProcReadyFailsWhenProcessExits(t *testing.T) {
	s := newTestSuite(t)
	p, err := s.start(context.Background(), procSpec{name: "false", argv: []string{"sh", "-c", "echo nope; exit 3"},
		readyRe: regexp.MustCompile(`^READY`)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Ready(context.Background(), 10*time.Second); err == nil || !strings.Contains(err.Error(), "exited before it was ready") {
		t.Fatalf("err = %v", err)
	}
	var ee *exec.ExitError
	if err := p.Wait(); err == nil || !asExit(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("wait = %v", err)
	}
}

func asExit(err error, ee **exec.ExitError) bool {
	e, ok := err.(*exec.ExitError)
	*ee = e
	return ok
}

func TestProcBound(t *testing.T) {
	s := newTestSuite(t)
	p, err := s.start(context.Background(), procSpec{name: "sleep", argv: []string{"sleep", "30"}, bound: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { p.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a process past its bound was not killed")
	}
}

func TestWaitListening(t *testing.T) {
	s := newTestSuite(t)
	p, err := s.start(context.Background(), procSpec{name: "sleep", argv: []string{"sleep", "30"}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := listenBacklog("127.0.0.1:0", 7)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	// /proc/PID/net/tcp lists every socket of the process's namespace: the child sees our listener.
	if err := waitListening(context.Background(), p, port, 1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := waitListening(ctx, p, port, 2); err == nil {
		t.Fatal("two listeners reported where there is one")
	}
}

func TestBaselineListener(t *testing.T) {
	ln, err := listenBacklog("127.0.0.1:0", 50)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- serveBaseline(ctx, ln, 20*time.Millisecond) }()

	// The backlog is the one asked for: for a listening socket, TCP_INFO's sacked field is the
	// accept queue's limit.
	raw, err := ln.(*net.TCPListener).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var info *unix.TCPInfo
	var ierr error
	_ = raw.Control(func(fd uintptr) { info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) })
	if ierr != nil {
		t.Fatal(ierr)
	}
	if info.Sacked != 50 {
		t.Fatalf("accept queue limit %d, want the backlog 50", info.Sacked)
	}
	c, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A heartbeat and a request in one write: both answered, in order.
	var req []byte
	req = dubbo.AppendHeartbeatRequest(req, 7)
	req = dubbo.AppendRequest(req, 8, true, "svc", "echo", "hello")
	if _, err := c.Write(req); err != nil {
		t.Fatal(err)
	}
	want := dubbo.AppendHeartbeatReply(nil, 7, dubbo.SerialHessian2)
	want = dubbo.AppendValueResponse(want, 8, dubbo.SerialHessian2, "hello")
	got := make([]byte, len(want))
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("replies\n got %x\nwant %x", got, want)
	}
	// Bad magic closes that connection.
	if _, err := c.Write([]byte("GET / HTTP/1.1\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Read(got); err == nil {
		t.Fatalf("read %d bytes after garbage, want the connection closed", n)
	}
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not return after cancel")
	}
}

func TestListenBacklogRejectsBadAddress(t *testing.T) {
	for _, a := range []string{"localhost:1", "[::1]:0", "127.0.0.1"} {
		if _, err := listenBacklog(a, 50); err == nil {
			t.Errorf("%q accepted", a)
		}
	}
}

func TestHAProxyConfig(t *testing.T) {
	cfg := haproxyConfig(20881, &provider{proto: protoDubbo, addr: "127.0.0.1:20880"}, proxyOpts{backlog: 2048, rateLimit: 1000})
	for _, want := range []string{"mode tcp", "bind 127.0.0.1:20881", "backlog 2048", "rate-limit sessions 1000",
		"server provider 127.0.0.1:20880", "nbthread 1", "maxconn " + strconv.Itoa(haproxyMaxconn)} {
		if !strings.Contains(cfg, want) {
			t.Errorf("config lacks %q:\n%s", want, cfg)
		}
	}
	if strings.Contains(haproxyConfig(1, &provider{addr: "x:2"}, proxyOpts{}), "rate-limit") {
		t.Error("rate limit written when not asked for")
	}
	// In front of a Triple provider: HTTP mode, h2 without TLS on both sides, connections reused.
	h2 := haproxyConfig(20881, &provider{proto: protoTriple, addr: "127.0.0.1:20880"}, proxyOpts{})
	for _, want := range []string{"mode http", "bind 127.0.0.1:20881 proto h2", "server provider 127.0.0.1:20880 proto h2",
		"http-reuse always"} {
		if !strings.Contains(h2, want) {
			t.Errorf("Triple config lacks %q:\n%s", want, h2)
		}
	}
	// HAProxy itself accepts the files, when it is installed.
	if hp, err := exec.LookPath("haproxy"); err == nil {
		for i, c := range []string{cfg, h2} {
			path := fmt.Sprintf("%s/h%d.cfg", t.TempDir(), i)
			if err := os.WriteFile(path, []byte(c), 0o644); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command(hp, "-c", "-f", path).CombinedOutput(); err != nil {
				t.Fatalf("haproxy -c: %v\n%s\n%s", err, out, c)
			}
		}
	}
}

func TestStormClientAgainstBaseline(t *testing.T) {
	ln, err := listenBacklog("127.0.0.1:0", 512)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- serveBaseline(ctx, ln, 0) }()
	defer func() { cancel(); <-served }()

	ap := netip.MustParseAddrPort(ln.Addr().String())
	rep, err := stormClient(ap, 300, 10*time.Second, protoDubbo)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Conns != 300 || rep.Connected != 300 || rep.Answered != 300 || len(rep.Failures) != 0 {
		t.Fatalf("report %+v", rep)
	}
	if rep.First.Count() != 300 || rep.First.Max() < rep.Answer.Max() || rep.Connect.Count() != 300 {
		t.Fatalf("histograms: first %d (max %v), answer max %v, connect %d", rep.First.Count(), rep.First.Max(), rep.Answer.Max(), rep.Connect.Count())
	}
	// Two reports merge exactly.
	sum := newStormReport()
	sum.merge(rep)
	sum.merge(rep)
	if sum.Conns != 600 || sum.Answered != 600 || sum.First.Count() != 600 {
		t.Fatalf("merged %+v", sum)
	}
}

func TestStormClientCountsFailures(t *testing.T) {
	port, err := freePort() // nothing listens there now
	if err != nil {
		t.Fatal(err)
	}
	rep, err := stormClient(netip.MustParseAddrPort("127.0.0.1:"+strconv.Itoa(port)), 20, 5*time.Second, protoDubbo)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Connected != 0 || rep.Failures["connect: ECONNREFUSED"] != 20 {
		t.Fatalf("report %+v", rep)
	}
}

func TestCreateNetnsSetsSomaxconn(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (ip netns add)")
	}
	ns, err := createNetns(context.Background(), fmt.Sprintf("sgbench-test-%d", os.Getpid()), 1234)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Remove()
	if got := ns.sysctl(context.Background(), "net.core.somaxconn"); got != "1234" {
		t.Errorf("somaxconn in the namespace = %q, want 1234", got)
	}
}

// TestStormClientTriple: the storm client's h2c mode against the Triple echo provider (the HTTP/2
// codec Stormgate runs): every connection's PING is acked; and its reading of a server's frames.
func TestStormClientTriple(t *testing.T) {
	prov, err := peer.StartTripleEcho(peer.TripleConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer prov.Close()
	rep, err := stormClient(netip.MustParseAddrPort(prov.Addr()), 300, 10*time.Second, protoTriple)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Connected != 300 || rep.Answered != 300 || len(rep.Failures) != 0 {
		t.Fatalf("report %+v", rep)
	}

	settings := h2.AppendSettings(nil, h2.Setting{ID: h2.SettingMaxConcurrentStreams, Val: 100})
	ack := h2.AppendPing(nil, true, stormPing)
	for _, tc := range []struct {
		name   string
		answer []byte
		done   bool
		why    string
	}{
		{"settings then the ack", append(append([]byte(nil), settings...), ack...), true, ""},
		{"the ack cut short", append(append([]byte(nil), settings...), ack[:12]...), false, ""},
		{"another PING's ack", h2.AppendPing(nil, true, [8]byte{1}), false, ""},
		{"the PING itself, not acked", h2.AppendPing(nil, false, stormPing), false, ""},
		{"GOAWAY", h2.AppendGoAway(nil, 0, h2.ErrCodeRefusedStream, ""), false, "GOAWAY"},
		{"not HTTP/2", []byte("HTTP/1.1 400 Bad Request\r\n\r\n"), false, "not HTTP/2"},
	} {
		if done, why := stormH2Settled(tc.answer); done != tc.done || why != tc.why {
			t.Errorf("%s: done %v why %q, want %v %q", tc.name, done, why, tc.done, tc.why)
		}
	}
}
