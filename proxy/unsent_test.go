package proxy

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stormgate/stormgate/peer"
	"github.com/stormgate/stormgate/proxy/dubbo"
)

// Issue 10, "Why": "One-way requests are not bounded at all." A provider that accepts
// and never reads, consumers that flood it with one-way requests: the bytes Stormgate
// keeps stay within upstream.max_queued_bytes (per connection) and the process budget,
// and what does not fit is dropped and counted, never queued without bound.
func TestOneWayToStalledProviderIsBounded(t *testing.T) {
	upstream := neverReadingProvider(t)
	const queueBound, budgetBytes, body = 64 << 10, 1 << 20, 16 << 10
	f := newFixture(t, peer.ProviderConfig{}, func(c *Config) {
		c.Upstream = upstream
		c.UpstreamConns = 1
		c.WriteTimeout = 0 // the connection stays: only the bounds may stop the growth
		c.UpstreamInterval = time.Hour
		c.MaxQueuedBytesPerUpstream = queueBound
		c.MaxBufferedBytes = budgetBytes
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var peakQueued, peakBuffered atomic.Int64
	sample := func() {
		if q := int64(f.srv.upstreamQueued()); q > peakQueued.Load() {
			peakQueued.Store(q)
		}
		if b := f.srv.Stats().Buffered; b > peakBuffered.Load() {
			peakBuffered.Store(b)
		}
	}
	arg := strings.Repeat("o", body)
	const consumers, each = 8, 200 // 25 MiB offered
	var wg sync.WaitGroup
	for range consumers {
		c := f.dial(ctx)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range each {
				if err := c.CallOneWay(int64(j+1), svc, "echo", arg); err != nil {
					t.Errorf("one-way send: %v", err)
					return
				}
				sample()
			}
		}()
	}
	wg.Wait()
	// What the consumers' sockets still held: every request read and handled (queued,
	// written or dropped). Waiting a fixed time for it failed on a loaded machine (issue 23).
	waitFor(t, 20*time.Second, "every one-way request read", func() bool {
		sample()
		return f.srv.Stats().Requests == consumers*each
	})
	frame := int64(body + 256)
	if q := peakQueued.Load(); q > queueBound+frame {
		t.Errorf("bytes queued for the provider peaked at %d; upstream.max_queued_bytes is %d", q, queueBound)
	}
	if b := peakBuffered.Load(); b > budgetBytes+frame {
		t.Errorf("buffered bytes peaked at %d; limits.max_buffered_bytes is %d", b, budgetBytes)
	}
	if n := value(f.srv.m.dropped[dropOneWayOverloaded]); n == 0 {
		t.Error("no one-way request was dropped although the provider read nothing")
	}
	t.Logf("peak queued %d, peak buffered %d, dropped %v", peakQueued.Load(), peakBuffered.Load(),
		value(f.srv.m.dropped[dropOneWayOverloaded]))
}

// Issue 10, item 1: "a request still in Stormgate's own buffer when its upstream
// connection dies was never seen by the provider and goes back to the hold queue
// (retried on the next connection); only requests already handed to the kernel get
// CHANNEL_INACTIVE". The first provider connection never reads; upstream.write_timeout
// declares it dead; the requests its writer still held are answered by the next
// connection with their own bodies, the others 35, and nothing else.
func TestUnsentRequestsAreReheldOnTheNextConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var mu sync.Mutex
	var conns []net.Conn
	var accepted atomic.Int32
	var seen atomic.Int32
	echo := &scriptedProvider{onFrame: echoScript(t, &seen)} // its frame loop, on connections accepted here
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			if accepted.Add(1) == 1 {
				_ = c.(*net.TCPConn).SetReadBuffer(4096) // the first never reads
				continue
			}
			go echo.serve(c)
		}
	}()
	defer func() {
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	}()
	f := newFixture(t, peer.ProviderConfig{}, func(c *Config) {
		c.Upstream = ln.Addr().String()
		c.UpstreamConns = 1
		c.WriteTimeout = 300 * time.Millisecond
		c.HoldTimeout = 20 * time.Second
		c.MaxRequestAge = 30 * time.Second
		c.UpstreamInterval = time.Hour
		c.BackoffBase = time.Millisecond
		c.BackoffMax = 10 * time.Millisecond
	})
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	c := f.dial(ctx)
	const n = 200 // 12.5 MiB: more than the kernel buffers of a connection that is not read
	pad := strings.Repeat("p", 64<<10)
	resps := make([]peer.Response, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resps[i], errs[i] = c.Call(ctx, int64(i+1), svc, "echo", fmt.Sprintf("%08d", i)+pad)
		}()
	}
	wg.Wait()
	ok, lost := 0, 0
	for i := range n {
		switch {
		case errs[i] != nil:
			t.Errorf("request %d: no answer: %v", i, errs[i])
		case resps[i].Status == dubbo.StatusOK:
			if resps[i].Value != fmt.Sprintf("%08d", i)+pad {
				t.Errorf("request %d: OK with a body that is not its own", i)
			}
			ok++
		case resps[i].Status == dubbo.StatusChannelInactive:
			lost++
		default:
			t.Errorf("request %d: status %d %q", i, resps[i].Status, resps[i].Value)
		}
	}
	reheld := f.holdOutcome(HoldReheld)
	t.Logf("%d OK, %d lost (35); re-held unsent %v; provider connections %d", ok, lost, reheld, accepted.Load())
	if reheld == 0 || ok == 0 {
		t.Fatal("no request still queued in Stormgate was re-held and answered by the next connection")
	}
	if lost == n {
		t.Fatal("every request was answered 35: the unsent ones must be sent again")
	}
}
