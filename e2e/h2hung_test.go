package e2e

import (
	"context"
	"syscall"
	"testing"
	"time"
)

// TestH2HungProviderNotReady is TestHungProviderNotReady for Triple (docs/design.md §3,
// proxy/triple/hung.go): a `stormbench echo-provider --protocol triple` process under 200 calls/s from 50 h2c
// consumers (1 s timeouts, PINGs after 1 s idle, which Stormgate answers itself) is stopped with SIGSTOP
// for 12 s. /readyz answers 503 within 10 s of the stop, with stormgate_upstream_hung 1 and the hung
// connections counted under protocol="triple"; after SIGCONT it answers 200 within 10 s, and the load's
// last 8 s is served. No call runs twice at the provider, and no answer is another call's.
func TestH2HungProviderNotReady(t *testing.T) {
	prov := startEchoProvider(t, "triple")
	sc := startSidecar(t, prov.addr, "upstream: { protocol: triple }\n", 4)
	load := startLoad(t, nil, "--protocol", "triple", "--target", sc.listen, "--conns", "50", "--rate", "200",
		"--duration", "24s", "--timeout", "1s", "--heartbeat", "1s", "--body-min", "64", "--body-max", "1024", "--quiet")
	time.Sleep(3 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stopAt := sigstopProvider(t, ctx, sc, prov)
	if v := sc.metric(t, "stormgate_upstream_hung"); v != 1 {
		t.Errorf("stormgate_upstream_hung %v while stopped, want 1", v)
	}
	if v := sc.metric(t, "stormgate_upstream_connection_state", `state="hung"`, `protocol="triple"`); v < 1 {
		t.Errorf("hung Triple provider connections %v while stopped, want at least 1", v)
	}

	time.Sleep(time.Until(stopAt.Add(12 * time.Second)))
	contAt := time.Now()
	if err := prov.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	ready := waitReadyz(t, ctx, sc, 200, 10*time.Second)
	t.Logf("/readyz 200 %v after SIGCONT", ready.Sub(contAt).Round(time.Millisecond))

	res := load.result(t, 60*time.Second)
	t.Logf("load: sent %d ok %d timeouts %d errors %v lost %d; PINGs sent %d answered %d", res.Sent, res.OK,
		res.Timeouts, res.ErrorByStatus, res.Lost, res.HeartbeatsSent, res.HeartbeatsAnswered)
	// 3 s before the stop and about 8 s after the provider is back, at 200 calls/s: at least 2,000 answered.
	// The calls of the stop time out at their consumers (those sent before the hang was seen) or get
	// DEADLINE_EXCEEDED from Stormgate (held since: never sent).
	if res.OK < 2000 || res.BodyMismatches != 0 || res.ProtocolErrors != 0 {
		t.Errorf("%d calls answered, %d answers not their call's own, %d protocol errors; want at least 2,000, 0, 0",
			res.OK, res.BodyMismatches, res.ProtocolErrors)
	}
	if v := sc.metric(t, "stormgate_provider_hangs_total"); v != 1 {
		t.Errorf("stormgate_provider_hangs_total %v, want 1", v)
	}
	final := prov.stop(t)
	if st := final.Triple; st == nil || st.UniqueKeys != st.Checked {
		t.Errorf("provider: %+v; want every checked call run once", st)
	}
	for _, v := range final.Violations {
		t.Errorf("provider: %v", v)
	}
}
