// Copyright 2026 CloudWeGo Authors
//
// Licensed under the Apache License, Version 2.0 (the "License");
// you may not use this file except in compliance with the License.
// You may obtain a copy of the License at
//
//    http://www.apache.org/licenses/LICENSE-2.0
//
// Unless required by applicable law or agreed to in writing, software
// distributed under the License is distributed on an "AS IS" BASIS,
// WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
// See the License for the specific language governing permissions and
// limitations under the License.

package netpoll

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// streamByte is byte i of the test stream: no short period, so a lost, repeated or reordered chunk
// shows as a mismatch at its offset.
func streamByte(i int64) byte {
	x := uint64(i/8) + 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	x ^= x >> 31
	return byte(x >> (8 * uint(i%8)))
}

func fillStream(p []byte, off int64) {
	for k := range p {
		p[k] = streamByte(off + int64(k))
	}
}

// streamSink is a connection's OnRequest state: it consumes what the handler is given, checking
// it against the stream.
type streamSink struct {
	mu       sync.Mutex
	got      int64
	mismatch int64 // offset of the first wrong byte, or -1
}

func newStreamSink() *streamSink { return &streamSink{mismatch: -1} }

func (s *streamSink) consume(r Reader, n int) {
	b, err := r.Next(n)
	if err != nil {
		panic(err)
	}
	s.mu.Lock()
	for k := range b {
		if s.mismatch < 0 && b[k] != streamByte(s.got+int64(k)) {
			s.mismatch = s.got + int64(k)
		}
	}
	s.got += int64(len(b))
	s.mu.Unlock()
	_ = r.Release()
}

func (s *streamSink) state() (got, mismatch int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.got, s.mismatch
}

// pauseServer is a loopback netpoll server handing each accepted connection to the test.
type pauseServer struct {
	addr  string
	conns chan Connection
	// closed maps each connection to a channel its close callback closes. The callback is added in
	// OnPrepare, on the poller's goroutine: AddCloseCallback is not safe concurrently with another
	// (the server adds its own right after OnPrepare), so a test adding one after dial could lose it.
	closed sync.Map
}

func newPauseServer(t *testing.T, onRequest OnRequest) *pauseServer {
	t.Helper()
	ln, err := CreateListener("tcp", "127.0.0.1:0")
	MustNil(t, err)
	s := &pauseServer{addr: ln.Addr().String(), conns: make(chan Connection, 1024)}
	loop, err := NewEventLoop(onRequest, WithOnPrepare(func(c Connection) context.Context {
		closed := make(chan struct{})
		s.closed.Store(c, closed)
		_ = c.AddCloseCallback(func(Connection) error { close(closed); return nil })
		s.conns <- c
		return context.Background()
	}))
	MustNil(t, err)
	go loop.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = loop.Shutdown(ctx)
	})
	return s
}

// dial connects a client and returns it with the server's end of the connection.
func (s *pauseServer) dial(t *testing.T) (*net.TCPConn, Connection) {
	t.Helper()
	c, err := net.Dial("tcp", s.addr)
	MustNil(t, err)
	t.Cleanup(func() { _ = c.Close() })
	select {
	case sc := <-s.conns:
		return c.(*net.TCPConn), sc
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not accept")
		return nil, nil
	}
}

// waitFor polls cond until it holds (a condition, not a time: the deadline only bounds a failure).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// kernelInq is the number of bytes in the socket's receive queue (SIOCINQ).
func kernelInq(t *testing.T, c Connection) int {
	t.Helper()
	var n int32
	_, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(c.(*connection).fd), syscall.TIOCINQ, uintptr(unsafe.Pointer(&n)))
	if e != 0 {
		t.Fatal(e)
	}
	return int(n)
}

