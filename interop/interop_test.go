package interop

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stormgate/stormgate/interop/internal/sockets"
)

// gettyConns is how many connections a dubbo-go v3.3.0 consumer opens to one provider (getty ConnectionNum).
const gettyConns = 16

// upstreamConns is Stormgate's --upstream-conns in every scenario.
const upstreamConns = 4

// onceCalls is how many requests `dgconsumer once` sends: Echo, Fail, Big, Sleep and 200 concurrent Echo.
const onceCalls = 204

// TestInterop runs the scenarios. The two 16-connection scenarios spend about 32 s waiting for dubbo-go's
// getty client to open its connections, so they run in parallel with each other and with the restart group;
// the restarts run one after the other.
func TestInterop(t *testing.T) {
	t.Run("direct", func(t *testing.T) { t.Parallel(); testDirect(t) })
	t.Run("stormgate", func(t *testing.T) { t.Parallel(); testThroughStormgate(t) })
	t.Run("group_version_labels", func(t *testing.T) { t.Parallel(); testGroupVersionLabels(t) })
	t.Run("restart", func(t *testing.T) {
		t.Parallel()
		t.Run("between_calls", testRestartBetweenCalls)
		t.Run("under_load", testRestartUnderLoad)
		t.Run("startup_window", testRestartStartupWindow)
		t.Run("graceful_x3", testGracefulRestarts)
		t.Run("sigkill_x3", testKillRestarts)
		t.Run("sigkill_under_load", testKillRestartsUnderLoad)
		t.Run("deadlines_across_a_kill", testDeadlinesAcrossKill)
	})
}

// minConns is what the once scenarios wait for: all 16 getty connections, or none with -short.
func minConns() int {
	if testing.Short() {
		return 0
	}
	return gettyConns
}

// runOnce starts `dgconsumer once --hold` against addr, waits for its summary and checks every step passed.
// The consumer keeps its connections open until closeOnce.
func runOnce(t *testing.T, addr string) (*proc, onceSummary) {
	t.Helper()
	c := startProc(t, "dgconsumer", bins.consumer, "--addr", addr, "once",
		"--min-conns", strconv.Itoa(minConns()), "--min-conns-timeout", "60s", "--hold")
	var s onceSummary
	line := readSummary(t, c, 90*time.Second, &s)
	t.Logf("consumer: %s", line)
	if !s.OK {
		t.Errorf("dgconsumer once failed: %s", line)
	}
	want := map[string]bool{"echo": true, "business_error": true, "big_50KB": true, "sleep_100ms": true, "concurrent_200": true}
	for _, ch := range s.Checks {
		if !ch.OK {
			t.Errorf("check %s failed: %s", ch.Name, ch.Detail)
		}
		delete(want, ch.Name)
	}
	if len(want) > 0 {
		t.Errorf("checks missing from the summary: %v", want)
	}
	return c, s
}

// connsWaited describes the consumer's wait for its connections.
func connsWaited(s onceSummary) string {
	if s.Conns == 0 {
		return "-short: no wait for all 16"
	}
	return fmt.Sprintf("the consumer reached %d after %s", s.Conns, s.ConnsWait)
}

func closeOnce(t *testing.T, c *proc) {
	t.Helper()
	closeStdinAndWait(t, c)
	if code := c.ExitCode(); code != 0 {
		t.Errorf("dgconsumer once exited %d", code)
	}
}

