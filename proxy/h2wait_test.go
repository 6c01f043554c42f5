package proxy

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
)

// testHold is a hold queue with nothing behind it but its metrics: for the lane's own books.
func testHold() *holdQueue {
	return &holdQueue{pool: &pool{srv: &Server{m: newMetrics()}}}
}

// The waiting calls go out round robin by consumer, each consumer's oldest first, whatever is removed
// meanwhile; the hold queue's counts follow every call in and out.
func TestH2WaitingRoundRobin(t *testing.T) {
	h := testHold()
	a, b, c := &h2Session{}, &h2Session{}, &h2Session{}
	call := func(s *h2Session, n uint32) *h2Call { return &h2Call{sess: s, down: n} }
	a1, a2, a3, a4 := call(a, 1), call(a, 3), call(a, 5), call(a, 7)
	b1, b2 := call(b, 1), call(b, 3)
	c1 := call(c, 1)
	for _, x := range []*h2Call{a1, a2, a3, a4, b1, b2, c1} {
		h.reholdCall(x, 10, false)
	}
	h.removeCall(a3)
	h.removeCall(a3) // not there any more: nothing happens
	if h.callsWaiting() != 6 || h.len() != 6 || h.bytes != 60 || a.heldBytes != 30 {
		t.Fatalf("after a remove: %d waiting, len %d, %d bytes, a's %d", h.callsWaiting(), h.len(), h.bytes, a.heldBytes)
	}
	var got []*h2Call
	got = append(got, h.popCall(), h.popCall()) // a1, b1
	h.removeCall(c1)                            // c's only call: c leaves the turns before its turn came
	for h.callsWaiting() > 0 {
		got = append(got, h.popCall())
	}
	want := []*h2Call{a1, b1, a2, b2, a4}
	if !slices.Equal(got, want) || h.popCall() != nil {
		t.Fatalf("order %v, want %v", callNames(got, a, b), callNames(want, a, b))
	}
	if h.len() != 0 || h.bytes != 0 || a.heldBytes != 0 || b.heldBytes != 0 || c.heldBytes != 0 || value(h.pool.srv.m.held) != 0 {
		t.Fatalf("empty, but len %d, %d bytes, gauge %v", h.len(), h.bytes, value(h.pool.srv.m.held))
	}
	h.reholdCall(b1, 5, false)
	h.reholdCall(a1, 5, true) // paused: counted, not waiting for a stream
	if h.callsWaiting() != 1 || h.pausedCalls() != 1 || h.len() != 2 {
		t.Fatalf("one waiting and one paused: %d waiting, %d paused, len %d", h.callsWaiting(), h.pausedCalls(), h.len())
	}
	h.unpauseCall(a1)
	if h.callsWaiting() != 2 || h.pausedCalls() != 0 {
		t.Fatalf("unpaused: %d waiting, %d paused", h.callsWaiting(), h.pausedCalls())
	}
	if all := h.takeCalls(); len(all) != 2 || h.len() != 0 || h.bytes != 0 || h.popCall() != nil {
		t.Fatalf("takeCalls: %v, len %d and %d bytes after", all, h.len(), h.bytes)
	}
}

// The bounds a call meets on its way into the hold queue: hold.max_requests counts Dubbo's lanes too,
// hold.max_bytes every lane's bytes (a call's growth included), hold.max_bytes_per_consumer only while
// the provider is away.
func TestH2HoldBounds(t *testing.T) {
	h := testHold()
	cfg := &Config{HoldMaxRequests: 3, HoldMaxBytes: 1000, HoldMaxBytesPerConsumer: 400}
	a, b := &h2Session{}, &h2Session{}
	h.n[laneSmall].Store(1) // a held Dubbo request
	h.bytes = 100
	if _, msg := h.holdCall(&h2Call{sess: a}, 300, cfg, true); msg != "" {
		t.Fatalf("a first call within every bound: %s", msg)
	}
	if reason, msg := h.holdCall(&h2Call{sess: a}, 200, cfg, true); reason != ReplyOverloaded || msg != h2HeldBytesMsg {
		t.Errorf("a's second call past hold.max_bytes_per_consumer while away: %v %q", reason, msg)
	}
	a2 := &h2Call{sess: a}
	if _, msg := h.holdCall(a2, 200, cfg, false); msg != "" {
		t.Errorf("the same call while the provider serves (the per-consumer bound is off): %q", msg)
	}
	if reason, msg := h.holdCall(&h2Call{sess: b}, 1, cfg, false); reason != ReplyHoldFull || !strings.HasSuffix(msg, "(hold.max_requests)") {
		t.Errorf("a call past hold.max_requests (with the Dubbo request): %v %q", reason, msg)
	}
	h.removeCall(a2)
	if reason, msg := h.growCall(h.calls.waiting.active[0].q[0], 601, cfg, false); reason != ReplyHoldFull || !strings.HasSuffix(msg, "(hold.max_bytes)") {
		t.Errorf("DATA past hold.max_bytes: %v %q", reason, msg)
	}
	if _, msg := h.growCall(h.calls.waiting.active[0].q[0], 600, cfg, false); msg != "" || h.bytes != 1000 || a.heldBytes != 900 {
		t.Errorf("DATA within hold.max_bytes: %q; %d bytes, a's %d", msg, h.bytes, a.heldBytes)
	}
}

func callNames(cs []*h2Call, a, b *h2Session) []string {
	var s []string
	for _, c := range cs {
		who := "c"
		switch c.sess {
		case a:
			who = "a"
		case b:
			who = "b"
		}
		s = append(s, fmt.Sprintf("%s%d", who, c.down))
	}
	return s
}

// TestH2WaitingServedFairly: a provider that runs one stream at a time, one provider connection; one
// consumer has ten slow calls in flight (one at the provider, nine waiting in Stormgate) when another
// consumer makes one call. A freed stream goes to the consumers in turn, so the second consumer's call
// is answered while most of the first one's still wait; in arrival order it waited for all ten. (The
// e2e acceptance: TestH2SlowConsumersCostOthersNothing.)
func TestH2WaitingServedFairly(t *testing.T) {
	prov := startGRPCProvider(t, grpc.MaxConcurrentStreams(1))
	srv, addr := newH2Server(t, prov.Addr().String(), ProtoTriple, func(c *Config) { c.UpstreamConns = 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	greedy := grpcClient(t, addr)
	var done atomic.Int32
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Go(func() {
			msg := fmt.Appendf(nil, "greedy-%d", i)
			if _, err := echo(ctx, greedy, msg, "x-sleep-ms", "30"); err != nil {
				t.Errorf("greedy call %d: %v", i, err)
			}
			done.Add(1)
		})
	}
	waitFor(t, 20*time.Second, "nine calls waiting in Stormgate", func() bool {
		hp := srv.poolList()[0].h2
		hp.mu.Lock()
		defer hp.mu.Unlock()
		return hp.p.hold.callsWaiting() == 9
	})
	if _, err := echo(ctx, grpcClient(t, addr), []byte("polite")); err != nil {
		t.Fatal(err)
	}
	ahead := done.Load()
	wg.Wait()
	if ahead > 3 {
		t.Errorf("%d of the other consumer's 10 calls were answered before this one: it waited its turn behind all", ahead)
	}
	t.Logf("answered after %d of the other consumer's 10 calls", ahead)
}
