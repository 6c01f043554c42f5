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
	"syscall"
	"testing"
	"time"
)

// eventAllocResult is what the child of TestReadableEventAllocatesNothing reports.
type eventAllocResult struct {
	Events int     // readable events measured, one message each
	Allocs float64 // heap allocations per event, the whole process
	Bytes  float64 // heap bytes allocated per event
}

// TestReadableEventAllocatesNothing: a readable event on a connection whose handler runs inline
// allocates nothing. netpoll built a new task closure (about 32 bytes) for every readable event
// and handed it to the Runner: with 10,000 consumers heartbeating every second that was 0.3 MB/s
// of garbage, which RSS per idle connection counts between collections. A raw-socket client sends
// a 17-byte message and waits until the handler took it, 20,000 times; the process's heap
// allocations over them must stay under one per 10 events (without -race 0.003 were found, the
// runtime's own; with -race 0.04, sync.Pool dropping some of what is put back, as it does under the
// race detector; the closure was one per event). Configure (the inline Runner) is process-wide: a
// child process set up as a consumer-facing server with inline handlers.
func TestReadableEventAllocatesNothing(t *testing.T) {
	if os.Getenv("NETPOLL_TEST_EVENTALLOC") != "" {
		eventAllocChild(t)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestReadableEventAllocatesNothing$", "-test.v", "-test.timeout=80s")
	cmd.Env = append(os.Environ(), "NETPOLL_TEST_EVENTALLOC=1")
	out, err := cmd.CombinedOutput()
	Assert(t, err == nil, err, string(out))
	m := regexp.MustCompile(`RESULT (\{.*\})`).FindSubmatch(out)
	Assert(t, m != nil, string(out))
	var r eventAllocResult
	MustNil(t, json.Unmarshal(m[1], &r))
	t.Logf("%d readable events: %.3f allocations and %.1f bytes per event", r.Events, r.Allocs, r.Bytes)
	Assert(t, r.Allocs < 0.1, r.Allocs)
}

func eventAllocChild(t *testing.T) {
	LinkBufferCap = 256
	MustNil(t, Configure(Config{PollerNum: 1, BufferSize: 256, MaxReadSize: 64 << 10, Runner: func(_ context.Context, f func()) { f() }}))
	handled := make(chan struct{}, 1) // a channel send and receive allocate nothing
	s := newPauseServer(t, func(_ context.Context, c Connection) error {
		r := c.Reader()
		_ = r.Skip(r.Len())
		handled <- struct{}{}
		return r.Release()
	})
	port := s.addrPort(t)
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	MustNil(t, err)
	defer syscall.Close(fd)
	MustNil(t, syscall.Connect(fd, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}))
	msg := make([]byte, 17)
	event := func() {
		_, err := syscall.Write(fd, msg)
		if err != nil {
			panic(err)
		}
		<-handled // a handler that never runs ends in the child's -test.timeout
	}
	// Warm up: the first events size the pools and the input buffer.
	for i := 0; i < 1000; i++ {
		event()
	}
	const events = 20000
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := 0; i < events; i++ {
		event()
	}
	runtime.ReadMemStats(&after)
	b, _ := json.Marshal(eventAllocResult{
		Events: events,
		Allocs: float64(after.Mallocs-before.Mallocs) / events,
		Bytes:  float64(after.TotalAlloc-before.TotalAlloc) / events,
	})
	fmt.Printf("RESULT %s\n", b)
}

// addrPort is the port the server listens on.
func (s *pauseServer) addrPort(t *testing.T) int {
	addr, err := net.ResolveTCPAddr("tcp", s.addr)
	MustNil(t, err)
	return addr.Port
}
