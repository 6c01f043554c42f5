package e2e

import (
	"syscall"
	"testing"
	"time"
)

// gracefulRestart stops the provider the way Java Dubbo does (SIGTERM to `stormbench
// provider --readonly-on-sigterm`: READONLY on every connection, in-flight requests
// finish, then it closes), waits for it to exit 0, and starts a new one on the same
// address. It returns when the new provider listens.
func gracefulRestart(t *testing.T, prov *provider) (sigAt, exitedAt time.Time, next *provider) {
	t.Helper()
	sigAt = time.Now()
	if err := prov.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := prov.wait(t, 15*time.Second); code != 0 {
		t.Fatalf("provider exited with %d after SIGTERM, want 0", code)
	}
	exitedAt = time.Now()
	next = startProvider(t, prov.addr, "--readonly-on-sigterm")
	return sigAt, exitedAt, next
}

// Issue 3, acceptance 3 (policy HOLD, the default): the provider announces READONLY,
// finishes its in-flight work and closes, and is restarted within hold.timeout. No
// request fails, and the consumers never hear of it.
func TestProviderReadonlyHold(t *testing.T) {
	const (
		conns = 300
		rate  = 500.0
	)
	prov := startProvider(t, "", "--readonly-on-sigterm")
	sc := startSidecar(t, prov.addr, "drain:\n  readonly_policy: HOLD\n", 4)
	f := dialFleet(t, sc.listen, conns, false)
	sc.waitMetric(t, 20*time.Second, "stormgate_downstream_connections", func(v float64) bool { return v == conns })

	// 200 ms per request keeps work in flight at the provider when READONLY goes out.
	st := f.startStream(streamConfig{rate: rate, duration: 3 * time.Second, method: "sleep", arg: "200ms"})
	time.Sleep(time.Until(st.start.Add(time.Second)))
	sigAt, exitedAt, _ := gracefulRestart(t, prov)
	upAt := sc.waitMetric(t, 5*time.Second, "stormgate_upstream_connections", func(v float64) bool { return v > 0 })
	calls := st.wait(t, 30*time.Second)
	tl := count(calls)

	var held []time.Duration
	for _, c := range calls {
		if c.sent.After(sigAt) && c.sent.Before(upAt) {
			held = append(held, c.latency())
		}
	}
	t.Logf("%v; provider exited %v after SIGTERM, upstream usable again %v after SIGTERM; requests sent in between: %d, latency p50 %v max %v",
		tl, exitedAt.Sub(sigAt).Round(time.Millisecond), upAt.Sub(sigAt).Round(time.Millisecond), len(held),
		percentile(held, 0.5).Round(time.Millisecond), percentile(held, 1).Round(time.Millisecond))
	if tl.ok != tl.sent || tl.sent < int(rate*2) {
		t.Errorf("want every request OK with readonly_policy HOLD, got %v (first connection error: %v)", tl, tl.firstConnErr)
	}
	if n := f.unexpected(); n != 0 {
		t.Errorf("%d responses nobody waited for (duplicates)", n)
	}
	if n, first := f.closedConns(); n != 0 {
		t.Errorf("%d consumer connections closed (first: %v); want 0", n, first)
	}
	f.collectEvents()
	for _, c := range f.conns {
		if ev, _, _ := c.snapshot(); len(ev) != 0 {
			t.Errorf("consumer %d received % x; with readonly_policy HOLD consumers must not see the provider's READONLY", c.idx, ev[0].raw)
			break
		}
	}
	ms, err := sc.scrape()
	if err != nil {
		t.Fatal(err)
	}
	// The scenario really went through READONLY (not a plain close): all 4 connections got it.
	if v := ms.Sum("stormgate_readonly_events_total", `event="readonly"`, `direction="received"`); v != 4 {
		t.Errorf("stormgate_readonly_events_total{readonly,received} = %v, want 4", v)
	}
	if v := ms.Sum("stormgate_hold_outcomes_total", `outcome="sent"`); v == 0 || int(v) < len(held)/2 {
		t.Errorf("stormgate_hold_outcomes_total{sent} = %v: requests of the READONLY window were not held (%d sent then)", v, len(held))
	}
	if v := ms.Sum("stormgate_local_replies_total"); v != 0 {
		t.Errorf("stormgate_local_replies_total = %v, want 0", v)
	}
}

