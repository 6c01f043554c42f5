package e2e

import (
	"strings"
	"testing"
	"time"
)

// Issue 3, acceptance 1: the provider (its own process) is killed with SIGKILL while
// 1,000 consumer connections send a steady stream through `sidecar run`, and is
// restarted on the same port one second later. No consumer connection closes, every
// request gets exactly one answer (OK, or status 35 for the few in flight at the
// kill), none times out, and the requests sent during the outage are held and
// succeed after the restart.
func TestProviderKilledAndRestarted(t *testing.T) {
	const (
		conns = 1000
		rate  = 1000.0
	)
	prov := startProvider(t, "")
	sc := startSidecar(t, prov.addr, "", 4)
	f := dialFleet(t, sc.listen, conns, false)
	sc.waitMetric(t, 20*time.Second, "stormgate_downstream_connections", func(v float64) bool { return v == conns })

	st := f.startStream(streamConfig{rate: rate, duration: 4 * time.Second, method: "echo", arg: "hello"})
	time.Sleep(time.Until(st.start.Add(time.Second))) // one second of steady traffic first

	killAt := time.Now()
	prov.Kill() // SIGKILL, then reaped: the provider is gone when this returns
	// t0: the sidecar has seen every upstream connection die. Requests sent after
	// this instant cannot have been written to a dead connection: they must be held.
	t0 := sc.waitMetric(t, 5*time.Second, "stormgate_upstream_connections", func(v float64) bool { return v == 0 })

	time.Sleep(time.Until(killAt.Add(time.Second))) // the scenario: restarted 1 s after the kill
	restartAt := time.Now()
	prov2 := startProvider(t, prov.addr)
	provUp := time.Now()
	if prov2.addr != prov.addr {
		t.Fatalf("restarted provider listens on %s, want %s", prov2.addr, prov.addr)
	}
	upAgain := sc.waitMetric(t, 5*time.Second, "stormgate_upstream_connections", func(v float64) bool { return v > 0 })

	calls := st.wait(t, 30*time.Second)
	tl := count(calls)
	t.Logf("%d consumers, %.0f req/s: %v", conns, rate, tl)
	t.Logf("sidecar saw the upstream die %v after SIGKILL; restarted provider listening %v after its start; upstream usable %v after its start",
		t0.Sub(killAt).Round(time.Millisecond), provUp.Sub(restartAt).Round(time.Millisecond), upAgain.Sub(restartAt).Round(time.Millisecond))

	if tl.timeouts != 0 || tl.connErrs != 0 {
		t.Errorf("want no timeouts and no connection errors, got %v (first connection error: %v)", tl, tl.firstConnErr)
	}
	if tl.sent != tl.ok+tl.errors()+tl.timeouts+tl.connErrs || tl.sent < int(rate*3) {
		t.Errorf("accounting: %v (want sent = ok + errors, and at least %d sent)", tl, int(rate*3))
	}
	for status, n := range tl.byStatus {
		if status != 35 {
			t.Errorf("%d responses with status %d; only 35 (CHANNEL_INACTIVE, in flight when the provider died) is expected", n, status)
		}
	}

	var inOutage, afterRestart, failedBeforeKill, failedAfterKill int
	var maxHeld, lastFailed time.Duration
	el := newErrLimit(t, 10, "failed requests")
	for _, c := range calls {
		if !c.ok() {
			if c.sent.Before(killAt) {
				failedBeforeKill++
			} else {
				failedAfterKill++
				lastFailed = max(lastFailed, c.sent.Sub(killAt))
			}
			// Only requests the sidecar may have written to the dying connection may fail,
			// and their error cannot come before the kill.
			if !c.sent.Before(t0) || c.done.Before(killAt) {
				el.Errorf("request %d/%d sent %v after the kill failed (%v, status %d) %v after the kill; "+
					"the sidecar knew the provider was down %v after the kill",
					c.conn, c.id, c.sent.Sub(killAt), c.err, c.resp.Status, c.done.Sub(killAt), t0.Sub(killAt))
			}
			continue
		}
		switch {
		case !c.sent.Before(t0) && c.sent.Before(restartAt):
			inOutage++
			if !c.done.After(restartAt) {
				el.Errorf("request sent during the outage was answered OK %v before the provider restarted", restartAt.Sub(c.done))
			}
			maxHeld = max(maxHeld, c.latency())
		case !c.sent.Before(restartAt):
			afterRestart++
		}
	}
	el.Done()
	// At 1,000 req/s the outage window (detection to restart) is close to one second.
	if want := int(rate * restartAt.Sub(t0).Seconds() / 2); inOutage < want {
		t.Errorf("only %d successful requests were sent during the outage window of %v; want at least %d",
			inOutage, restartAt.Sub(t0).Round(time.Millisecond), want)
	}
	t.Logf("requests sent during the outage: %d, all OK, longest hold %v; sent after the restart: %d OK", inOutage,
		maxHeld.Round(time.Millisecond), afterRestart)
	t.Logf("error responses (status 35): %d sent before the SIGKILL, %d sent after it but before the sidecar saw the close (the last %v after the kill)",
		failedBeforeKill, failedAfterKill, lastFailed.Round(time.Millisecond))

	if n := f.unexpected(); n != 0 {
		t.Errorf("%d responses nobody waited for (duplicates)", n)
	}
	if n, first := f.closedConns(); n != 0 {
		t.Errorf("%d consumer connections closed (first: %v); want 0", n, first)
	}
	f.collectEvents()
	for _, c := range f.conns {
		if ev, _, _ := c.snapshot(); len(ev) != 0 {
			t.Errorf("consumer %d received %d server requests (first % x); with the provider killed (no READONLY) it should see none",
				c.idx, len(ev), ev[0].raw)
			break
		}
	}
	ms, err := sc.scrape()
	if err != nil {
		t.Fatal(err)
	}
	if v := ms.Sum("stormgate_downstream_closed_total"); v != 0 {
		t.Errorf("stormgate_downstream_closed_total = %v, want 0", v)
	}
	if v := ms.Sum("stormgate_downstream_connections"); v != conns {
		t.Errorf("stormgate_downstream_connections = %v, want %d", v, conns)
	}
	if v := ms.Sum("stormgate_hold_outcomes_total", `outcome="expired"`); v != 0 {
		t.Errorf("%v held requests expired; the outage was shorter than hold.timeout", v)
	}
	if v := ms.Sum("stormgate_hold_outcomes_total", `outcome="sent"`); v < float64(inOutage) {
		t.Errorf("stormgate_hold_outcomes_total{outcome=\"sent\"} = %v, want >= %d (the requests of the outage)", v, inOutage)
	}
	if v := ms.Sum("stormgate_held_requests"); v != 0 {
		t.Errorf("stormgate_held_requests = %v after the stream, want 0", v)
	}
}

