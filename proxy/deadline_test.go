package proxy

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stormgate/stormgate/keepalive"
	"github.com/stormgate/stormgate/peer"
	"github.com/stormgate/stormgate/proxy/dubbo"
)

// Issue 22: a request is never handed to the provider after its consumer's own
// deadline (the `timeout` attachment) less hold.deadline_margin, wherever it waits;
// one that carries no timeout waits hold.timeout, as before.

// step moves the fixture's manual clock by d and fires every timer that became due
// before it returns (Advance runs the callbacks under the wheel's drive lock, so a
// concurrent tick of the driver has finished too): what did not happen by then will
// not happen at this time.
func (f *fixture) step(d time.Duration) {
	f.t.Helper()
	f.clk.Add(d)
	f.srv.wheel.Advance(f.clk.Now())
}

// downFixture is a fixture on a manual clock in front of a scripted echo provider
// that is then stopped: every request waits in the hold queue. restart brings the
// provider back on the same address and moves the clock until the connections are up.
func downFixture(t *testing.T, mods ...func(*Config)) (f *fixture, seen *atomic.Int32, restart func()) {
	t.Helper()
	seen = new(atomic.Int32)
	script := func(c net.Conn, h dubbo.Header, frame []byte) {
		seen.Add(1)
		_, _ = c.Write(dubbo.AppendValueResponse(nil, h.ID, dubbo.SerialHessian2, argOf(t, frame)))
	}
	prov := newScriptedProvider(t, script)
	addr := prov.addr()
	clk := keepalive.NewManualClock(time.Unix(1_000_000, 0))
	mods = append([]func(*Config){func(c *Config) { c.Upstream = addr; c.UpstreamConns = 2 }}, mods...)
	f = newFixtureWith(t, peer.ProviderConfig{}, Options{Clock: clk}, mods...)
	prov.stop()
	waitFor(t, 10*time.Second, "no usable provider connection", func() bool { return f.readyConns() == 0 })
	restart = func() {
		t.Helper()
		newScriptedProviderOn(t, addr, script)
		f.stepUntil(100*time.Second, 100*time.Millisecond, "a connection to the restarted provider", func() bool { return f.readyConns() > 0 })
	}
	return f, seen, restart
}

// callTimeoutAsync is callAsync with the consumer's timeout in the request.
func callTimeoutAsync(ctx context.Context, c *peer.Client, id int64, arg string, timeout time.Duration) <-chan callResult {
	ch := make(chan callResult, 1)
	go func() {
		resp, err := c.CallTimeout(ctx, id, svc, "echo", arg, timeout)
		ch <- callResult{resp, err}
	}()
	return ch
}

func heldNow(f *fixture) int64 { return f.srv.Stats().Held }

// A held request that carries a 500 ms timeout is answered by Stormgate (31, not
// sent) at 500 ms less the 100 ms margin, and never reaches the provider when it
// comes back; a later request does.
func TestHeldRequestAnsweredAtItsConsumersDeadline(t *testing.T) {
	f, seen, restart := downFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl := f.dial(ctx)
	res := callTimeoutAsync(ctx, cl, 1, "late", 500*time.Millisecond)
	waitFor(t, 10*time.Second, "the request held", func() bool { return heldNow(f) == 1 })
	f.step(399 * time.Millisecond)
	if heldNow(f) != 1 {
		t.Fatal("answered before its consumer's deadline less the margin")
	}
	f.step(time.Millisecond)
	r := <-res
	if r.err != nil || r.resp.Status != dubbo.StatusServerTimeout || !strings.Contains(r.resp.Value, "not sent") {
		t.Fatalf("answer %+v %v; want Stormgate's own timeout answer (31)", r.resp, r.err)
	}
	if n := f.holdOutcome(HoldDeadline); n != 1 {
		t.Fatalf("hold outcome deadline %v, want 1", n)
	}
	if n := value(f.srv.m.localReplies[ReplyDeadline]); n != 1 {
		t.Fatalf("local replies deadline %v, want 1", n)
	}
	restart()
	wantEcho(t, ctx, cl, 2, "after", 0)
	if n := seen.Load(); n != 1 {
		t.Fatalf("the provider saw %d requests, want 1 (the late one must never reach it)", n)
	}
}

// Acceptance 2: a request that carries no timeout waits hold.timeout (3 s), exactly
// as before issue 22, and is answered 35 at its end.
func TestHeldRequestWithoutTimeoutWaitsHoldTimeout(t *testing.T) {
	f, seen, restart := downFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl := f.dial(ctx)
	res := callAsync(ctx, cl, 1, "no timeout")
	waitFor(t, 10*time.Second, "the request held", func() bool { return heldNow(f) == 1 })
	f.step(2999 * time.Millisecond)
	if heldNow(f) != 1 {
		t.Fatal("answered before hold.timeout")
	}
	f.step(time.Millisecond)
	r := <-res
	if r.err != nil || r.resp.Status != dubbo.StatusChannelInactive || !strings.Contains(r.resp.Value, "hold time") {
		t.Fatalf("answer %+v %v; want the hold timeout (35)", r.resp, r.err)
	}
	if n := f.holdOutcome(HoldExpired); n != 1 {
		t.Fatalf("hold outcome expired %v, want 1", n)
	}
	// And one that the provider's return catches is sent, as before.
	res = callAsync(ctx, cl, 2, "caught")
	waitFor(t, 10*time.Second, "the second request held", func() bool { return heldNow(f) == 1 })
	f.step(time.Second)
	restart()
	if r := <-res; r.err != nil || r.resp.Status != dubbo.StatusOK || r.resp.Value != "caught" {
		t.Fatalf("answer %+v %v; want the provider's", r.resp, r.err)
	}
	if n := seen.Load(); n != 1 {
		t.Fatalf("the provider saw %d requests, want 1", n)
	}
}