// Issue 3, acceptance 3 (policy PROPAGATE): when the provider announces READONLY, every
// consumer receives a READONLY frame byte-identical to Dubbo's
// (da bb a2 00 <id:8> 00 00 00 02 01 52), and WRITEABLE when the provider is back.
func TestProviderReadonlyPropagate(t *testing.T) {
	const conns = 300
	prov := startProvider(t, "", "--readonly-on-sigterm")
	sc := startSidecar(t, prov.addr, "drain:\n  readonly_policy: PROPAGATE\n", 4)
	f := dialFleet(t, sc.listen, conns, true)
	sc.waitMetric(t, 20*time.Second, "stormgate_downstream_connections", func(v float64) bool { return v == conns })

	// A little traffic that honours READONLY, as Dubbo consumers do.
	st := f.startStream(streamConfig{rate: 200, duration: 2 * time.Second, method: "sleep", arg: "100ms", honorReadonly: true})
	time.Sleep(time.Until(st.start.Add(500 * time.Millisecond)))
	sigAt := time.Now()
	if err := prov.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	allReadonly := func() bool {
		for _, c := range f.conns {
			if _, ro, _ := c.snapshot(); !ro {
				return false
			}
		}
		return true
	}
	if !poll(10*time.Second, allReadonly) {
		n := 0
		for _, c := range f.conns {
			if _, ro, _ := c.snapshot(); ro {
				n++
			}
		}
		t.Fatalf("%d of %d consumers received READONLY within 10s of the provider's SIGTERM", n, conns)
	}
	roAt := time.Now()
	if code := prov.wait(t, 15*time.Second); code != 0 {
		t.Fatalf("provider exited with %d after SIGTERM, want 0", code)
	}
	// A consumer that connects while the provider is away is told at once.
	late := dialFleet(t, sc.listen, 1, true)
	if !poll(5*time.Second, func() bool { _, ro, _ := late.conns[0].snapshot(); return ro }) {
		t.Errorf("a consumer that connected while READONLY was in effect did not receive READONLY")
	}
	startProvider(t, prov.addr, "--readonly-on-sigterm")
	allWriteable := func() bool {
		for _, c := range f.conns {
			if _, ro, _ := c.snapshot(); ro {
				return false
			}
		}
		return true
	}
	if !poll(10*time.Second, allWriteable) {
		t.Fatalf("consumers did not all receive WRITEABLE within 10s of the provider's restart")
	}
	calls := st.wait(t, 30*time.Second)
	tl := count(calls)
	t.Logf("every consumer had READONLY %v after the provider's SIGTERM; traffic (honouring READONLY): %v, unsent while all were readonly: %d",
		roAt.Sub(sigAt).Round(time.Millisecond), tl, st.unsent)

	el := newErrLimit(t, 10, "consumers with wrong events")
	for _, c := range f.conns {
		ev, _, _ := c.snapshot()
		var ro, wr int
		for _, e := range ev {
			switch {
			case isEventFrame(e.raw, 'R'):
				ro++
			case isEventFrame(e.raw, 'W'):
				wr++
			default:
				el.Errorf("consumer %d: unexpected frame % x", c.idx, e.raw)
			}
		}
		if ro != 1 || wr != 1 || len(ev) != 2 || !isEventFrame(ev[0].raw, 'R') {
			el.Errorf("consumer %d: got %d READONLY and %d WRITEABLE frames (in order: %v); want exactly READONLY then WRITEABLE",
				c.idx, ro, wr, evKinds(ev))
		}
	}
	el.Done()
	if tl.sent != tl.ok {
		t.Errorf("requests: %v; want all OK", tl)
	}
	if n, first := f.closedConns(); n != 0 {
		t.Errorf("%d consumer connections closed (first: %v); want 0", n, first)
	}
	// The broadcast reached every consumer; the late one was told on connect.
	if v := sc.metric(t, "stormgate_readonly_events_total", `event="readonly"`, `direction="sent"`); v != conns {
		t.Errorf("stormgate_readonly_events_total{readonly,sent} = %v, want %d", v, conns)
	}
}

func evKinds(ev []event) string {
	b := make([]byte, 0, len(ev))
	for _, e := range ev {
		if e.ev == 0 {
			b = append(b, '?')
		} else {
			b = append(b, e.ev)
		}
	}
	return string(b)
}