func countLocalPort(t *testing.T, port int) int {
	t.Helper()
	n, err := sockets.CountLocalPort(uint16(port))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Sanity check of the peers themselves: consumer -> provider, no Stormgate. Every consumer connection is a
// provider connection.
func testDirect(t *testing.T) {
	prov := startProvider(t, 0)
	c, s := runOnce(t, fmt.Sprintf("127.0.0.1:%d", prov.port))
	atProvider := countLocalPort(t, prov.port)
	t.Logf("direct: the provider holds %d connections from the consumer (%s)", atProvider, connsWaited(s))
	if want := minConns(); want > 0 && atProvider != want {
		t.Errorf("provider holds %d connections from the consumer, want %d (one per getty connection)", atProvider, want)
	}
	closeOnce(t, c)
}

// Issue 2, acceptance 4: a normal call, a business error, a 50 KB argument and 200 concurrent calls succeed
// through Stormgate, and the consumer's 16 connections reach the provider as 4 upstream connections.
func testThroughStormgate(t *testing.T) {
	prov := startProvider(t, 0)
	sc := startSidecar(t, prov.port)
	before := sc.scrape(t)

	c, s := runOnce(t, sc.listen)
	// The consumer holds its connections open (--hold): count both sides now.
	atSidecar := countLocalPort(t, sc.listenPort)
	atProvider := countLocalPort(t, prov.port)
	after := sc.scrape(t)
	t.Logf("consumer -> stormgate: %d connections (%s); stormgate -> provider: %d", atSidecar, connsWaited(s), atProvider)
	if want := minConns(); want > 0 && atSidecar != want {
		t.Errorf("%d consumer connections terminate at Stormgate, want %d", atSidecar, want)
	}
	if atSidecar < 1 || atSidecar > gettyConns {
		t.Errorf("%d consumer connections at Stormgate, want 1..%d", atSidecar, gettyConns)
	}
	if atProvider != upstreamConns {
		t.Errorf("the provider holds %d established connections, want exactly %d (--upstream-conns)", atProvider, upstreamConns)
	}

	if v := after.sum("stormgate_upstream_connections"); v != upstreamConns {
		t.Errorf("stormgate_upstream_connections = %v, want %d", v, upstreamConns)
	}
	if v := after.sum("stormgate_downstream_connections"); int(v) != atSidecar {
		t.Errorf("stormgate_downstream_connections = %v, want %d (the kernel's count)", v, atSidecar)
	}
	reqs := after.sum("stormgate_requests_total") - before.sum("stormgate_requests_total")
	resps := after.sum("stormgate_responses_total") - before.sum("stormgate_responses_total")
	if reqs < onceCalls {
		t.Errorf("stormgate_requests_total grew by %v, want at least %d", reqs, onceCalls)
	}
	if resps < onceCalls {
		t.Errorf("stormgate_responses_total grew by %v, want at least %d", resps, onceCalls)
	}
	if v := after.sum("stormgate_local_replies_total"); v != 0 {
		t.Errorf("Stormgate answered %v requests itself (%s), want 0", v, after.filter("stormgate_local_replies_total"))
	}
	t.Logf("metrics: requests +%v, responses +%v, heartbeats answered %s, upstream heartbeats sent %v, downstream closed %s",
		reqs, resps, after.filter("stormgate_heartbeats_answered_total"),
		after.sum("stormgate_upstream_heartbeats_sent_total"), after.filter("stormgate_downstream_closed_total"))
	checkMethodLabels(t, after, "org.stormgate.Greeter")
	closeOnce(t, c)
}

// checkMethodLabels (issue 25, acceptance 1): the per-method series of a `dgconsumer once` run, as the real
// dubbo-go consumer writes its requests: Echo 201 times, Big and Sleep once, all OK; Fail once, OK with a
// business exception; nothing unknown. service is Dubbo's service key (group/interface:version).
func checkMethodLabels(t *testing.T, m metrics, service string) {
	t.Helper()
	req := func(method, status string) float64 {
		return m[`stormgate_method_requests_total{method="`+method+`",service="`+service+`",status="`+status+`"}`]
	}
	for method, want := range map[string]float64{"Echo": 1 + 200, "Big": 1, "Sleep": 1, "Fail": 1} {
		if got := req(method, "OK"); got != want {
			t.Errorf("stormgate_method_requests_total{service=%q,method=%q,status=OK} = %v, want %v", service, method, got, want)
		}
	}
	if got := m[`stormgate_method_exceptions_total{method="Fail",service="`+service+`"}`]; got != 1 {
		t.Errorf("business exceptions of Fail = %v, want 1", got)
	}
	for series, v := range m {
		if strings.HasPrefix(series, `stormgate_method_requests_total{method="unknown",`) && v != 0 {
			t.Errorf("%s = %v, want 0", series, v)
		}
	}
	t.Logf("per method: %s", m.filter("stormgate_method_requests_total"))
}

// Issue 25: a consumer and provider in a Dubbo group, with a service version: the group comes from the
// request's attachments, the version from its body, and both name the service in the labels.
func testGroupVersionLabels(t *testing.T) {
	prov := startProvider(t, 0, "--group", "canary", "--version", "2.1.0")
	sc := startSidecar(t, prov.port)
	c := startProc(t, "dgconsumer", bins.consumer, "--addr", sc.listen, "--group", "canary", "--version", "2.1.0", "once")
	var s onceSummary
	line := readSummary(t, c, 90*time.Second, &s)
	if !s.OK {
		t.Fatalf("dgconsumer once with a group and version failed: %s", line)
	}
	checkMethodLabels(t, sc.scrape(t), "canary/org.stormgate.Greeter:2.1.0")
}

// connWatch records every connection accepted on a port during a scenario (polling every 50 ms until
// stopped) and, at the end, reports any that is no longer established: a consumer connection that closed. Its
// verdict compares sets of connections, not counts, so a poll that misses a line (see package sockets) cannot
// fake a close. Stormgate's stormgate_downstream_closed_total is the other, exact, check.
type connWatch struct {
	port int
	stop chan struct{}
	wg   sync.WaitGroup
	seen map[sockets.Key]time.Time // first seen
	err  error
}

func watchConns(port int) *connWatch {
	w := &connWatch{port: port, stop: make(chan struct{}), seen: map[sockets.Key]time.Time{}}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		tk := time.NewTicker(50 * time.Millisecond)
		defer tk.Stop()
		for {
			set, err := sockets.Accepted(uint16(port), 1)
			if err != nil {
				w.err = err
				return
			}
			now := time.Now()
			for k := range set {
				if _, ok := w.seen[k]; !ok {
					w.seen[k] = now
				}
			}
			select {
			case <-w.stop:
				return
			case <-tk.C:
			}
		}
	}()
	return w
}

