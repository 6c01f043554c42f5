package proxy

import (
	"bytes"
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stormgate/stormgate/keepalive"
	"github.com/stormgate/stormgate/peer"
	"github.com/stormgate/stormgate/proxy/dubbo"
)

// Provider faults stay with the request that caused them (issue 10, "Why" and item 4).

// TestOversizeResponseAnswersOnlyItsRequest: one response over limits.max_frame_bytes
// answers its own request with an error, its body is skipped, and the connection
// keeps serving the other requests in flight on it (no reconnect).
func TestOversizeResponseAnswersOnlyItsRequest(t *testing.T) {
	const maxFrame = 64 << 10
	var mu sync.Mutex
	var waiting []dubbo.Header // requests seen, answered once both are in
	prov := newScriptedProvider(t, func(c net.Conn, h dubbo.Header, frame []byte) {
		mu.Lock()
		defer mu.Unlock()
		if argOf(t, frame) == "big" {
			waiting = append([]dubbo.Header{h}, waiting...) // the big answer goes first
		} else {
			waiting = append(waiting, h)
		}
		if len(waiting) < 2 {
			return
		}
		big := dubbo.AppendValueResponse(nil, waiting[0].ID, dubbo.SerialHessian2, strings.Repeat("x", 2*maxFrame))
		small := dubbo.AppendValueResponse(nil, waiting[1].ID, dubbo.SerialHessian2, "small")
		_, _ = c.Write(append(big, small...))
	})
	f := newFixture(t, peer.ProviderConfig{}, func(c *Config) { c.Upstream = prov.addr(); c.UpstreamConns = 1; c.MaxFrameBytes = maxFrame })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := f.dial(ctx)
	var wg sync.WaitGroup
	var bigResp, smallResp peer.Response
	var bigErr, smallErr error
	wg.Add(2)
	go func() { defer wg.Done(); bigResp, bigErr = c.Call(ctx, 1, svc, "echo", "big") }()
	go func() { defer wg.Done(); smallResp, smallErr = c.Call(ctx, 2, svc, "echo", "small") }()
	wg.Wait()
	if bigErr != nil || smallErr != nil {
		t.Fatalf("calls: big %v, small %v", bigErr, smallErr)
	}
	if bigResp.Status != dubbo.StatusBadResponse {
		t.Errorf("oversize answer: status %d, want %d (BAD_RESPONSE)", bigResp.Status, dubbo.StatusBadResponse)
	}
	if smallResp.Status != dubbo.StatusOK || smallResp.Value != "small" {
		t.Errorf("the other request on that connection: %+v, want its own OK answer", smallResp)
	}
	if n := prov.accepted.Load(); n != 1 {
		t.Errorf("provider accepted %d connections; the oversize answer must not cost a reconnect", n)
	}
	waitSettled(t, f.srv, "both answers")
}

