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
	"os"
	"os/exec"
	"regexp"
	"sync"
	"testing"
	"time"
)

// spillResult is what the child of TestOneReadPerMessage reports: for each message, the handler
// calls (one per read, the handler running inline and consuming everything) it took.
type spillResult struct {
	Sizes []int
	Calls []int
}

// TestOneReadPerMessage: a message that arrived whole is read by one readv even when it is larger
// than what the connection booked, be it the read size (a 600-byte message, 256-byte reads) or the
// tail of the current buffer node (155-byte messages, the size of the forward bench's requests, in
// 256-byte nodes: every other one straddles the node's end). Without the patch each of them took two
// reads, so two handler calls. Configure and LinkBufferCap are process-wide: a child process set up as
// a consumer-facing server with inline handlers would be.
func TestOneReadPerMessage(t *testing.T) {
	if os.Getenv("NETPOLL_TEST_SPILL") != "" {
		spillChild(t)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second) // no child outlives a hang
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestOneReadPerMessage$", "-test.v", "-test.timeout=80s")
	cmd.Env = append(os.Environ(), "NETPOLL_TEST_SPILL=1")
	out, err := cmd.CombinedOutput()
	MustNil(t, err)
	m := regexp.MustCompile(`RESULT (\{.*\})`).FindSubmatch(out)
	Assert(t, m != nil, string(out))
	var r spillResult
	MustNil(t, json.Unmarshal(m[1], &r))
	t.Logf("message sizes %v: handler calls (reads) %v", r.Sizes, r.Calls)
	for i, c := range r.Calls {
		Assert(t, c == 1, "message", i, "of", r.Sizes[i], "bytes took", c, "reads")
	}
}

func spillChild(t *testing.T) {
	LinkBufferCap = 256
	MustNil(t, Configure(Config{BufferSize: 256, MaxReadSize: 64 << 10, Runner: func(_ context.Context, f func()) { f() }}))
	var (
		mu    sync.Mutex
		calls int
		got   int
	)
	s := newPauseServer(t, func(_ context.Context, c Connection) error {
		r := c.Reader()
		n := r.Len()
		_, _ = r.Next(n)
		mu.Lock()
		calls++
		got += n
		mu.Unlock()
		return r.Release()
	})
	client, _ := s.dial(t)
	res := spillResult{Sizes: []int{600, 155, 155, 155, 155, 155, 155, 2000}}
	for _, size := range res.Sizes {
		mu.Lock()
		calls, got = 0, 0
		mu.Unlock()
		_, err := client.Write(make([]byte, size)) // one segment over loopback: it arrives whole
		MustNil(t, err)
		waitFor(t, "the message", func() bool { mu.Lock(); defer mu.Unlock(); return got == size })
		mu.Lock()
		res.Calls = append(res.Calls, calls)
		mu.Unlock()
	}
	b, _ := json.Marshal(res)
	fmt.Printf("RESULT %s\n", b)
}