// finish stops watching and checks every connection seen is still established.
func (w *connWatch) finish(t *testing.T) {
	t.Helper()
	close(w.stop)
	w.wg.Wait()
	if w.err != nil {
		t.Fatal(w.err)
	}
	now, err := sockets.Accepted(uint16(w.port), 3)
	if err != nil {
		t.Fatal(err)
	}
	var closed []string
	for k, first := range w.seen {
		if _, ok := now[k]; !ok {
			closed = append(closed, fmt.Sprintf("%s (first seen %s)", k.Remote, first.Format("15:04:05.000")))
		}
	}
	if len(closed) > 0 {
		t.Errorf("%d of %d consumer connections seen at Stormgate closed during the scenario: %v", len(closed), len(w.seen), closed)
		return
	}
	t.Logf("consumer connections at Stormgate: %d seen during the scenario, all still established", len(w.seen))
}

// restartDelay is how long a killed provider stays down before it is started again; its startup (0.2-1 s)
// comes on top. The whole outage stays under Stormgate's 3 s hold timeout and the consumer's 5 s timeout.
const restartDelay = 700 * time.Millisecond

// Issue 3, acceptance 5: the provider is killed (SIGKILL) and restarted on the same port while a dubbo-go
// consumer calls Echo through Stormgate in a loop; the consumer sees no error and no timeout, no consumer
// connection closes, and the calls made during the outage are held and succeed after the restart.
//
// One caller with 200 ms between calls, and the kill lands in such a gap: a request the provider may already
// have when it dies must get an error by design (Stormgate never retries it; see under_load), so this scenario
// keeps that case out to test the hold queue alone.
func testRestartBetweenCalls(t *testing.T) {
	restartBetweenCalls(t, restartDelay, nil, "--metadata-service", *restartMetadata)
}