// Issue 3, acceptance 2: an outage longer than hold.timeout (1 s here): every held
// request gets its error response within hold.timeout + 100 ms of being sent, and
// the consumers stay connected and work again once the provider is back.
func TestHoldTimeoutAnswersWithinBound(t *testing.T) {
	const (
		conns       = 200
		rate        = 200.0
		holdTimeout = time.Second
		slack       = 100 * time.Millisecond
	)
	prov := startProvider(t, "")
	sc := startSidecar(t, prov.addr, "hold:\n  timeout: 1s\n", 4)
	f := dialFleet(t, sc.listen, conns, false)
	sc.waitMetric(t, 20*time.Second, "stormgate_downstream_connections", func(v float64) bool { return v == conns })

	killAt := time.Now()
	prov.Kill()
	t0 := sc.waitMetric(t, 5*time.Second, "stormgate_upstream_connections", func(v float64) bool { return v == 0 })
	t.Logf("sidecar saw the upstream die %v after SIGKILL", t0.Sub(killAt).Round(time.Millisecond))

	// 1.5 s of requests, all into the outage: it lasts until the last one has expired
	// (about 2.5 s), well past hold.timeout.
	st := f.startStream(streamConfig{rate: rate, duration: 1500 * time.Millisecond, method: "echo", arg: "held"})
	calls := st.wait(t, 15*time.Second)
	tl := count(calls)
	var lat []time.Duration
	el := newErrLimit(t, 10, "bad hold expiries")
	for _, c := range calls {
		if c.err != nil || c.resp.Status != 35 {
			continue
		}
		if !strings.Contains(c.resp.Value, "hold.timeout") {
			el.Errorf("hold expiry message %q does not name hold.timeout", c.resp.Value)
		}
		lat = append(lat, c.latency())
		if l := c.latency(); l < holdTimeout || l > holdTimeout+slack {
			el.Errorf("request %d/%d answered after %v; want within [%v, %v]", c.conn, c.id, l, holdTimeout, holdTimeout+slack)
		}
	}
	el.Done()
	t.Logf("%v; hold expiry latency from send: min %v p50 %v p99 %v max %v (bound %v)", tl,
		percentile(lat, 0), percentile(lat, 0.5), percentile(lat, 0.99), percentile(lat, 1), holdTimeout+slack)
	if tl.byStatus[35] != tl.sent || tl.sent < int(rate) {
		t.Errorf("want every request answered with status 35 by the hold queue, got %v", tl)
	}
	if v := sc.metric(t, "stormgate_hold_outcomes_total", `outcome="expired"`); v != float64(tl.sent) {
		t.Errorf("stormgate_hold_outcomes_total{outcome=\"expired\"} = %v, want %d", v, tl.sent)
	}

	// The provider comes back: the same consumers work again.
	startProvider(t, prov.addr)
	sc.waitMetric(t, 10*time.Second, "stormgate_upstream_connections", func(v float64) bool { return v == 4 })
	after := count(f.startStream(streamConfig{rate: rate, duration: 500 * time.Millisecond, method: "echo", arg: "back"}).wait(t, 15*time.Second))
	if after.ok != after.sent || after.sent == 0 {
		t.Errorf("after the provider came back: %v; want all OK", after)
	}
	if n, first := f.closedConns(); n != 0 {
		t.Errorf("%d consumer connections closed (first: %v); want 0", n, first)
	}
	if n := f.unexpected(); n != 0 {
		t.Errorf("%d responses nobody waited for (duplicates)", n)
	}
	if v := sc.metric(t, "stormgate_held_requests"); v != 0 {
		t.Errorf("stormgate_held_requests = %v, want 0", v)
	}
}