// pollerRoundTrip echoes one byte over a fresh connection of s, so every poller has gone through
// epoll_wait since the call (with one poller, the default on fewer than 20 cores, certainly the one
// serving the connection under test).
func pollerRoundTrip(t *testing.T, s *pauseServer, echo *sync.Map) {
	t.Helper()
	c, sc := s.dial(t)
	echo.Store(sc, true)
	_, err := c.Write([]byte{1})
	MustNil(t, err)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = c.Read(make([]byte, 1))
	MustNil(t, err)
}

// TestReadPauseBackpressure: a paused connection's peer sees its writes block once the socket buffers
// fill (the kernel's receive queue grows, netpoll reads nothing more); resume delivers every byte in
// order.
func TestReadPauseBackpressure(t *testing.T) {
	sink := newStreamSink()
	var echo sync.Map
	s := newPauseServer(t, func(ctx context.Context, c Connection) error {
		if _, ok := echo.Load(c); ok {
			b, _ := c.Reader().Next(c.Reader().Len())
			_, _ = c.Writer().WriteBinary(append([]byte(nil), b...))
			_ = c.Reader().Release()
			return c.Writer().Flush()
		}
		sink.consume(c.Reader(), c.Reader().Len())
		return nil
	})
	client, conn := s.dial(t)
	buf := make([]byte, 64<<10)
	var sent int64
	write := func(n int) (int, error) {
		fillStream(buf[:n], sent)
		w, err := client.Write(buf[:n])
		sent += int64(w)
		return w, err
	}
	_, err := write(1000)
	MustNil(t, err)
	waitFor(t, "the first 1000 bytes", func() bool { got, _ := sink.state(); return got == 1000 })

	MustNil(t, conn.(ReadPauser).PauseRead())
	MustNil(t, conn.(ReadPauser).PauseRead()) // idempotent
	// Write until the socket buffers are full: each write may wait 200 ms for room; a netpoll that
	// went on reading would let far more than the buffers hold through.
	for {
		_ = client.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
		if _, err := write(len(buf)); err != nil {
			Assert(t, errors.Is(err, os.ErrDeadlineExceeded), err)
			break
		}
		if sent > 256<<20 {
			t.Fatalf("%d bytes written to a paused connection without blocking", sent)
		}
	}
	got, _ := sink.state()
	inq := kernelInq(t, conn)
	t.Logf("paused: %d bytes sent, %d read by netpoll (%d unconsumed), %d in the kernel's receive queue",
		sent, got, conn.Reader().Len(), inq)
	Assert(t, inq > 0, "the kernel's receive queue is empty: netpoll read it while paused")
	pollerRoundTrip(t, s, &echo)
	got2, _ := sink.state()
	Equal(t, got2, got)
	// The queue may still grow (TCP moves what the client's send queue holds as the receive buffer
	// is compacted), never shrink: nothing reads it.
	inq2 := kernelInq(t, conn)
	Assert(t, inq2 >= inq, "the kernel's receive queue shrank while paused", inq, inq2)

	// Resume: the rest of the stream flows, byte for byte, in order.
	MustNil(t, conn.(ReadPauser).ResumeRead())
	MustNil(t, conn.(ReadPauser).ResumeRead()) // idempotent
	_ = client.SetWriteDeadline(time.Time{})
	for end := sent + 4<<20; sent < end; {
		_, err := write(len(buf))
		MustNil(t, err)
	}
	MustNil(t, client.CloseWrite())
	waitFor(t, "every byte after resume", func() bool { got, _ := sink.state(); return got == sent })
	got, mismatch := sink.state()
	Equal(t, mismatch, int64(-1))
	Equal(t, got, sent)
}

