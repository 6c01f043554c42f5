package e2e

import (
	"context"
	"syscall"
	"testing"
	"time"
)

// Issue 22, acceptance 3: the provider stopped with SIGSTOP for 12 s under load. With
// the default settings (keepalive.upstream_hung_timeout 5s) /readyz answers 503 and
// consumers get READONLY within 10 s; after SIGCONT /readyz answers 200 again and
// consumers get WRITEABLE within 10 s, and requests succeed again. Before issue 22
// every heartbeat was answered by Stormgate and /readyz stayed 200 throughout.
func TestHungProviderNotReady(t *testing.T) {
	prov := startProvider(t, "")
	sc := startSidecar(t, prov.addr, "", 4)
	f := dialFleet(t, sc.listen, 50, true)
	st := f.startStream(streamConfig{rate: 200, duration: 22 * time.Second, method: "echo", arg: "hello",
		timeout: time.Second, sendTimeout: true})
	time.Sleep(3 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stopAt := sigstopProvider(t, ctx, sc, prov)
	waitEvent(t, f, 'R', stopAt, 10*time.Second-time.Since(stopAt))
	if v := sc.metric(t, "stormgate_upstream_hung"); v != 1 {
		t.Errorf("stormgate_upstream_hung %v while stopped, want 1", v)
	}

	time.Sleep(time.Until(stopAt.Add(12 * time.Second)))
	contAt := time.Now()
	if err := prov.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	ready := waitReadyz(t, ctx, sc, 200, 10*time.Second)
	t.Logf("/readyz 200 %v after SIGCONT", ready.Sub(contAt).Round(time.Millisecond))
	waitEvent(t, f, 'W', contAt, 10*time.Second-time.Since(contAt))

	calls := st.wait(t, 60*time.Second)
	late := 0
	for _, c := range calls {
		if c.scheduled.After(ready.Add(time.Second)) {
			late++
			if !c.ok() {
				t.Errorf("call %d/%d sent %v after the provider was ready again failed: status %d, %v",
					c.conn, c.id, c.sent.Sub(ready), c.resp.Status, c.err)
			}
		}
	}
	if late < 400 {
		t.Errorf("only %d calls after the provider was back; want the load to go on", late)
	}
	t.Logf("all calls: %v", count(calls))
	if v := sc.metric(t, "stormgate_provider_hangs_total"); v != 1 {
		t.Errorf("stormgate_provider_hangs_total %v, want 1", v)
	}
}

// sigstopProvider checks that /readyz answers 200, stops the provider process with SIGSTOP (SIGCONT at the
// test's end, if the test has not sent it) and waits up to 10 s for /readyz to answer 503; it returns
// when the provider was stopped.
func sigstopProvider(t *testing.T, ctx context.Context, sc *sidecar, prov interface{ Signal(syscall.Signal) error }) time.Time {
	t.Helper()
	if code := sc.readyz(ctx); code != 200 {
		t.Fatalf("/readyz %d before the stop, want 200", code)
	}
	stopAt := time.Now()
	if err := prov.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = prov.Signal(syscall.SIGCONT) }) // harmless to a process that runs
	notReady := waitReadyz(t, ctx, sc, 503, 10*time.Second)
	t.Logf("/readyz 503 %v after SIGSTOP", notReady.Sub(stopAt).Round(time.Millisecond))
	return stopAt
}

// waitReadyz polls /readyz until it answers want, at most d; it returns when.
func waitReadyz(t *testing.T, ctx context.Context, sc *sidecar, want int, d time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		if sc.readyz(ctx) == want {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz did not answer %d within %v", want, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitEvent waits until every consumer of the fleet got event ev (R or W) after since.
func waitEvent(t *testing.T, f *fleet, ev byte, since time.Time, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(max(d, 0))
	for {
		missing := 0
		for _, c := range f.conns {
			events, _, _ := c.snapshot()
			got := false
			for _, e := range events {
				if e.ev == ev && !e.at.Before(since) {
					got = true
				}
			}
			if !got {
				missing++
			}
		}
		if missing == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d consumers did not get %q in time", missing, len(f.conns), ev)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