// A consumer that waits 10 s is held past hold.timeout (3 s) for as long as it waits:
// a provider back after 5 s answers it.
func TestHeldRequestWaitsAsLongAsItsConsumer(t *testing.T) {
	f, _, restart := downFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := f.dial(ctx)
	res := callTimeoutAsync(ctx, cl, 1, "patient", 10*time.Second)
	waitFor(t, 10*time.Second, "the request held", func() bool { return heldNow(f) == 1 })
	for range 50 {
		f.step(100 * time.Millisecond)
	}
	if heldNow(f) != 1 {
		t.Fatal("a request whose consumer waits 10 s was not held for 5 s")
	}
	restart()
	if r := <-res; r.err != nil || r.resp.Status != dubbo.StatusOK || r.resp.Value != "patient" {
		t.Fatalf("answer %+v %v; want the provider's", r.resp, r.err)
	}
}

// hold.max_timeout bounds what a consumer's timeout may ask for; with 0 the timeout
// is not read at all (the behaviour before issue 22).
func TestHoldMaxTimeout(t *testing.T) {
	for _, c := range []struct {
		name    string
		max     time.Duration
		timeout time.Duration
		ends    time.Duration
		status  byte
	}{
		{"capped", 2 * time.Second, 10 * time.Second, 2 * time.Second, dubbo.StatusChannelInactive},
		{"off", 0, 500 * time.Millisecond, 3 * time.Second, dubbo.StatusChannelInactive},
		{"below the cap", 2 * time.Second, time.Second, 900 * time.Millisecond, dubbo.StatusServerTimeout},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, _, _ := downFixture(t, func(cfg *Config) { cfg.HoldMaxTimeout = c.max })
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			res := callTimeoutAsync(ctx, f.dial(ctx), 1, "x", c.timeout)
			waitFor(t, 10*time.Second, "the request held", func() bool { return heldNow(f) == 1 })
			f.step(c.ends - time.Millisecond)
			if heldNow(f) != 1 {
				t.Fatalf("answered before %v", c.ends)
			}
			f.step(time.Millisecond)
			if r := <-res; r.err != nil || r.resp.Status != c.status {
				t.Fatalf("answer %+v %v; want status %d at %v", r.resp, r.err, c.status, c.ends)
			}
		})
	}
}

// A request whose consumer's timeout is already within the margin when it would have
// to wait is answered at once, and never held.
func TestRequestTooLateToHoldAnsweredAtOnce(t *testing.T) {
	f, _, _ := downFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r := <-callTimeoutAsync(ctx, f.dial(ctx), 1, "hasty", 80*time.Millisecond) // below the 100 ms margin
	if r.err != nil || r.resp.Status != dubbo.StatusServerTimeout {
		t.Fatalf("answer %+v %v; want 31 at once", r.resp, r.err)
	}
	if n := f.holdOutcome(HoldDeadline); n != 1 {
		t.Fatalf("hold outcome deadline %v, want 1", n)
	}
}

// A not-executed answer (the provider was not ready to run it) re-holds a request
// only when its retry can leave before its consumer's deadline less the margin;
// otherwise the provider's own answer goes to the consumer.
func TestNotExecutedRetryRespectsTheDeadline(t *testing.T) {
	f, _, seen := answeringFixture(t, func(n int32, id int64, frame []byte) []byte {
		return providerAnswer(t, "live_no_exporter", id)
	}, func(c *Config) { c.BackoffBase = 50 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// sendBy is 130 ms after arrival: the 50 ms pause fits once (retry at +50 ms), the
	// second pause (100 ms, from +50 ms) would end at +150 ms and does not.
	res := callTimeoutAsync(ctx, f.dial(ctx), 1, "x", 230*time.Millisecond)
	waitFor(t, 10*time.Second, "the first re-hold", func() bool { return f.notExecuted("dubbogo_no_exporter", NotRunReheld) == 1 })
	f.step(50 * time.Millisecond)
	r := <-res
	if r.err != nil || r.resp.Status != dubbo.StatusOK || r.resp.Value != "" {
		t.Fatalf("answer %+v %v; want the provider's own not-executed answer", r.resp, r.err)
	}
	if n := seen.Load(); n != 2 {
		t.Fatalf("the provider saw the request %d times, want 2", n)
	}
	if n := f.notExecuted("dubbogo_no_exporter", NotRunPassedOn); n != 1 {
		t.Fatalf("passed_on %v, want 1: the second answer should have gone to the consumer", n)
	}
}

// wantEcho calls and wants the provider's echo of arg.
func wantEcho(t *testing.T, ctx context.Context, c *peer.Client, id int64, arg string, timeout time.Duration) {
	t.Helper()
	r := <-callTimeoutAsync(ctx, c, id, arg, timeout)
	if r.err != nil || r.resp.Status != dubbo.StatusOK || r.resp.Value != arg {
		t.Fatalf("call %q: %+v %v; want the provider's echo", arg, r.resp, r.err)
	}
}