// TestEventResponseSettlesItsRequest: a provider that answers a request with an
// event-flagged response must not orphan the request: the consumer gets an error
// answer at once and its in-flight budget is returned.
func TestEventResponseSettlesItsRequest(t *testing.T) {
	prov := newScriptedProvider(t, func(c net.Conn, h dubbo.Header, _ []byte) {
		resp := dubbo.AppendHeader(nil, dubbo.Header{Flags: dubbo.FlagEvent | dubbo.SerialHessian2,
			Status: dubbo.StatusOK, ID: h.ID, BodyLen: 1})
		_, _ = c.Write(append(resp, 'N'))
	})
	f := newFixture(t, peer.ProviderConfig{}, func(c *Config) { c.Upstream = prov.addr(); c.UpstreamConns = 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := f.dial(ctx).Call(ctx, 1, svc, "echo", "x")
	if err != nil {
		t.Fatalf("no answer: %v (the request was orphaned)", err)
	}
	if resp.Status == dubbo.StatusOK {
		t.Errorf("status %d; an event frame is not an answer to a request", resp.Status)
	}
	waitSettled(t, f.srv, "the answer")
}

// TestProviderCallbackGetsError: a request from the provider to a consumer (a Dubbo
// callback) cannot be routed; the provider gets an immediate error response with its
// own id instead of waiting out its timeout.
func TestProviderCallbackGetsError(t *testing.T) {
	got := make(chan dubbo.Header, 1)
	var once sync.Once
	prov := newScriptedProvider(t, func(c net.Conn, h dubbo.Header, frame []byte) {
		if h.Kind() == dubbo.KindResponse {
			got <- h
			return
		}
		once.Do(func() {
			cb := dubbo.AppendRequest(nil, 777, true, "org.stormgate.Callback", "notify", "hi")
			_, _ = c.Write(cb)
		})
		_, _ = c.Write(dubbo.AppendValueResponse(nil, h.ID, dubbo.SerialHessian2, argOf(t, frame)))
	})
	f := newFixture(t, peer.ProviderConfig{}, func(c *Config) { c.Upstream = prov.addr(); c.UpstreamConns = 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := f.dial(ctx).Call(ctx, 1, svc, "echo", "x"); err != nil {
		t.Fatal(err)
	}
	select {
	case h := <-got:
		if h.ID != 777 || h.Status == dubbo.StatusOK {
			t.Fatalf("callback answer: id %d status %d; want id 777 with an error status", h.ID, h.Status)
		}
	case <-ctx.Done():
		t.Fatal("the provider's callback request was never answered")
	}
}

// TestStalledProviderAnswersEveryRequest: a provider that accepts and never reads
// must not make Stormgate queue without bound and leave consumers to time out:
// every request gets an error answer from Stormgate. Requests the kernel takes on
// the connection that replaces the stalled one are not a stall yet (its buffer has
// room); with heartbeats off, limits.max_request_age is what answers them.
func TestStalledProviderAnswersEveryRequest(t *testing.T) {
	upstream := neverReadingProvider(t)
	const budgetBytes = 1 << 20
	f := newFixture(t, peer.ProviderConfig{}, func(c *Config) {
		c.Upstream = upstream
		c.UpstreamConns = 1
		c.HoldTimeout = 200 * time.Millisecond
		c.UpstreamInterval = time.Hour
		c.WriteTimeout = 500 * time.Millisecond
		c.MaxRequestAge = 5 * time.Second
		c.MaxBufferedBytes = budgetBytes
	})
	var peak atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
				if b := f.srv.Stats().Buffered; b > peak.Load() {
					peak.Store(b)
				}
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const consumers, each = 10, 40
	body := strings.Repeat("s", 16<<10)
	var wg sync.WaitGroup
	var failed sync.Map
	for i := range consumers {
		c := f.dial(ctx)
		for j := range each {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := c.Call(ctx, int64(j+1), svc, "echo", body)
				if err != nil {
					failed.Store([2]int{i, j}, err)
				} else if resp.Status == dubbo.StatusOK {
					failed.Store([2]int{i, j}, "OK from a provider that never read")
				}
			}()
		}
	}
	wg.Wait()
	close(stop)
	<-sampled
	// One frame may be forced over the budget when a write comes up short.
	if p := peak.Load(); p > budgetBytes+17<<10 {
		t.Errorf("buffered bytes peaked at %d; limits.max_buffered_bytes is %d", p, budgetBytes)
	}
	t.Logf("buffered bytes peak %d, stats %+v", peak.Load(), f.srv.Stats())
	n := 0
	failed.Range(func(k, v any) bool {
		if n++; n <= 3 {
			t.Errorf("request %v: %v", k, v)
		}
		return true
	})
	if n > 0 {
		t.Fatalf("%d of %d requests got no error answer from Stormgate", n, consumers*each)
	}
}

// TestServeFDClosesConsumerGoneBeforeRegistration: a consumer that disconnects
// between netpoll.NewFDConnection and SetOnRequest must not leave its fd open
// (netpoll skips close callbacks for a connection without handlers).
func TestServeFDClosesConsumerGoneBeforeRegistration(t *testing.T) {
	f := newFixture(t, peer.ProviderConfig{})
	var served atomic.Int64
	hook := func(nfd int) {
		served.Store(int64(nfd))
		// The consumer has already closed (below, before ServeFD runs); wait until the
		// poller has seen the hangup, as it would in the race.
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			var buf [1]byte
			n, _, err := unix.Recvfrom(nfd, buf[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
			if n == 0 && err == nil {
				time.Sleep(20 * time.Millisecond) // netpoll's poller runs on its own
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	f.srv.hookServeFD.Store(&hook)
	before := f.srv.Stats().DownstreamConns
	nc, err := net.Dial("tcp", f.ln.addr)
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	waitFor(t, 5*time.Second, "ServeFD to run", func() bool { return served.Load() != 0 })
	fd := int(served.Load())
	waitFor(t, 5*time.Second, "the fd to be closed", func() bool {
		_, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		return err == unix.EBADF || !sameSocketAsClosedPeer(fd, nc)
	})
	waitFor(t, 5*time.Second, "session accounting", func() bool { return f.srv.Stats().DownstreamConns == before })
}

// sameSocketAsClosedPeer reports whether fd still is the server side of nc (fd
// numbers are reused once closed).
func sameSocketAsClosedPeer(fd int, nc net.Conn) bool {
	sa, err := unix.Getpeername(fd)
	if err != nil {
		return false
	}
	s4, ok := sa.(*unix.SockaddrInet4)
	la := nc.LocalAddr().(*net.TCPAddr)
	return ok && s4.Port == la.Port && bytes.Equal(s4.Addr[:], la.IP.To4())
}

// TestIdleProviderSurvivesMaxMissedOne: with keepalive.upstream_max_missed 1 (the
// smallest value validation allows) a provider that answers every heartbeat is
// never declared dead.
func TestIdleProviderSurvivesMaxMissedOne(t *testing.T) {
	clk := keepalive.NewManualClock(time.Unix(1_000_000, 0))
	f := newFixtureWith(t, peer.ProviderConfig{}, Options{Clock: clk}, func(c *Config) {
		c.UpstreamConns = 2
		c.UpstreamMaxMissed = 1
		c.UpstreamJitter = 0.5 // the widest jitter validation allows
	})
	f.advance(600*time.Second, 5*time.Second, true) // twenty intervals
	if n := value(f.srv.m.upReconnects[protoDubbo]); n != 0 {
		t.Fatalf("%v reconnects: healthy idle provider connections were declared dead", n)
	}
	if f.provider.Stats().HeartbeatsReceived == 0 {
		t.Fatal("no heartbeats were sent")
	}
}

// neverReadingProvider listens on loopback and accepts connections that it never
// reads, with 4 KiB receive buffers so that they stall soon: a provider that stopped
// reading without closing. Everything closes with the test.
func neverReadingProvider(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*net.TCPConn).SetReadBuffer(4096)
			mu.Lock()
			conns = append(conns, c) // never read
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return ln.Addr().String()
}
