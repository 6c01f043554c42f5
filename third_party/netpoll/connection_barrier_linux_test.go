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
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// idleHeapResult is what the child of TestIdleConnectionHoldsNoBarrier reports: Go heap held per
// server connection, in bytes.
type idleHeapResult struct {
	Quiet   int64 // connections that received one message and never wrote
	Flushed int64 // connections that also answered it through Writer().Flush
}

// TestIdleConnectionHoldsNoBarrier: an idle connection holds no output barrier (32 slice headers
// and 32 iovecs, 1,280 bytes), whether it never wrote or wrote and flushed once: the barrier is
// taken for a flush and given back when it ends. 1,000 loopback connections each send one 17-byte
// message (half of them are answered through Writer().Flush); the heap (two GCs) they hold per
// connection must stay under 2.5 KiB, which the eager barrier (taken at init, kept until close) did
// not. The clients are raw sockets, so that only the server's side is on the heap. Configure and
// LinkBufferCap are process-wide: a child process set up as a consumer-facing server is.
func TestIdleConnectionHoldsNoBarrier(t *testing.T) {
	if os.Getenv("NETPOLL_TEST_IDLEHEAP") != "" {
		idleHeapChild(t)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestIdleConnectionHoldsNoBarrier$", "-test.v", "-test.timeout=80s")
	cmd.Env = append(os.Environ(), "NETPOLL_TEST_IDLEHEAP=1")
	out, err := cmd.CombinedOutput()
	MustNil(t, err)
	m := regexp.MustCompile(`RESULT (\{.*\})`).FindSubmatch(out)
	Assert(t, m != nil, string(out))
	var r idleHeapResult
	MustNil(t, json.Unmarshal(m[1], &r))
	t.Logf("heap per idle connection: %d bytes (never wrote), %d bytes (flushed one answer)", r.Quiet, r.Flushed)
	Assert(t, r.Quiet < 2560, r.Quiet)
	Assert(t, r.Flushed < 2560, r.Flushed)
}

func idleHeapChild(t *testing.T) {
	LinkBufferCap = 256
	// One poller: once the last connection's message is handled, every earlier one has been too.
	MustNil(t, Configure(Config{PollerNum: 1, BufferSize: 256, MaxReadSize: 64 << 10, Runner: func(_ context.Context, f func()) { f() }}))
	const conns = 500 // per group
	var handled atomic.Int64
	answer := []byte("answer")
	ln, err := CreateListener("tcp", "127.0.0.1:0")
	MustNil(t, err)
	loop, err := NewEventLoop(func(_ context.Context, c Connection) error {
		r := c.Reader()
		msg, _ := r.Next(r.Len())
		if msg[0] == 'w' {
			_, _ = c.Writer().WriteBinary(answer)
			MustNil(t, c.Writer().Flush())
		}
		handled.Add(1)
		return r.Release()
	})
	MustNil(t, err)
	go loop.Serve(ln)
	defer loop.Shutdown(context.Background())
	port := ln.Addr().(*net.TCPAddr).Port

	fds := make([]int, 0, 2*conns+2)
	defer func() {
		for _, fd := range fds {
			_ = syscall.Close(fd)
		}
	}()
	// send connects a raw client socket and sends one message, starting with kind.
	send := func(kind byte) {
		fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
		MustNil(t, err)
		fds = append(fds, fd)
		MustNil(t, syscall.Connect(fd, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}))
		msg := make([]byte, 17)
		msg[0] = kind
		_, err = syscall.Write(fd, msg)
		MustNil(t, err)
	}
	heap := func() int64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapAlloc)
	}
	perConn := func(kind byte) int64 {
		want := handled.Load() + conns
		before := heap()
		for i := 0; i < conns; i++ {
			send(kind)
		}
		waitFor(t, "the messages of "+strconv.Quote(string(kind)), func() bool { return handled.Load() == want })
		return (heap() - before) / conns
	}
	// A first connection of each kind, so that what the first ones allocate for all (the poller's
	// operator cache, the pools) is not counted.
	send('q')
	send('w')
	waitFor(t, "the first messages", func() bool { return handled.Load() == 2 })
	var res idleHeapResult
	res.Quiet = perConn('q')
	res.Flushed = perConn('w')
	b, _ := json.Marshal(res)
	fmt.Printf("RESULT %s\n", b)
}

// TestFlushRacesClose: a flush racing Close, the barrier now taken and given back by the flush
// itself. Each round the server's end writes 4 MiB and flushes it (more than loopback's socket
// buffers hold, so the flush sends part and waits while the poller sends the rest, PollR2RW) while
// the client reads in every other round, and Close comes as soon as the flush has started. Every
// flush returns, and with -race no access races the close.
func TestFlushRacesClose(t *testing.T) {
	s := newPauseServer(t, func(context.Context, Connection) error { return nil })
	chunk := make([]byte, 4<<20)
	for round := 0; round < 40; round++ {
		client, sc := s.dial(t)
		if round%2 == 1 {
			go func() {
				buf := make([]byte, 64<<10)
				for {
					if _, err := client.Read(buf); err != nil {
						return
					}
				}
			}()
		}
		flushing, flushed := make(chan struct{}), make(chan error, 1)
		go func() {
			_, err := sc.Writer().WriteBinary(chunk)
			MustNil(t, err)
			close(flushing)
			flushed <- sc.Writer().Flush()
		}()
		<-flushing
		MustNil(t, sc.Close())
		select {
		case <-flushed: // nil if the flush finished first, an error if the close cut it short
		case <-time.After(20 * time.Second):
			t.Fatalf("round %d: the flush never returned after Close", round)
		}
		_ = client.Close()
	}
}

// BenchmarkWriteFlush is what the barrier now costs a connection that does write through netpoll:
// one 17-byte message written and flushed per op (a pool Get and Put around each sendmsg), a client
// on loopback draining what arrives.
func BenchmarkWriteFlush(b *testing.B) {
	ln, err := CreateListener("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	conns := make(chan Connection, 1)
	loop, err := NewEventLoop(func(context.Context, Connection) error { return nil },
		WithOnPrepare(func(c Connection) context.Context { conns <- c; return context.Background() }))
	if err != nil {
		b.Fatal(err)
	}
	go loop.Serve(ln)
	defer loop.Shutdown(context.Background())
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()
	sc := <-conns
	go func() {
		buf := make([]byte, 64<<10)
		for {
			if _, err := client.Read(buf); err != nil {
				return
			}
		}
	}()
	msg := make([]byte, 17)
	w := sc.Writer()
	for b.Loop() {
		if _, err := w.WriteBinary(msg); err != nil {
			b.Fatal(err)
		}
		if err := w.Flush(); err != nil {
			b.Fatal(err)
		}
	}
}
