package proxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"runtime"
	"slices"
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

// TestTrickledFramesAreBoundedAndTimedOut: thousands of consumers that each announce
// an 8 MiB frame and send only part of it hold no more than the process budget
// between them (a frame that would pass it is discarded as it arrives and refused),
// and each is closed once limits.frame_read_timeout passes, on the server's clock,
// long before the 180 s idle timeout (issue 10: they held their buffers until then).
func TestTrickledFramesAreBoundedAndTimedOut(t *testing.T) {
	const consumers = 4000
	const budgetBytes = 8 << 20
	clk := keepalive.NewManualClock(time.Unix(1_000_000, 0))
	f := newFixtureWith(t, peer.ProviderConfig{}, Options{Clock: clk}, func(c *Config) {
		c.MaxBufferedBytes = budgetBytes
		c.FrameReadTimeout = 30 * time.Second
		c.MaxFrameBytes = 16 << 20
	})
	var fdsMu sync.Mutex
	var served []int // Stormgate's side of every consumer connection
	hook := func(fd int) {
		fdsMu.Lock()
		served = append(served, fd)
		fdsMu.Unlock()
	}
	f.srv.hookServeFD.Store(&hook)
	hdr := dubbo.AppendHeader(nil, dubbo.Header{Flags: dubbo.FlagRequest | dubbo.FlagTwoWay | dubbo.SerialHessian2,
		ID: 1, BodyLen: 8 << 20})
	conns := make([]net.Conn, 0, consumers)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	chunk := bytes.Repeat([]byte{'x'}, 4<<10)
	for i := range consumers {
		c, err := net.Dial("tcp", f.ln.addr)
		if err != nil {
			t.Fatalf("consumer %d: %v", i, err)
		}
		conns = append(conns, c)
		// Header and 4 KiB now; the rest never comes.
		if _, err := c.Write(append(append([]byte(nil), hdr...), chunk...)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 60*time.Second, "every consumer admitted", func() bool { return f.srv.Stats().DownstreamConns == consumers })
	// A second burst: together they would hold 4,000 x 8 KiB = 32 MiB. The budget holds 8 MiB.
	var peak atomic.Int64
	sample := func() {
		if b := f.srv.Stats().Buffered; b > peak.Load() {
			peak.Store(b)
		}
	}
	for _, c := range conns {
		if _, err := c.Write(chunk); err != nil {
			t.Fatal(err)
		}
		sample()
	}
	// Until Stormgate has read every byte of the second burst: each consumer's kernel
	// has it acknowledged (SIOCOUTQ 0) and Stormgate's side holds none unread (FIONREAD 0).
	fdsMu.Lock()
	mine := slices.Clone(served)
	fdsMu.Unlock()
	waitFor(t, 30*time.Second, "the second burst read", func() bool {
		sample()
		for _, c := range conns {
			if sockQueue(t, c.(*net.TCPConn), unix.SIOCOUTQ) != 0 {
				return false
			}
		}
		for _, fd := range mine {
			if n, err := unix.IoctlGetInt(fd, unix.SIOCINQ); err != nil || n != 0 {
				return false
			}
		}
		return true
	})
	sample()
	if p := peak.Load(); p > budgetBytes {
		t.Errorf("buffered bytes peaked at %d; limits.max_buffered_bytes is %d", p, budgetBytes)
	}
	if n := f.srv.Stats().LocalReplies[ReplyOverloaded.String()]; n == 0 {
		t.Error("no frame was refused although together they exceed the budget")
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.Logf("peak buffered %d bytes; heap in use %d MiB; %d refused", peak.Load(), ms.HeapInuse>>20,
		f.srv.Stats().LocalReplies[ReplyOverloaded.String()])
	if open := f.srv.Stats().DownstreamConns; open != consumers {
		t.Fatalf("%d consumers open before frame_read_timeout; want %d", open, consumers)
	}

	clk.Add(31 * time.Second) // frame_read_timeout, not the 180 s idle timeout
	defer func() { t.Logf("closes %v downstream %d", f.srv.Stats().Closed, f.srv.Stats().DownstreamConns) }()
	waitFor(t, 60*time.Second, "frame_read_timeout closes", func() bool {
		return f.srv.Stats().Closed[CloseFrameTimeout.String()] == consumers
	})
	waitFor(t, 10*time.Second, "the budget returned", func() bool { return f.srv.Stats().Buffered == 0 })
}

// TestMaxAgeNeverAnswersQueuedBytes: a request whose bytes are still queued in
// Stormgate when max_request_age passes is never answered while its bytes may still
// be sent (issue 10: sweep answered SERVER_TIMEOUT and the provider could run it
// later). A provider reads nothing until every request is answered, then reads
// everything its kernel holds: each request it sees was answered as one that may
// have run (lost in flight, or no answer within max_request_age), never as one that
// was not sent.
func TestMaxAgeNeverAnswersQueuedBytes(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	release := make(chan struct{})
	var seenMu sync.Mutex
	seen := map[string]bool{}
	var readers sync.WaitGroup
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetReadBuffer(8 << 10)
			}
			readers.Add(1)
			go func() {
				defer readers.Done()
				defer c.Close()
				<-release
				// Everything the kernel holds for this connection arrives within this; a
				// connection Stormgate still has open just goes quiet.
				_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
				for {
					h := make([]byte, dubbo.HeaderLen)
					if _, err := io.ReadFull(c, h); err != nil {
						return
					}
					hd, err := dubbo.ParseHeader(h, 1<<30)
					if err != nil {
						t.Errorf("provider read a malformed frame: %v", err)
						return
					}
					body := make([]byte, hd.BodyLen)
					if _, err := io.ReadFull(c, body); err != nil {
						return
					}
					if hd.Kind() == dubbo.KindRequest {
						_, _, arg, err := dubbo.ParseRequest(body)
						if err != nil {
							t.Errorf("provider read a bad request body: %v", err)
							return
						}
						seenMu.Lock()
						seen[arg[:16]] = true
						seenMu.Unlock()
					}
				}
			}()
		}
	}()
	f := newFixture(t, peer.ProviderConfig{}, func(c *Config) {
		c.Upstream = ln.Addr().String()
		c.UpstreamConns = 1
		c.WriteTimeout = 0 // only max_request_age can end the wait
		c.MaxRequestAge = time.Second
		c.HoldTimeout = 500 * time.Millisecond
		c.UpstreamInterval = time.Hour
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const consumers, each = 8, 40
	pad := string(bytes.Repeat([]byte{'p'}, 64<<10))
	answers := map[string]peer.Response{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range consumers {
		c := f.dial(ctx)
		for j := range each {
			wg.Add(1)
			go func() {
				defer wg.Done()
				key := fmt.Sprintf("%08d%08d", i, j)
				resp, err := c.Call(ctx, int64(j+1), svc, "echo", key+pad)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					t.Errorf("request %s: no answer: %v", key, err)
					return
				}
				answers[key] = resp
			}()
		}
	}
	wg.Wait()
	close(release)
	ln.Close()
	readers.Wait() // each reads what its kernel buffers hold
	seenMu.Lock()
	defer seenMu.Unlock()
	byStatus := map[byte]int{}
	for key, r := range answers {
		byStatus[r.Status]++
		// What reached the provider may have run: only "lost in flight" or "no answer
		// within max_request_age" may answer it, never "no usable connection".
		mayHaveRun := strings.Contains(r.Value, "may or may not have run") || strings.Contains(r.Value, "max_request_age")
		if seen[key] && !mayHaveRun {
			t.Errorf("request %s reached the provider but was answered %d %q", key, r.Status, r.Value)
		}
	}
	t.Logf("answers by status %v; the provider saw %d requests", byStatus, len(seen))
	if byStatus[dubbo.StatusOK] != 0 {
		t.Errorf("%d OK answers from a provider that answered nothing", byStatus[dubbo.StatusOK])
	}
}

// sockQueue reads a socket's queue length with ioctl req (SIOCINQ: received, not read;
// SIOCOUTQ: sent, not acknowledged).
func sockQueue(t *testing.T, c *net.TCPConn, req uint) int {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := rc.Control(func(fd uintptr) { n, err = unix.IoctlGetInt(int(fd), req) }); err != nil {
		t.Fatal(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return n
}
