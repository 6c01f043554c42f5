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
	"os"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"
)

// TestCloseDuringReleaseQuietFinishes: a connection read by an OnRequest handler takes a burst (its
// reads grow), goes quiet, and the poller's releaseQuiet frees the grown node; a Close arriving while
// releaseQuiet holds the processing lock (the test hook closes it there) leaves its callbacks to
// releaseQuiet. They must run, and the poller must go on serving: before patch 0006 releaseQuiet ran
// them on the poller, inside the fd's event, where freeing the operator waits for the poller to let go
// of it, and the poller spun at 100 % CPU forever (no close callback, no later connection served).
// Configure and the hook are process-wide: a child process, whose timeout bounds the failure.
func TestCloseDuringReleaseQuietFinishes(t *testing.T) {
	if os.Getenv("NETPOLL_TEST_QUIETCLOSE") != "" {
		quietCloseChild(t)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestCloseDuringReleaseQuietFinishes$", "-test.v", "-test.timeout=30s")
	cmd.Env = append(os.Environ(), "NETPOLL_TEST_QUIETCLOSE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		if len(out) > 4096 {
			out = out[len(out)-4096:]
		}
		t.Fatalf("child: %v\n%s", err, out)
	}
}

func quietCloseChild(t *testing.T) {
	LinkBufferCap = 256
	// One poller, handlers inline: as Stormgate sets netpoll up.
	MustNil(t, Configure(Config{PollerNum: 1, BufferSize: 256, MaxReadSize: 64 << 10, Runner: func(_ context.Context, f func()) { f() }}))
	const burst = 512 << 10
	var got atomic.Int64
	// The hook is set before the poller starts and finds its connection through an atomic: the poller
	// runs it for every connection's quiet release.
	var target atomic.Value // *connection
	var fired, closedInHook atomic.Bool
	testHookReleaseQuiet = func(c *connection) {
		if want, _ := target.Load().(*connection); c == want && fired.CompareAndSwap(false, true) {
			_ = c.Close()
			closedInHook.Store(true)
		}
	}
	s := newPauseServer(t, func(_ context.Context, c Connection) error {
		r := c.Reader()
		n := r.Len()
		_, _ = r.Next(n)
		got.Add(int64(n))
		return r.Release()
	})
	client, sc := s.dial(t)
	target.Store(sc.(*connection))
	// The close cuts the burst short: the client's write ends with an error, which does not matter.
	go func() { _, _ = client.Write(make([]byte, burst)) }()
	closed, _ := s.closed.Load(sc)
	select {
	case <-closed.(chan struct{}):
	case <-time.After(20 * time.Second):
		t.Fatalf("no close callback 20 s after the burst (closed in releaseQuiet: %v, %d of %d bytes handled)",
			closedInHook.Load(), got.Load(), burst)
	}
	Assert(t, closedInHook.Load(), "releaseQuiet never ran for the burst's connection")
	// The poller goes on serving: a new connection's message is handled.
	before := got.Load()
	c2, _ := s.dial(t)
	_, err := c2.Write([]byte("after"))
	MustNil(t, err)
	waitFor(t, "a message on a later connection", func() bool { return got.Load() >= before+5 })
}
