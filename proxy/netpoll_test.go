package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudwego/netpoll"
)

func TestResolvePollers(t *testing.T) {
	for _, c := range []struct{ flag, procs, want int }{
		{0, 2, 2}, // default: one per P
		{0, 16, 16},
		{0, 0, 1}, // never none
		{1, 2, 1}, // the flag wins
		{4, 2, 4},
	} {
		if got := ResolvePollers(c.flag, c.procs); got != c.want {
			t.Errorf("ResolvePollers(%d, %d) = %d, want %d", c.flag, c.procs, got, c.want)
		}
	}
}

// TestReadPauseInline checks third_party/netpoll's ReadPauser (patch 0001) as the sidecar
// configures netpoll (TestMain: handlers inline on the pollers, 256-byte buffers): a handler that
// pauses on its poller and returns with unread input is not called again and does not hold the
// poller (another connection's echo comes back); the paused consumer's writes block once the
// socket buffers fill; ResumeRead, with no new socket data, runs the handler before it returns, on
// the caller's goroutine; and the rest of the stream arrives in order.
func TestReadPauseInline(t *testing.T) {
	var calls, resumed atomic.Int32
	var mu sync.Mutex
	var got bytes.Buffer // under mu
	consumed := func() []byte { mu.Lock(); defer mu.Unlock(); return bytes.Clone(got.Bytes()) }
	var echo sync.Map
	ln, err := netpoll.CreateListener("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conns := make(chan netpoll.Connection, 16)
	loop, err := netpoll.NewEventLoop(func(_ context.Context, c netpoll.Connection) error {
		r := c.Reader()
		if _, ok := echo.Load(c); ok {
			b, _ := r.Next(r.Len())
			_, _ = c.Writer().WriteBinary(bytes.Clone(b))
			_ = r.Release()
			return c.Writer().Flush()
		}
		switch calls.Add(1) {
		case 1:
			if err := c.(netpoll.ReadPauser).PauseRead(); err != nil {
				panic(err)
			}
			b, _ := r.Next(1) // and leave the rest
			mu.Lock()
			got.Write(b)
			mu.Unlock()
		default:
			if resumed.Load() == 0 {
				return nil // a call before ResumeRead: consume nothing (a spin would never end)
			}
			b, _ := r.Next(r.Len())
			mu.Lock()
			got.Write(b)
			mu.Unlock()
		}
		return r.Release()
	}, netpoll.WithOnPrepare(func(c netpoll.Connection) context.Context { conns <- c; return context.Background() }))
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = loop.Serve(ln) }()
	t.Cleanup(func() { _ = loop.Shutdown(context.Background()) })
	dial := func() (net.Conn, netpoll.Connection) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c, <-conns
	}
	// roundTrip proves that every poller went through a loop since: an echo comes back on as many
	// fresh connections as there are pollers (netpoll assigns them round robin).
	roundTrip := func() {
		for range Pollers() {
			c, sc := dial()
			echo.Store(sc, true)
			if _, err := c.Write([]byte{7}); err != nil {
				t.Fatal(err)
			}
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
				t.Fatalf("a poller is stuck: %v", err)
			}
		}
	}

	client, conn := dial()
	rp := conn.(netpoll.ReadPauser)
	stream := make([]byte, 16<<20)
	for i := range stream {
		stream[i] = byte(i*131 + i>>11)
	}
	// 200 bytes: one read takes them all (the buffer is 256 bytes), so nothing is left in the kernel.
	if _, err := client.Write(stream[:200]); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for conn.Reader().Len() != 199 || len(consumed()) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the first handler call: %d consumed, %d buffered", len(consumed()), conn.Reader().Len())
		}
		time.Sleep(time.Millisecond)
	}
	roundTrip()
	if n := calls.Load(); n != 1 {
		t.Fatalf("paused handler called %d times, want 1", n)
	}
	resumed.Store(1)
	if err := rp.ResumeRead(); err != nil {
		t.Fatal(err)
	}
	if n := len(consumed()); calls.Load() != 2 || n != 200 {
		t.Fatalf("after ResumeRead returned: %d calls, %d bytes consumed; want the handler run inline on the 199 buffered bytes",
			calls.Load(), n)
	}

	// Paused from outside the handler: the consumer's writes block once the socket buffers fill
	// (the bounded deadline only ends a blocked write), and netpoll reads nothing more.
	if err := rp.PauseRead(); err != nil {
		t.Fatal(err)
	}
	sent := 200
	for sent < len(stream) {
		_ = client.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
		n, err := client.Write(stream[sent:min(sent+64<<10, len(stream))])
		sent += n
		if errors.Is(err, os.ErrDeadlineExceeded) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if sent == len(stream) {
		t.Fatalf("%d bytes written to a paused connection without blocking", sent)
	}
	before := len(consumed()) + conn.Reader().Len()
	roundTrip()
	if after := len(consumed()) + conn.Reader().Len(); after != before {
		t.Fatalf("netpoll read %d bytes of a paused connection", after-before)
	}
	t.Logf("paused: %d sent, %d read by netpoll", sent, before)
	if err := rp.ResumeRead(); err != nil {
		t.Fatal(err)
	}
	_ = client.SetWriteDeadline(time.Time{})
	if _, err := client.Write(stream[sent:]); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(20 * time.Second)
	for len(consumed()) < len(stream) {
		if time.Now().After(deadline) {
			t.Fatalf("after resume: %d of %d bytes arrived", len(consumed()), len(stream))
		}
		time.Sleep(time.Millisecond)
	}
	if !bytes.Equal(consumed(), stream) {
		t.Fatal("the stream arrived changed or out of order")
	}
}