// A dubbo-go v3.3.0 provider started with the new API exports its MetadataService on the dubbo port before the
// business services, so for a moment after the port opens it answers every Greeter request with "don't have
// this exporter" (status 20 with an exception: the provider did not run it). The window is ~1-60 ms in
// practice; --export-delay 1s widens it to make the case certain. Stormgate re-holds those answers (issue 11);
// a 1 s window needs more than the default 3 retries (pauses 50, 100, 200 ms: enough for 60 ms), so the sidecar
// runs with hold.not_executed_retries 5 (pauses up to 1.55 s in all). No call fails, and the metrics show the
// answers were seen and re-held.
func testRestartStartupWindow(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "stormgate.yaml")
	if err := os.WriteFile(cfg, []byte("hold:\n  not_executed_retries: 5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sc := restartBetweenCalls(t, 0, []string{"--config", cfg}, "--metadata-service", "same-port", "--export-delay", "1s")
	m := sc.scrape(t)
	t.Logf("not-executed answers: %s", m.filter("stormgate_not_executed_answers_total"))
	if n := m.sum(`stormgate_not_executed_answers_total{outcome="reheld",reason="dubbogo_no_exporter"}`); n == 0 {
		t.Error("no \"don't have this exporter\" answer was re-held: the scenario missed the startup window")
	}
}

// restartBetweenCalls runs the between-calls restart with the provider started with provArgs, down for delay
// before its restart, and the sidecar with sidecarArgs; it returns the sidecar, still running.
func restartBetweenCalls(t *testing.T, delay time.Duration, sidecarArgs []string, provArgs ...string) *sidecar {
	const (
		interval  = 200 * time.Millisecond
		duration  = 8 * time.Second
		killAfter = 2 * time.Second
	)
	prov := startProvider(t, 0, provArgs...)
	sc := startSidecar(t, prov.port, sidecarArgs...)
	before := sc.scrape(t)
	c := startProc(t, "dgconsumer", bins.consumer, "--addr", sc.listen, "--timeout", "5s",
		"loop", "--duration", duration.String(), "--interval", interval.String(), "--workers", "1", "--ticks", "--hold")
	started := time.Now()
	watch := watchConns(sc.listenPort)

	var (
		ticks   []tick
		summary string // the consumer's JSON line, once read
	)
	next := func() (tick, bool) {
		l, err := c.waitLine(duration+30*time.Second, func(l string) bool { return strings.HasPrefix(l, "TICK ") || isJSON(l) })
		if err != nil {
			t.Fatal(err)
		}
		tk, ok := parseTick(l)
		if ok {
			ticks = append(ticks, tk)
		} else {
			summary = l
		}
		return tk, ok
	}

	// Kill right after a call returned, while the caller sleeps its interval.
	var killAt, diedAt time.Time
	for killAt.IsZero() {
		tk, ok := next()
		if !ok {
			t.Fatal("consumer finished before the kill")
		}
		if tk.start.Sub(started) >= killAfter && time.Since(tk.end) < 20*time.Millisecond {
			killAt = time.Now()
			prov.Kill()
			diedAt = time.Now() // reaped: its sockets are closed
		}
	}
	time.Sleep(delay) // the scenario: the provider stays down a while
	prov2 := startProvider(t, prov.port, provArgs...)
	readyAt := time.Now()
	outage := readyAt.Sub(killAt)
	t.Logf("provider killed %v after the consumer started, reaped %v later; restarted provider READY %v after the kill",
		killAt.Sub(started).Round(time.Millisecond), diedAt.Sub(killAt).Round(time.Millisecond), outage.Round(time.Millisecond))

	// Once a call that started after the restart has succeeded, no consumer connection may have closed.
	for {
		tk, ok := next()
		if !ok {
			t.Fatal("consumer finished before a call succeeded after the restart")
		}
		if tk.start.After(readyAt) && tk.ok {
			break
		}
	}
	checkNoneClosed(t, sc, before)
	sc.waitMetric(t, 10*time.Second, "stormgate_upstream_connections", func(v float64) bool { return v == upstreamConns })
	if n := countLocalPort(t, prov2.port); n != upstreamConns {
		t.Errorf("restarted provider holds %d connections, want %d", n, upstreamConns)
	}

	for {
		if _, ok := next(); !ok {
			break // the JSON summary
		}
	}
	watch.finish(t) // the consumer holds its connections until stdin closes
	checkNoneClosed(t, sc, before)
	closeStdinAndWait(t, c)
	var s loopSummary
	if err := json.Unmarshal([]byte(summary), &s); err != nil {
		t.Fatalf("consumer summary %q: %v", summary, err)
	}
	after := sc.scrape(t)
	t.Logf("consumer: %s", summary)
	t.Logf("metrics: hold outcomes %s, local replies %s, reconnects %v",
		after.filter("stormgate_hold_outcomes_total"), after.filter("stormgate_local_replies_total"),
		after.sum("stormgate_upstream_reconnects_total"))

	var caught, held int
	var heldLatency time.Duration
	for _, tk := range ticks {
		if tk.start.Before(diedAt) && tk.end.After(killAt) {
			caught++
			if !tk.ok {
				t.Errorf("call %d (sent %v after the SIGKILL, which took %v to close the provider's sockets) failed: "+
					"the kill missed the gap between calls (a slow machine?); a call the provider may have "+
					"received failing is by design", tk.n, tk.start.Sub(killAt), diedAt.Sub(killAt))
			}
		}
		if !tk.start.Before(diedAt) && tk.start.Before(readyAt) && tk.ok {
			held++
			heldLatency = max(heldLatency, tk.end.Sub(tk.start))
		}
	}
	t.Logf("calls caught by the kill: %d; calls made during the outage that succeeded after the restart: %d (longest %v)",
		caught, held, heldLatency.Round(time.Millisecond))
	if held == 0 {
		t.Errorf("no call was made during the outage (kill -> READY %v): the scenario did not test the hold queue", outage)
	}
	if s.Errors != 0 || s.Timeouts != 0 || s.Mismatches != 0 || s.OK != s.Sent {
		t.Errorf("consumer saw errors=%d timeouts=%d mismatches=%d (ok %d of %d): %+v",
			s.Errors, s.Timeouts, s.Mismatches, s.OK, s.Sent, s.Failures)
	}
	if min := int(duration / interval / 2); s.Sent < min {
		t.Errorf("only %d calls in %v, want at least %d", s.Sent, duration, min)
	}
	return sc
}

// checkNoneClosed fails the test if Stormgate closed (or saw close) any consumer connection since before.
func checkNoneClosed(t *testing.T, sc *sidecar, before metrics) {
	t.Helper()
	now := sc.scrape(t)
	if v := now.sum("stormgate_downstream_closed_total") - before.sum("stormgate_downstream_closed_total"); v != 0 {
		t.Errorf("%v consumer connections closed during the restart (stormgate_downstream_closed_total %s)",
			v, now.filter("stormgate_downstream_closed_total"))
	}
}

// closeStdinAndWait releases a consumer started with --hold and waits for it to exit.
func closeStdinAndWait(t *testing.T, c *proc) {
	t.Helper()
	c.Stdin.Close()
	c.wait(t, 10*time.Second)
}

// The same restart under load (8 callers, 5 ms apart, about 1,000 calls/s), killed at an arbitrary instant.
// Requests Stormgate had written to the provider when it died, or wrote to a connection before it noticed the
// connection was gone, get exactly one error each: Stormgate's local reply for a lost upstream connection
// (never a retry: the provider may have run them). A caller can meet that at most once per upstream connection,
// so at most 8 x 4 errors, all at the kill. Everything else succeeds, nothing times out, no consumer
// connection closes.
func testRestartUnderLoad(t *testing.T) {
	const (
		workers   = 8
		duration  = 8 * time.Second
		killAfter = 2500 * time.Millisecond
	)
	prov := startProvider(t, 0, "--metadata-service", *restartMetadata)
	sc := startSidecar(t, prov.port)
	before := sc.scrape(t)
	c := startProc(t, "dgconsumer", bins.consumer, "--addr", sc.listen, "--timeout", "5s",
		"loop", "--duration", duration.String(), "--interval", "5ms", "--workers", strconv.Itoa(workers), "--hold")
	started := time.Now()
	watch := watchConns(sc.listenPort)

	time.Sleep(time.Until(started.Add(killAfter))) // the scenario: steady traffic first
	killAt := time.Now()
	prov.Kill()
	time.Sleep(restartDelay)
	startProvider(t, prov.port, "--metadata-service", *restartMetadata)
	outage := time.Since(killAt)
	reqsAtReady := sc.scrape(t).sum("stormgate_responses_total")
	sc.waitMetric(t, 10*time.Second, "stormgate_responses_total", func(v float64) bool { return v > reqsAtReady+100 })
	checkNoneClosed(t, sc, before)

	var s loopSummary
	line := readSummary(t, c, duration+30*time.Second, &s)
	watch.finish(t) // the consumer holds its connections until stdin closes
	checkNoneClosed(t, sc, before)
	closeStdinAndWait(t, c)
	after := sc.scrape(t)
	local := after.sum("stormgate_local_replies_total") - before.sum("stormgate_local_replies_total")
	lost := after.sum(`stormgate_local_replies_total{reason="upstream_lost"}`) -
		before.sum(`stormgate_local_replies_total{reason="upstream_lost"}`)
	t.Logf("restarted provider READY %v after the kill", outage.Round(time.Millisecond))
	t.Logf("consumer: %s", line)
	t.Logf("metrics: local replies %s, hold outcomes %s", after.filter("stormgate_local_replies_total"),
		after.filter("stormgate_hold_outcomes_total"))

	if s.Timeouts != 0 || s.Mismatches != 0 {
		t.Errorf("consumer saw timeouts=%d mismatches=%d: %+v", s.Timeouts, s.Mismatches, s.Failures)
	}
	if s.Errors > workers*upstreamConns {
		t.Errorf("consumer saw %d errors, want at most %d (one per caller per upstream connection at the kill): %+v",
			s.Errors, workers*upstreamConns, s.Failures)
	}
	var first, last time.Duration
	for i, f := range s.Failures {
		at, err := time.ParseDuration(f.At)
		if err != nil {
			t.Fatalf("failure offset %q: %v", f.At, err)
		}
		if i == 0 || at < first {
			first = at
		}
		last = max(last, at)
	}
	if last-first > 500*time.Millisecond {
		t.Errorf("errors spread over %v (%v..%v after the consumer started): only requests caught by the kill may fail: %+v",
			last-first, first, last, s.Failures)
	}
	if float64(s.Errors) != local || local != lost {
		t.Errorf("consumer errors %d, Stormgate local replies %v of which upstream_lost %v: want all three equal",
			s.Errors, local, lost)
	}
	if s.OK+s.Errors != s.Sent || s.Sent < 1000 {
		t.Errorf("accounting: sent %d = ok %d + errors %d? (want at least 1000 sent)", s.Sent, s.OK, s.Errors)
	}
}
