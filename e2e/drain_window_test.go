package e2e

import (
	"context"
	"net/http"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// Issue 14, drain.min_duration: SIGTERM under load, tried as a new user would (the issue
// saw the listener closed 9 ms after READONLY, /readyz never 503, one reset and one error).
// /readyz turns 503 and READONLY reaches every consumer at once; for drain.min_duration the
// listener still accepts and requests are still served (a consumer connecting inside the
// window gets READONLY and an answer); then the sidecar stops accepting, finishes what is
// in flight and exits 0. Consumers that honour READONLY (stormbench load --honor-readonly
// --leave-on-readonly, as a Dubbo consumer whose registry drops the provider) see 0 errors,
// 0 resets, 0 timeouts and no lost request or heartbeat.
func TestSIGTERMDrainWindowUnderLoad(t *testing.T) {
	const (
		conns  = 300
		rate   = 300
		window = 2 * time.Second
	)
	prov := startProvider(t, "")
	sc := startSidecar(t, prov.addr, "drain:\n  min_duration: 2s\n  timeout: 5s\n", 4)
	load := startLoad(t, nil, "--target", sc.listen, "--conns", strconv.Itoa(conns), "--rate", strconv.Itoa(rate),
		"--duration", "6s", "--heartbeat", "500ms", "--timeout", "3s", "--honor-readonly", "--leave-on-readonly")
	sc.waitMetric(t, 20*time.Second, "stormgate_downstream_connections", func(v float64) bool { return v == conns })
	sc.waitMetric(t, 20*time.Second, "stormgate_requests_total", func(v float64) bool { return v >= rate })

	sigAt := time.Now()
	if err := sc.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var notReady time.Duration
	if !poll(5*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		code := sc.readyz(ctx)
		notReady = time.Since(sigAt)
		return code == http.StatusServiceUnavailable
	}) {
		t.Fatal("/readyz did not answer 503 after SIGTERM")
	}
	if notReady > 500*time.Millisecond {
		t.Errorf("/readyz answered 503 %v after SIGTERM; want at once", notReady)
	}
	// Inside the window: a new consumer is accepted, told READONLY, and served.
	late := dialFleet(t, sc.listen, 1, true).conns[0]
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	resp, err := late.c.Call(ctx, 1, service, "echo", "inside the window")
	cancel()
	if err != nil || resp.Status != 20 || resp.Value != "inside the window" {
		t.Errorf("a request inside drain.min_duration: status %d value %q err %v; want it served", resp.Status, resp.Value, err)
	}
	if !poll(2*time.Second, func() bool { ev, ro, _ := late.snapshot(); return ro && len(ev) > 0 }) {
		t.Errorf("a consumer connecting inside the window did not get READONLY")
	}
	late.c.Close()

	code := sc.wait(t, window+10*time.Second)
	exitAfter := time.Since(sigAt)
	if code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
	if exitAfter < window {
		t.Errorf("exited %v after SIGTERM, before drain.min_duration %v", exitAfter, window)
	}
	res := load.result(t, 30*time.Second)
	t.Logf("readyz 503 after %v; exit 0 after %v (min_duration %v); load: sent %d ok %d unsent %d errors %d timeouts %d lost %d resets %d closed by peer %d; heartbeats sent %d answered %d lost %d; READONLY %d",
		notReady.Round(time.Millisecond), exitAfter.Round(time.Millisecond), window, res.Sent, res.OK, res.Unsent, res.Errors,
		res.Timeouts, res.Lost, res.Resets, res.ClosedByPeer, res.HeartbeatsSent, res.HeartbeatsAnswered, res.HeartbeatsLost,
		res.EventsReadonly)
	if res.EventsReadonly < conns {
		t.Errorf("%d READONLY events for %d consumers", res.EventsReadonly, conns)
	}
	if res.Errors+res.Timeouts+res.Lost+res.Resets+res.OtherConnErrors+res.HeartbeatsTimedOut+res.HeartbeatsLost != 0 {
		t.Errorf("consumers honouring READONLY saw errors %d (%v), timeouts %d, lost %d, resets %d, other connection errors %d, heartbeats timed out %d, lost %d; want all 0",
			res.Errors, res.ErrorByStatus, res.Timeouts, res.Lost, res.Resets, res.OtherConnErrors, res.HeartbeatsTimedOut, res.HeartbeatsLost)
	}
	if res.OK < rate || res.OK != res.Sent {
		t.Errorf("sent %d, ok %d: want every request sent answered OK", res.Sent, res.OK)
	}
}
