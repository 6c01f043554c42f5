package proxy

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// testHold is a hold queue with nothing behind it but its metrics: for the lane's own books.
func testHold() *HoldQueue {
	return &HoldQueue{pool: &pool{srv: &Server{m: newMetrics()}}}
}

// laneCall is a protocol's call as the call lane sees it.
type laneCall struct {
	Waiter
	who  string
	n    int
	acct *WaitAccount
}

func (c *laneCall) String() string { return fmt.Sprintf("%s%d", c.who, c.n) }

// pop is PopCall as a *laneCall (nil when none waits).
func pop(h *HoldQueue) *laneCall {
	w := h.PopCall()
	if w == nil {
		return nil
	}
	return w.(*laneCall)
}

// The waiting calls go out round robin by consumer, each consumer's oldest first, whatever is removed
// meanwhile; the hold queue's counts follow every call in and out.
func TestCallLaneRoundRobin(t *testing.T) {
	h := testHold()
	var a, b, c WaitAccount
	call := func(acct *WaitAccount, who string, n int) *laneCall { return &laneCall{who: who, n: n, acct: acct} }
	a1, a2, a3, a4 := call(&a, "a", 1), call(&a, "a", 2), call(&a, "a", 3), call(&a, "a", 4)
	b1, b2 := call(&b, "b", 1), call(&b, "b", 2)
	c1 := call(&c, "c", 1)
	for _, x := range []*laneCall{a1, a2, a3, a4, b1, b2, c1} {
		h.ReholdCall(x, x.acct, 10, false)
	}
	h.RemoveCall(a3)
	h.RemoveCall(a3) // not there any more: nothing happens
	if h.CallsWaiting() != 6 || h.Len() != 6 || h.bytes != 60 || a.bytes != 30 {
		t.Fatalf("after a remove: %d waiting, len %d, %d bytes, a's %d", h.CallsWaiting(), h.Len(), h.bytes, a.bytes)
	}
	var got []*laneCall
	got = append(got, pop(h), pop(h)) // a1, b1
	h.RemoveCall(c1)                  // c's only call: c leaves the turns before its turn came
	for h.CallsWaiting() > 0 {
		got = append(got, pop(h))
	}
	want := []*laneCall{a1, b1, a2, b2, a4}
	if !slices.Equal(got, want) || pop(h) != nil {
		t.Fatalf("order %v, want %v", got, want)
	}
	if h.Len() != 0 || h.bytes != 0 || a.bytes != 0 || b.bytes != 0 || c.bytes != 0 || value(h.pool.srv.m.held) != 0 {
		t.Fatalf("empty, but len %d, %d bytes, gauge %v", h.Len(), h.bytes, value(h.pool.srv.m.held))
	}
	h.ReholdCall(b1, &b, 5, false)
	h.ReholdCall(a1, &a, 5, true) // paused: counted, not waiting for a stream
	if h.CallsWaiting() != 1 || h.PausedCalls() != 1 || h.Len() != 2 {
		t.Fatalf("one waiting and one paused: %d waiting, %d paused, len %d", h.CallsWaiting(), h.PausedCalls(), h.Len())
	}
	h.UnpauseCall(a1)
	if h.CallsWaiting() != 2 || h.PausedCalls() != 0 {
		t.Fatalf("unpaused: %d waiting, %d paused", h.CallsWaiting(), h.PausedCalls())
	}
	if all := h.TakeCalls(); len(all) != 2 || h.Len() != 0 || h.bytes != 0 || pop(h) != nil {
		t.Fatalf("TakeCalls: %v, len %d and %d bytes after", all, h.Len(), h.bytes)
	}
}

// The bounds a call meets on its way into the hold queue: hold.max_requests counts Dubbo's lanes too,
// hold.max_bytes every lane's bytes (a call's growth included), hold.max_bytes_per_consumer only while
// the provider is away.
func TestCallLaneHoldBounds(t *testing.T) {
	h := testHold()
	cfg := &Config{HoldMaxRequests: 3, HoldMaxBytes: 1000, HoldMaxBytesPerConsumer: 400}
	var a, b WaitAccount
	h.n[laneSmall].Store(1) // a held Dubbo request
	h.bytes = 100
	a1 := &laneCall{who: "a", n: 1}
	if _, msg := h.HoldCall(a1, &a, 300, cfg, true); msg != "" {
		t.Fatalf("a first call within every bound: %s", msg)
	}
	if reason, msg := h.HoldCall(&laneCall{}, &a, 200, cfg, true); reason != ReplyOverloaded || msg != heldBytesMsg {
		t.Errorf("a's second call past hold.max_bytes_per_consumer while away: %v %q", reason, msg)
	}
	a2 := &laneCall{}
	if _, msg := h.HoldCall(a2, &a, 200, cfg, false); msg != "" {
		t.Errorf("the same call while the provider serves (the per-consumer bound is off): %q", msg)
	}
	if reason, msg := h.HoldCall(&laneCall{}, &b, 1, cfg, false); reason != ReplyHoldFull || !strings.HasSuffix(msg, "(hold.max_requests)") {
		t.Errorf("a call past hold.max_requests (with the Dubbo request): %v %q", reason, msg)
	}
	h.RemoveCall(a2)
	if reason, msg := h.GrowCall(a1, 601, cfg, false); reason != ReplyHoldFull || !strings.HasSuffix(msg, "(hold.max_bytes)") {
		t.Errorf("DATA past hold.max_bytes: %v %q", reason, msg)
	}
	if _, msg := h.GrowCall(a1, 600, cfg, false); msg != "" || h.bytes != 1000 || a.bytes != 900 {
		t.Errorf("DATA within hold.max_bytes: %q; %d bytes, a's %d", msg, h.bytes, a.bytes)
	}
	h.ReholdCall(&laneCall{}, &b, 500, false) // a call sent again comes back past the bounds
	if _, msg := h.GrowCall(a1, 0, cfg, true); msg != "" {
		t.Errorf("an empty END_STREAM of a waiting call, the queue over hold.max_bytes and the consumer's bound: %q", msg)
	}
}