// TestReadPauseInOnRequest: a handler that pauses and returns with unread input is not called again
// (no spinning), and ResumeRead with buffered input and no new socket data runs it again.
func TestReadPauseInOnRequest(t *testing.T) {
	sink := newStreamSink()
	var calls, returned, resumed int32
	var echo sync.Map
	s := newPauseServer(t, func(ctx context.Context, c Connection) error {
		if _, ok := echo.Load(c); ok {
			b, _ := c.Reader().Next(c.Reader().Len())
			_, _ = c.Writer().WriteBinary(append([]byte(nil), b...))
			_ = c.Reader().Release()
			return c.Writer().Flush()
		}
		defer atomic.AddInt32(&returned, 1)
		if atomic.AddInt32(&calls, 1) == 1 {
			if err := c.(ReadPauser).PauseRead(); err != nil {
				panic(err)
			}
			sink.consume(c.Reader(), 1) // leave the rest unread
			return nil
		}
		// Before ResumeRead, a call would be a spin: consume nothing, so it would go on spinning.
		if atomic.LoadInt32(&resumed) == 1 {
			sink.consume(c.Reader(), c.Reader().Len())
		}
		return nil
	})
	client, conn := s.dial(t)
	msg := make([]byte, 100)
	fillStream(msg, 0)
	_, err := client.Write(msg)
	MustNil(t, err)
	waitFor(t, "the first handler call to return", func() bool { return atomic.LoadInt32(&returned) >= 1 })
	pollerRoundTrip(t, s, &echo)
	pollerRoundTrip(t, s, &echo)
	Equal(t, atomic.LoadInt32(&calls), int32(1))
	Equal(t, conn.Reader().Len(), 99)

	atomic.StoreInt32(&resumed, 1)
	MustNil(t, conn.(ReadPauser).ResumeRead())
	waitFor(t, "the handler to run after ResumeRead", func() bool { got, _ := sink.state(); return got == 100 })
	Equal(t, atomic.LoadInt32(&calls), int32(2))
	_, mismatch := sink.state()
	Equal(t, mismatch, int64(-1))
}

// TestReadPauseResumeWakesPoller: a pause and resume from another goroutine while the poller is
// idle, with bytes arriving in between, and nothing else happening on the poller: the resume must
// get them read (epoll's EPOLL_CTL_MOD wakes no one for a fd still on its ready list, as a
// level-triggered fd is after it was last reported).
func TestReadPauseResumeWakesPoller(t *testing.T) {
	sink := newStreamSink()
	s := newPauseServer(t, func(ctx context.Context, c Connection) error {
		sink.consume(c.Reader(), c.Reader().Len())
		return nil
	})
	client, conn := s.dial(t)
	buf := make([]byte, 20)
	fillStream(buf, 0)
	for round := 0; round < 50; round++ {
		_, err := client.Write(buf[:10])
		MustNil(t, err)
		waitFor(t, "the first half", func() bool { got, _ := sink.state(); return got == 10 })
		MustNil(t, conn.(ReadPauser).PauseRead())
		_, err = client.Write(buf[10:])
		MustNil(t, err)
		MustNil(t, conn.(ReadPauser).ResumeRead())
		waitFor(t, "the second half after ResumeRead", func() bool { got, _ := sink.state(); return got == 20 })
		_, mismatch := sink.state()
		Equal(t, mismatch, int64(-1))
		sink.mu.Lock()
		sink.got = 0
		sink.mu.Unlock()
	}
}

