package peer

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stormgate/stormgate/proxy/dubbo"
)

// TestFrameCounterPieces: frames are counted when their last byte arrives, whatever the
// pieces the stream comes in, and only those of the kind asked for.
func TestFrameCounterPieces(t *testing.T) {
	var stream []byte
	stream = dubbo.AppendRequest(stream, 1, true, "s", "m", "a")
	stream = dubbo.AppendHeartbeatRequest(stream, 2)
	stream = dubbo.AppendRequest(stream, 3, false, "s", "m", "one-way")
	stream = dubbo.AppendRequest(stream, 4, true, "s", "m", string(make([]byte, 300)))
	stream = dubbo.AppendReadonlyEvent(stream, 5)
	for piece := 1; piece <= len(stream); piece++ {
		fc := frameCounter{match: twoWayRequest}
		total := 0
		for i := 0; i < len(stream); i += piece {
			total += fc.feed(stream[i:min(i+piece, len(stream))])
		}
		if total != 2 {
			t.Fatalf("pieces of %d bytes: counted %d two-way requests, want 2", piece, total)
		}
	}
}

// TestInsideCountsRequestsUntilAnswered: a request is inside from its arrival until its
// answer is written.
func TestInsideCountsRequestsUntilAnswered(t *testing.T) {
	var inside atomic.Int64
	p := startProvider(t, ProviderConfig{Inside: &inside})
	c := dial(t, p.Addr())
	ctx := testCtx(t)
	if _, err := c.Call(ctx, 1, "s", "echo", "x"); err != nil {
		t.Fatal(err)
	}
	// The answer reaches the consumer as write(2) returns, a moment before the
	// provider's writer uncounts it: wait for it rather than read at once.
	eventually(t, "nothing inside after an answered request", func() bool { return inside.Load() == 0 })
	done := make(chan error, 1)
	go func() { _, err := c.Call(ctx, 2, "s", "sleep", "1s"); done <- err }()
	eventually(t, "the sleeping request inside", func() bool { return inside.Load() == 1 })
	if _, err := c.Heartbeat(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if n := inside.Load(); n != 1 {
		t.Fatalf("inside %d with a heartbeat answered beside it, want 1", n)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	eventually(t, "nothing inside once answered", func() bool { return inside.Load() == 0 })
}

// TestShutdownWaitDisconnect: with WaitDisconnect the provider stops as Java Dubbo's
// server does: READONLY, requests still served, closed once every consumer has gone
// (or the limit passed).
func TestShutdownWaitDisconnect(t *testing.T) {
	for _, leave := range []bool{true, false} {
		p, err := NewProvider(ProviderConfig{WaitDisconnect: 300 * time.Millisecond}, nil)
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = p.Serve(context.Background()) }()
		c := dial(t, p.Addr())
		ctx := testCtx(t)
		if _, err := c.Call(ctx, 1, svc, "echo", "before"); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		stopped := make(chan error, 1)
		go func() { stopped <- p.Shutdown(ctx) }()
		if f := <-c.Events(); f.Event() != 'R' {
			t.Fatalf("first event %x, want READONLY", f.Raw)
		}
		if r, err := c.Call(ctx, 2, svc, "echo", "after"); err != nil || r.Value != "after" {
			t.Fatalf("a request after READONLY: %+v %v; want it served", r, err)
		}
		if leave {
			c.Close()
		}
		if err := <-stopped; err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		if leave && took > 250*time.Millisecond || !leave && took < 300*time.Millisecond {
			t.Fatalf("consumer left %v: Shutdown took %v (limit 300ms)", leave, took)
		}
	}
}