// TestReadPauseRacesClose: PauseRead and ResumeRead racing the peer's close and Close() neither
// panic nor leak, and calls on connections already closed never reach the connections that reuse
// their fds and operators: each new connection still delivers its whole message.
func TestReadPauseRacesClose(t *testing.T) {
	var sinks sync.Map // Connection -> *streamSink
	s := newPauseServer(t, func(ctx context.Context, c Connection) error {
		v, _ := sinks.LoadOrStore(c, newStreamSink())
		v.(*streamSink).consume(c.Reader(), c.Reader().Len())
		return nil
	})
	const rounds, size = 200, 32 << 10
	msg := make([]byte, size)
	fillStream(msg, 0)
	stop := make(chan struct{})
	var stale sync.WaitGroup
	defer func() { close(stop); stale.Wait() }()
	for i := 0; i < rounds; i++ {
		client, conn := s.dial(t)
		v, _ := s.closed.Load(conn)
		closed := v.(chan struct{})
		rp := conn.(ReadPauser)

		// This connection must deliver its message although every earlier one is being paused
		// and resumed after its close.
		_, err := client.Write(msg)
		MustNil(t, err)
		waitFor(t, "a whole message on a new connection", func() bool {
			v, ok := sinks.Load(conn)
			if !ok {
				return false
			}
			got, _ := v.(*streamSink).state()
			return got == size
		})

		// Race: a goroutine toggles the pause while the peer closes (even rounds) or the server
		// closes (odd rounds); it keeps toggling after the close, until the test ends.
		stale.Add(1)
		go func() {
			defer stale.Done()
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				if k%2 == 0 {
					_ = rp.PauseRead()
				} else {
					_ = rp.ResumeRead()
				}
				if k > 1000 {
					time.Sleep(time.Millisecond)
				}
			}
		}()
		_, _ = client.Write(msg[:1024])
		if i%2 == 0 {
			_ = client.Close()
		} else {
			_ = conn.Close()
		}
		select {
		case <-closed:
		case <-time.After(20 * time.Second):
			t.Fatalf("round %d: the connection was never closed", i)
		}
		MustTrue(t, !conn.IsActive())
		MustNil(t, rp.PauseRead())
		MustNil(t, rp.ResumeRead())
		sinks.Delete(conn)
	}
}

// TestMaxReadSize: with Config.MaxReadSize, a fast sender's reads stop growing at the cap (without
// it they double up to 8 MiB while the handler waits for a large message). Configure must run before
// any connection exists, so each case runs in a child process.
func TestMaxReadSize(t *testing.T) {
	if v := os.Getenv("NETPOLL_TEST_MAXREAD"); v != "" {
		maxReadChild(t, v)
		return
	}
	for _, tc := range []struct {
		maxRead string
		want    func(bookSize int) bool
	}{
		{"65536", func(b int) bool { return b == 64<<10 }},
		{"0", func(b int) bool { return b > 64<<10 }}, // the test can fail: today's growth
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // no child outlives a hang
		defer cancel()
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestMaxReadSize$", "-test.v", "-test.timeout=50s")
		cmd.Env = append(os.Environ(), "NETPOLL_TEST_MAXREAD="+tc.maxRead)
		out, err := cmd.CombinedOutput()
		MustNil(t, err)
		m := regexp.MustCompile(`bookSize=(\d+)`).FindSubmatch(out)
		Assert(t, m != nil, string(out))
		b, _ := strconv.Atoi(string(m[1]))
		t.Logf("MaxReadSize %s: read size after 16 MiB: %d", tc.maxRead, b)
		Assert(t, tc.want(b), tc.maxRead, b)
	}
}

func maxReadChild(t *testing.T, v string) {
	n, err := strconv.Atoi(v)
	MustNil(t, err)
	MustNil(t, Configure(Config{MaxReadSize: n}))
	const total = 16 << 20
	result := make(chan int, 1)
	s := newPauseServer(t, func(ctx context.Context, c Connection) error {
		// Waiting for a large message is what lets reads grow; readTrigger orders the poller's
		// inputAcks up to the last doubling before this read of bookSize. Peek, not Next: nothing is
		// consumed until bookSize is read, so no inputAck finds the buffer empty and ends the burst
		// (patch 0003's reset, which writes bookSize after triggering this handler); Skip then
		// empties it, and an inputAck that sees it empty is ordered after this read.
		if _, err := c.Reader().Peek(total); err != nil {
			return err
		}
		b := c.(*connection).bookSize
		if err := c.Reader().Skip(total); err != nil {
			return err
		}
		_ = c.Reader().Release()
		result <- b
		return nil
	})
	client, _ := s.dial(t)
	buf := make([]byte, 1<<20)
	for sent := 0; sent < total; sent += len(buf) {
		_, err := client.Write(buf)
		MustNil(t, err)
	}
	select {
	case b := <-result:
		fmt.Printf("bookSize=%d\n", b)
	case <-time.After(20 * time.Second):
		t.Fatal("the message never arrived whole")
	}
}
