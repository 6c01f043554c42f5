package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stormgate/stormgate/internal/racebuild"
	"github.com/stormgate/stormgate/loadgen"
	"github.com/stormgate/stormgate/peer"
)

// Issue 14, acceptance 1 and 2: `sidecar upgrade` under load, several times in a row,
// alternating between two builds with different version strings. Consumers (stormbench
// load, checked bodies echoed byte for byte by stormbench echo-provider, heartbeats every
// second) see no connection closed, no failed or lost request, no heartbeat timeout, and
// answers never stop for more than 300 ms; every answer is its own request's body and the
// provider sees no repeated upstream id, no body twice, and not one new connection (the
// upstream connections move too). /version and /config_dump show each new version;
// descriptors, goroutines and RSS do not grow from one upgrade to the next.
//
// make test runs 2,000 connections (1,000 Dubbo, 1,000 Triple) at 2,000 calls/s, heartbeats and
// PINGs every second, and 10 upgrades; make upgrade-bench runs the issues' 10,000 connections (half
// of them Triple) at 5,000 calls/s (STORMGATE_UPGRADE_CONNS, _RATE, _TRIPLE_CONNS, _TRIPLE_RATE,
// _COUNT, _HEARTBEAT, _FIGURES).
//
// Issue 27, acceptance 4: with STORMGATE_UPGRADE_TRIPLE_CONNS > 0 (0 runs Dubbo alone, as issue
// 14 did) a second load process runs that many Triple
// (h2c) consumers at STORMGATE_UPGRADE_TRIPLE_RATE calls/s (default: _RATE), PINGing
// when idle, through the same sidecar, now upstream.protocol both in front of `stormbench
// echo-provider --protocol both` (Dubbo and Triple on one port). The Triple consumers must
// notice nothing either; every consumer connection of both protocols is handed over. The
// provider's HTTP/2 connections are not (docs/design.md §14.12: each new image closes them
// once idle and redials), so only its Dubbo half must see no new connection.
//
// The 300 ms bound is time on a 2-core machine, so the test skips in make race, where
// the other packages' race-instrumented tests run beside it (there the longest gap was
// 328-423 ms; alone beside one busy loop, 109-125 ms): make timing runs it on its own.
func TestUpgradeUnderLoad(t *testing.T) {
	if racebuild.Enabled {
		t.Skip("skipping under -race: make race runs other packages beside it and its bound is time; make timing runs it alone")
	}
	conns := envInt(t, "STORMGATE_UPGRADE_CONNS", 1000)
	rate := envInt(t, "STORMGATE_UPGRADE_RATE", 1000)
	upgrades := envInt(t, "STORMGATE_UPGRADE_COUNT", 10)
	heartbeat := time.Second
	if v := os.Getenv("STORMGATE_UPGRADE_HEARTBEAT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 10*time.Millisecond {
			t.Fatalf("STORMGATE_UPGRADE_HEARTBEAT=%q: want a duration such as 5s", v)
		}
		heartbeat = d
	}
	tripleConns := envIntMin(t, "STORMGATE_UPGRADE_TRIPLE_CONNS", 1000, 0)
	tripleRate := envInt(t, "STORMGATE_UPGRADE_TRIPLE_RATE", rate)
	const (
		upstreamM = 4
		maxGap    = 300 * time.Millisecond
		spacing   = 500 * time.Millisecond
	)
	next := upgradeBinaries(t).next
	protocol, settings, wantUpstream := "dubbo", "", upstreamM
	if tripleConns > 0 {
		// One provider address speaking both, and M provider connections per protocol.
		protocol, settings, wantUpstream = "both", fmt.Sprintf("upstream: { protocol: both, connections: %d }\n", upstreamM), 2*upstreamM
	}
	prov := startEchoProvider(t, protocol)
	sc := startSidecar(t, prov.addr, settings, wantUpstream)
	dur := time.Duration(upgrades)*(2*time.Second) + 6*time.Second
	loadWorkers := func(conns int) int { return (conns + 4999) / 5000 } // 5,000 connections per load process
	loadArgs := func(conns, rate int) []string {
		return []string{"--target", sc.listen, "--conns", strconv.Itoa(conns), "--workers", strconv.Itoa(loadWorkers(conns)),
			"--connect-rate", "5000", "--rate", strconv.Itoa(rate), "--duration", dur.String(), "--heartbeat", heartbeat.String(),
			"--timeout", "5s", "--body-max", "4096"}
	}
	workers := loadWorkers(conns)
	load := startLoad(t, nil, loadArgs(conns, rate)...)
	var tload *loadRun
	if tripleConns > 0 {
		// --heartbeat: a PING on each connection that received nothing for that long.
		tload = startLoad(t, nil, append([]string{"--protocol", "triple"}, loadArgs(tripleConns, tripleRate)...)...)
	}
	sc.waitMetric(t, 60*time.Second, "stormgate_downstream_connections", func(v float64) bool { return v == float64(conns+tripleConns) })
	sc.waitMetric(t, 30*time.Second, "stormgate_requests_total", func(v float64) bool { return v >= float64(rate) })
	time.Sleep(time.Second)
	before := sc.footprint(t)

	var waited []time.Duration
	var prints []procFootprint
	for i := range upgrades {
		bin, want := next, versionNext
		if i%2 == 1 {
			bin, want = bins.sidecar, versionFirst
		}
		out, code := sc.upgrade(t, nil, bin)
		if code != 0 || !strings.Contains(out, "upgraded:") {
			t.Fatalf("upgrade %d to %s: exit %d:\n%s", i+1, bin, code, out)
		}
		if v := sc.runningVersion(t); v != want {
			t.Fatalf("after upgrade %d GET /version says %s, want %s", i+1, v, want)
		}
		if d := sc.mustConfigDump(t); d.Build != want {
			t.Fatalf("after upgrade %d /config_dump says stormgate_version %q, want %s", i+1, d.Build, want)
		}
		st := upgradeStatusOf(t, sc)
		total, _ := time.ParseDuration(st.Last.Phases["total"])
		waited = append(waited, total)
		// Every consumer connection of either protocol moves; of the provider's, only the Dubbo ones.
		if st.Last.Handed["consumers"] != conns+tripleConns || st.Last.Handed["upstream"] != upstreamM {
			t.Errorf("upgrade %d handed over %v; want %d consumers and %d upstream connections", i+1, st.Last.Handed, conns+tripleConns, upstreamM)
		}
		fp := sc.footprint(t)
		prints = append(prints, fp)
		t.Logf("upgrade %d -> %s: consumers waited %v (phases %v); %v", i+1, want, total, st.Last.Phases, fp)
		time.Sleep(spacing)
	}
	if got := sc.metric(t, "stormgate_upgrades_total", `result="success"`); got != float64(upgrades) {
		t.Errorf("stormgate_upgrades_total{result=\"success\"} = %v after %d upgrades (carried across them), want %d", got, upgrades, upgrades)
	}
	for _, l := range sc.jsonLines("data plane restored from a handover") {
		t.Logf("restore of the data plane: took %v: decode %v (%v bytes), books %v, input %v, register %v",
			l["took"], l["decode"], l["state_bytes"], l["books"], l["input"], l["register"])
	}
	for _, msg := range []string{"upgrade: preflight passed", "upgrade: frozen", "upgrade: exec", "upgrade: serving"} {
		if n := len(sc.jsonLines(msg)); n != upgrades {
			t.Errorf("%d log lines %q for %d upgrades", n, msg, upgrades)
		}
	}

	res := load.result(t, dur+2*time.Minute)
	var triple *tripleFigures
	if tload != nil {
		triple = &tripleFigures{conns: tripleConns, workers: loadWorkers(tripleConns), rate: tripleRate, res: tload.result(t, dur+2*time.Minute)}
	}
	fin := prov.stop(t)
	stats, violations := *fin.Stats, fin.Violations
	dubboUpstream := stats.ConnsAccepted
	if fin.Sniff != nil {
		// An idle Dubbo provider connection says nothing until it carries a request or a heartbeat
		// (every 30 s), so the one-port provider may never learn that it is Dubbo (sniff.silent): the
		// Dubbo connections are all those that were not Triple (foreign ones are violations).
		dubboUpstream = fin.Sniff.ConnsAccepted - fin.Sniff.Triple
	}
	slices.Sort(waited)
	t.Logf("%d connections (%d load processes), %d req/s, %d upgrades: consumers waited median %v, max %v; answers: longest gap %v, latency p50 %v p99 %v p99.9 %v max %v",
		conns, workers, rate, upgrades, waited[len(waited)/2], waited[len(waited)-1], res.MaxAnswerGap,
		res.Latency.P50, res.Latency.P99, res.Latency.P999, res.Latency.Max)
	t.Logf("load: sent %d ok %d; heartbeats %d/%d; provider: %d connections accepted, %d requests, %d violations; sidecar before: %v, after upgrade 1: %v, after %d: %v",
		res.Sent, res.OK, res.HeartbeatsAnswered, res.HeartbeatsSent, dubboUpstream, stats.Requests, len(violations),
		before, prints[0], upgrades, prints[len(prints)-1])
	if triple != nil {
		tr := triple.res
		triple.newUpstream = int64(fin.Triple.ConnsAccepted) - upstreamM
		t.Logf("Triple: %d connections, %d calls/s: sent %d ok %d, grpc-status %v; PINGs %d/%d; longest gap %v, latency p50 %v p99 %v max %v; provider's Triple half: %+v; listener: %+v",
			tripleConns, tripleRate, tr.Sent, tr.OK, tr.GRPCStatus, tr.HeartbeatsAnswered, tr.HeartbeatsSent, tr.MaxAnswerGap,
			tr.Latency.P50, tr.Latency.P99, tr.Latency.Max, *fin.Triple, *fin.Sniff)
	}
	writeUpgradeFigures(t, conns, workers, rate, heartbeat, upgrades, waited, res, int64(dubboUpstream)-upstreamM, triple, prints)

	checkUntouched(t, res, conns)
	if res.MaxAnswerGap > maxGap {
		t.Errorf("answers stopped for %v at the longest; want at most %v", res.MaxAnswerGap, maxGap)
	}
	if dubboUpstream != upstreamM || len(violations) != 0 {
		t.Errorf("provider: %d Dubbo connections accepted (want Stormgate's %d: the upstream connections move), violations %v",
			dubboUpstream, upstreamM, violations)
	}
	if triple != nil {
		checkUntouched(t, triple.res, tripleConns)
		if triple.res.MaxAnswerGap > maxGap {
			t.Errorf("Triple answers stopped for %v at the longest; want at most %v", triple.res.MaxAnswerGap, maxGap)
		}
		// Each image dials its own M (the old one's close once idle): M at the start, at most M more per upgrade.
		if tr := fin.Triple; tr.ConnsAccepted < upstreamM || tr.ConnsAccepted > uint64(upstreamM*(upgrades+1)) || tr.LoadPings != 0 {
			t.Errorf("provider's Triple half: %d connections accepted, want %d to %d (M, and M more per upgrade); %d consumer PINGs reached it, want 0 (Stormgate answers them)",
				tr.ConnsAccepted, upstreamM, upstreamM*(upgrades+1), tr.LoadPings)
		}
	}
	// Not growing: the last image against the first upgraded one (same work, same connections).
	first, last := prints[0], prints[len(prints)-1]
	if last.fds > first.fds+2 {
		t.Errorf("descriptors grew across %d upgrades: %d after the first, %d after the last", upgrades, first.fds, last.fds)
	}
	if last.goroutines > first.goroutines+first.goroutines/10+5 {
		t.Errorf("goroutines grew across %d upgrades: %d after the first, %d after the last", upgrades, first.goroutines, last.goroutines)
	}
	if last.rssKiB > first.rssKiB*5/4+8<<10 {
		t.Errorf("RSS grew across %d upgrades: %d KiB after the first, %d KiB after the last", upgrades, first.rssKiB, last.rssKiB)
	}
}

// checkUntouched asserts what a consumer must not notice of an upgrade. For Triple consumers
// (res.Protocol triple) the same counters mean the same: loadgen counts calls as requests (an
// error is a non-zero grpc-status or a reset stream) and its PINGs as heartbeats (sent on a
// connection idle for the heartbeat interval, answered by Stormgate itself); exceptions, unknown
// ids and duplicates are Dubbo's only and stay 0. Triple adds: no GOAWAY, no reset stream, no
// protocol error.
func checkUntouched(t *testing.T, res *loadgen.Result, conns int) {
	t.Helper()
	who := res.Protocol
	if who == "" {
		who = loadgen.ProtocolDubbo
	}
	if res.ConnsOpened != uint64(conns) || res.ConnsOpenAtEnd != uint64(conns) || res.ClosedByPeer+res.Resets+res.OtherConnErrors != 0 ||
		res.ConnectFailures.Total() != 0 {
		t.Errorf("%s connections: opened %d, open at end %d of %d; closed by the sidecar %d, reset %d, other errors %d, connect failures %+v; want none closed",
			who, res.ConnsOpened, res.ConnsOpenAtEnd, conns, res.ClosedByPeer, res.Resets, res.OtherConnErrors, res.ConnectFailures)
	}
	if res.Errors+res.Timeouts+res.Lost+res.Unsent+res.Exceptions+res.BodyMismatches+res.UnknownIDs+res.Duplicates != 0 || res.OK != res.Sent {
		t.Errorf("%s requests: sent %d ok %d; errors %d %v, timeouts %d, lost %d, unsent %d, exceptions %d, body mismatches %d (foreign %d), unknown ids %d, duplicates %d; want every one answered OK",
			who, res.Sent, res.OK, res.Errors, res.ErrorByStatus, res.Timeouts, res.Lost, res.Unsent, res.Exceptions,
			res.BodyMismatches, res.ForeignBodies, res.UnknownIDs, res.Duplicates)
	}
	if res.HeartbeatsTimedOut+res.HeartbeatsLost != 0 || res.HeartbeatsAnswered != res.HeartbeatsSent || res.HeartbeatsSent == 0 {
		t.Errorf("%s heartbeats: sent %d answered %d timed out %d lost %d; want every one answered", who, res.HeartbeatsSent,
			res.HeartbeatsAnswered, res.HeartbeatsTimedOut, res.HeartbeatsLost)
	}
	if res.Protocol == loadgen.ProtocolTriple && res.GoAways+res.StreamResets+res.ProtocolErrors != 0 {
		t.Errorf("Triple: %d GOAWAYs, %d streams reset, %d protocol errors; want none", res.GoAways, res.StreamResets, res.ProtocolErrors)
	}
}

// upgradeStatusOf reads GET /upgrade.
func upgradeStatusOf(t *testing.T, sc *sidecar) upgradeStatusJSON {
	t.Helper()
	resp := sc.adminGet(t, "/upgrade")
	defer resp.Body.Close()
	var st upgradeStatusJSON
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("GET /upgrade: %v", err)
	}
	if st.Last == nil {
		t.Fatal("GET /upgrade: no last upgrade")
	}
	return st
}

// upgradeStatusJSON is GET /upgrade, as documented in docs/operations.md.
type upgradeStatusJSON struct {
	Version string `json:"version"`
	PID     int    `json:"pid"`
	Last    *struct {
		ID      string            `json:"id"`
		Result  string            `json:"result"`
		Reason  string            `json:"reason"`
		From    string            `json:"from"`
		To      string            `json:"to"`
		Trigger string            `json:"trigger"`
		Phases  map[string]string `json:"phases"`
		Handed  map[string]int    `json:"handed_over"`
	} `json:"last"`
}

// tripleFigures is the Triple load of an upgrade run (STORMGATE_UPGRADE_TRIPLE_CONNS), for its figures.
type tripleFigures struct {
	conns, workers, rate int
	res                  *loadgen.Result
	newUpstream          int64 // provider connections of the Triple half beyond the first M
}

// writeUpgradeFigures writes the run's figures as a Markdown table when
// STORMGATE_UPGRADE_FIGURES names a file, and into the figures of the upgrade
// section of the doc STORMGATE_UPGRADE_DOC names (make upgrade-bench:
// docs/benchmarks.md). triple is nil when no Triple load ran.
func writeUpgradeFigures(t *testing.T, conns, workers, rate int, heartbeat time.Duration, upgrades int, waited []time.Duration, res *loadgen.Result,
	newUpstream int64, triple *tripleFigures, prints []procFootprint) {
	path := os.Getenv("STORMGATE_UPGRADE_FIGURES")
	if path == "" {
		return
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/1e6) }
	first, last := prints[0], prints[len(prints)-1]
	var b strings.Builder
	// consumers writes one protocol's rows: what its consumers must not notice.
	consumers := func(who, calls, beats string, res *loadgen.Result) {
		fmt.Fprintf(&b, "| %sconsumer connections closed or reset | %d | 0 |\n", who, res.ClosedByPeer+res.Resets+res.OtherConnErrors)
		fmt.Fprintf(&b, "| %s%s failed, timed out, lost (of %d, bodies checked byte for byte) | %d, %d, %d | 0 |\n", who, calls, res.Sent, res.Errors+res.BodyMismatches, res.Timeouts, res.Lost)
		fmt.Fprintf(&b, "| %s%s timeouts (of %d) | %d | 0 |\n", who, beats, res.HeartbeatsSent, res.HeartbeatsTimedOut+res.HeartbeatsLost)
		fmt.Fprintf(&b, "| %slongest time without any answer | %s | ≤ 300 ms |\n", who, ms(res.MaxAnswerGap))
		fmt.Fprintf(&b, "| %s%s latency p50 / p99 / p99.9 / max over the run | %s / %s / %s / %s | |\n", who, strings.TrimSuffix(calls, "s"), ms(res.Latency.P50), ms(res.Latency.P99), ms(res.Latency.P999), ms(res.Latency.Max))
	}
	fmt.Fprintf(&b, "| figure | measured | target |\n|---|---|---|\n")
	dubbo, upstream := "", ""
	if triple == nil {
		fmt.Fprintf(&b, "| consumer connections (load processes), rate, heartbeats | %d (%d), %d req/s, every %v | 10,000, 5,000 req/s |\n", conns, workers, rate, heartbeat)
	} else {
		fmt.Fprintf(&b, "| Dubbo consumer connections (load processes), rate, heartbeats | %d (%d), %d req/s, every %v | 10,000 and 5,000 req/s in all, half of them Triple (issues 14, 27) |\n", conns, workers, rate, heartbeat)
		fmt.Fprintf(&b, "| Triple (h2c) consumer connections (load processes), rate, PINGs | %d (%d), %d calls/s, after %v idle | |\n",
			triple.conns, triple.workers, triple.rate, heartbeat)
		dubbo, upstream = "Dubbo: ", ", Dubbo"
	}
	fmt.Fprintf(&b, "| upgrades in a row (alternating two builds) | %d | 10 |\n", upgrades)
	fmt.Fprintf(&b, "| handover (freeze to serving), median / max | %s / %s | |\n", ms(waited[len(waited)/2]), ms(waited[len(waited)-1]))
	consumers(dubbo, "requests", "heartbeat", res)
	if triple != nil {
		consumers("Triple: ", "calls", "PING", triple.res)
	}
	fmt.Fprintf(&b, "| new provider connections%s | %d | ≤ M (4) |\n", upstream, newUpstream)
	if triple != nil {
		fmt.Fprintf(&b, "| new provider connections, Triple (each image redials its M) | %d | ≤ M (4) per upgrade |\n", triple.newUpstream)
	}
	fmt.Fprintf(&b, "| sidecar after the first / last upgrade | %v / %v | not growing |\n", first, last)
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Errorf("writing %s: %v", path, err)
	}
	t.Logf("figures written to %s", filepath.Clean(path))
	doc := os.Getenv("STORMGATE_UPGRADE_DOC")
	if doc == "" {
		return
	}
	const begin, end = "<!-- upgrade:figures begin -->", "<!-- upgrade:figures end -->"
	old, err := os.ReadFile(doc)
	if err != nil {
		t.Errorf("%s: %v", doc, err)
		return
	}
	i, j := strings.Index(string(old), begin), strings.Index(string(old), end)
	if i < 0 || j < i {
		t.Errorf("%s has no %s ... %s to write the figures into", doc, begin, end)
		return
	}
	load, _ := os.ReadFile("/proc/loadavg")
	rev, _ := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	fig := fmt.Sprintf("%s\nOne run of `make upgrade-bench`, %s UTC, Stormgate `%s`, load average at the end %s.\n\n%s%s",
		begin, time.Now().UTC().Format("2006-01-02 15:04"), strings.TrimSpace(string(rev)),
		strings.Join(strings.Fields(string(load))[:3], " "), b.String(), end)
	if err := os.WriteFile(doc, []byte(string(old[:i])+fig+string(old[j+len(end):])), 0o644); err != nil {
		t.Errorf("%s: %v", doc, err)
	}
}

// Issue 14, acceptance 3: an upgrade to a binary that exits at start-up (or hangs, or is
// not there) is refused by its preflight: the old process never stopped serving, the
// command says why and exits non-zero, no connection is closed, no request fails.
func TestUpgradeRefusedKeepsServing(t *testing.T) {
	const conns, rate = 200, 400
	prov := startProvider(t, "")
	sc := startSidecar(t, prov.addr, "", 4)
	load := startLoad(t, nil, "--target", sc.listen, "--conns", strconv.Itoa(conns), "--rate", strconv.Itoa(rate),
		"--duration", "8s", "--heartbeat", "1s", "--timeout", "3s")
	sc.waitMetric(t, 20*time.Second, "stormgate_downstream_connections", func(v float64) bool { return v == conns })
	dir := t.TempDir()
	script := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		name, binary string
		extra        []string
		want         string
	}{
		{"exits at start-up", script("crash", `echo "fatal: cannot load configuration" >&2; exit 2`), nil, "cannot load configuration"},
		{"hangs", script("hang", "sleep 30"), []string{"--preflight-timeout", "1s"}, "did not finish its preflight within 1s"},
		{"not a sidecar", script("other", "echo hello"), nil, "without a preflight report"},
		{"missing", filepath.Join(dir, "nothing-here"), nil, "no such file"},
	} {
		out, code := sc.upgrade(t, nil, c.binary, c.extra...)
		t.Logf("%s: exit %d: %s", c.name, code, out)
		if code == 0 || !strings.Contains(out, "upgrade refused") || !strings.Contains(out, c.want) {
			t.Errorf("%s: exit %d, output %q; want a refusal that says %q", c.name, code, out, c.want)
		}
	}
	if v := sc.runningVersion(t); v != versionFirst {
		t.Errorf("GET /version says %s after refused upgrades, want %s", v, versionFirst)
	}
	if n := len(sc.jsonLines("upgrade: frozen")); n != 0 {
		t.Errorf("%d freezes for refused upgrades: a refused binary must stop nothing", n)
	}
	if got := sc.metric(t, "stormgate_upgrades_total", `result="refused"`); got != 4 {
		t.Errorf("stormgate_upgrades_total{result=\"refused\"} = %v, want 4", got)
	}
	res := load.result(t, time.Minute)
	t.Logf("load: sent %d ok %d, longest gap %v, p99 %v", res.Sent, res.OK, res.MaxAnswerGap, res.Latency.P99)
	checkUntouched(t, res, conns)
}

// Issue 14, rollback: a new binary that passes its preflight but cannot restore the
// handed-over state execs the old binary again, which restores the same state and serves
// on. The command reports the rollback and exits non-zero; consumers lose nothing (checked
// bodies, no repeated id at the provider); a later upgrade works. Also through SIGUSR2.
func TestUpgradeRollsBack(t *testing.T) {
	const conns, rate, upstreamM = 500, 1000, 4
	builds := upgradeBinaries(t)
	next, fault := builds.next, builds.fault
	prov := startEchoProvider(t, "dubbo")
	sc := startSidecarArgs(t, prov.addr, upstreamM, "--upgrade-binary", next)
	load := startLoad(t, nil, "--target", sc.listen, "--conns", strconv.Itoa(conns), "--rate", strconv.Itoa(rate),
		"--duration", "10s", "--heartbeat", "1s", "--timeout", "5s", "--body-max", "2048")
	sc.waitMetric(t, 20*time.Second, "stormgate_downstream_connections", func(v float64) bool { return v == conns })
	sc.waitMetric(t, 20*time.Second, "stormgate_requests_total", func(v float64) bool { return v >= rate })

	out, code := sc.upgrade(t, nil, fault)
	t.Logf("upgrade to the faulty build: exit %d: %s", code, out)
	if code == 0 || !strings.Contains(out, "rolled back") || !strings.Contains(out, "fault injected") {
		t.Fatalf("exit %d, output %q; want a reported rollback with the new binary's reason", code, out)
	}
	if v := sc.runningVersion(t); v != versionFirst {
		t.Fatalf("GET /version says %s after the rollback, want the old %s", v, versionFirst)
	}
	st := upgradeStatusOf(t, sc)
	if st.Last.Result != "rolled_back" || st.PID != sc.PID {
		t.Errorf("GET /upgrade after the rollback: result %q pid %d; want rolled_back, pid %d", st.Last.Result, st.PID, sc.PID)
	}
	if len(sc.jsonLines("upgrade: the new binary cannot restore the handed-over state; rolling back to the old binary")) != 1 {
		t.Error("the new binary did not log its rollback")
	}

	// SIGUSR2: to --upgrade-binary, the same handover.
	if err := sc.Signal(syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	if !poll(20*time.Second, func() bool {
		st, err := getStatus(sc)
		return err == nil && st.Version == versionNext && st.Last != nil && st.Last.Result == "success"
	}) {
		t.Fatalf("after SIGUSR2 the sidecar is not running %s", versionNext)
	}
	if st := upgradeStatusOf(t, sc); st.Last.Trigger != "SIGUSR2" {
		t.Errorf("GET /upgrade: trigger %q, want SIGUSR2", st.Last.Trigger)
	}
	for r, want := range map[string]float64{"rolled_back": 1, "success": 1, "failed": 0, "refused": 0} {
		if got := sc.metric(t, "stormgate_upgrades_total", `result="`+r+`"`); got != want {
			t.Errorf("stormgate_upgrades_total{result=%q} = %v, want %v", r, got, want)
		}
	}
	res := load.result(t, time.Minute)
	fin := prov.stop(t)
	stats, violations := *fin.Stats, fin.Violations
	t.Logf("load: sent %d ok %d, longest gap %v, p99 %v max %v; provider: %d connections, %d violations",
		res.Sent, res.OK, res.MaxAnswerGap, res.Latency.P99, res.Latency.Max, stats.ConnsAccepted, len(violations))
	checkUntouched(t, res, conns)
	if stats.ConnsAccepted != upstreamM || len(violations) != 0 {
		t.Errorf("provider: %d connections accepted (want %d), violations %v", stats.ConnsAccepted, upstreamM, violations)
	}
}

// startSidecarArgs is startSidecar without a settings file and with extra run flags.
func startSidecarArgs(t *testing.T, upstream string, wantUpstream int, extra ...string) *sidecar {
	t.Helper()
	args := append([]string{"run", "--listen", "127.0.0.1:0", "--upstream", upstream,
		"--metrics", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--log-level", "info"}, extra...)
	return attachSidecar(t, startProc(t, "sidecar", bins.sidecar, args...), wantUpstream)
}

// getStatus is GET /upgrade without failing the test (the sidecar may be mid-exec).
func getStatus(sc *sidecar) (upgradeStatusJSON, error) {
	var st upgradeStatusJSON
	resp, err := sc.http.Get("http://" + sc.admin + "/upgrade")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// Issue 14, acceptance 4: transparent mode. The pod redirects two provider ports, 20880
// and 20882, each with its own provider; consumers in the client namespace dial both.
// After `sidecar upgrade` every handed-over connection still reaches the provider of the
// port it dialed (its original destination and its pool survive the exec): each provider
// answered exactly the requests sent to its port, saw only Stormgate's M connections (no
// redial, so the pools moved with their connections), and no consumer noticed anything.
func TestUpgradeTransparentKeepsPortsAndPools(t *testing.T) {
	const (
		port2     = 20882
		loadConns = 100
		loadRate  = 200
		probes    = 4
	)
	next := upgradeBinaries(t).next
	p := startTransparentPod(t, fmt.Sprintf("%d,%d", tpProviderPort, port2), []int{tpProviderPort, port2})
	sc := p.sidecar
	adminLine := sc.waitJSONLine(t, false, 10*time.Second, `admin "http listener started"`, func(m map[string]any) bool {
		return m["msg"] == "http listener started" && m["listener"] == "admin"
	})
	sc.admin, _ = adminLine["address"].(string)
	prov2 := startProc(t, "provider2", "ip", "netns", "exec", p.pod.Name, bins.stormbench,
		"provider", "--listen", fmt.Sprintf("0.0.0.0:%d", port2), "--log-level", "warn")
	prov2.waitJSONLine(t, true, 20*time.Second, `its {"addr": ...} line`, func(m map[string]any) bool {
		_, ok := m["addr"].(string)
		return ok
	})

	// Probe consumers on each port (in-process, checked answers), and a load per port.
	ports := []uint16{tpProviderPort, port2}
	callAll := func(round string) {
		for _, port := range ports {
			for i := range probes {
				c, err := p.dial(t, port)
				if err != nil {
					t.Fatalf("dial pod:%d: %v", port, err)
				}
				arg := fmt.Sprintf("%s-%d-%d", round, port, i)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				resp, err := c.Call(ctx, 1, tpService, "echo", arg)
				cancel()
				if err != nil || resp.Status != 20 || resp.Value != arg {
					t.Fatalf("%s: port %d consumer %d: status %d value %q err %v", round, port, i, resp.Status, resp.Value, err)
				}
			}
		}
	}
	var loads []*loadRun
	for i, port := range ports {
		// Different rates per port: requests crossing over to the other pool would show in
		// the providers' counts.
		loads = append(loads, startLoad(t, []string{"ip", "netns", "exec", p.cli.Name}, "--target",
			netip.AddrPortFrom(p.addr, port).String(), "--conns", strconv.Itoa(loadConns), "--rate", strconv.Itoa(loadRate/(i+1)),
			"--duration", "6s", "--heartbeat", "1s", "--timeout", "3s"))
	}
	callAll("before")
	sc.waitMetric(t, 20*time.Second, "stormgate_downstream_connections", func(v float64) bool { return v == 2*(loadConns+probes) })
	sc.waitMetric(t, 10*time.Second, "stormgate_upstream_connections", func(v float64) bool { return v == 2*tpUpstreamM })
	time.Sleep(time.Second)

	out, code := sc.upgrade(t, []string{"ip", "netns", "exec", p.pod.Name}, next)
	t.Logf("upgrade: exit %d: %s", code, out)
	if code != 0 || !strings.Contains(out, "upgraded:") {
		t.Fatalf("upgrade failed: exit %d\n%s", code, out)
	}
	if v := sc.runningVersion(t); v != versionNext {
		t.Fatalf("GET /version: %s, want %s", v, versionNext)
	}
	callAll("after") // new consumers: the listener and the per-port pools serve as before
	if got := sc.metric(t, "stormgate_upstream_connections"); got != 2*tpUpstreamM {
		t.Errorf("stormgate_upstream_connections = %v after the upgrade, want %d (one pool of %d per port)", got, 2*tpUpstreamM, tpUpstreamM)
	}
	var sent [2]uint64
	for i, l := range loads {
		res := l.result(t, time.Minute)
		t.Logf("load on :%d: sent %d ok %d, longest gap %v, p99 %v", ports[i], res.Sent, res.OK, res.MaxAnswerGap, res.Latency.P99)
		checkUntouched(t, res, loadConns)
		sent[i] = res.Sent
	}
	for i, pr := range []*proc{p.provider, prov2} {
		st := stopProvider(t, pr)
		want := sent[i] + 2*probes // probes before and after
		t.Logf("provider :%d: %+v", ports[i], st)
		if st.ConnsAccepted != tpUpstreamM {
			t.Errorf("provider on :%d accepted %d connections, want Stormgate's %d: the pool moved with its connections", ports[i], st.ConnsAccepted, tpUpstreamM)
		}
		if st.Requests != want {
			t.Errorf("provider on :%d answered %d requests, want the %d sent to its port: a handed-over connection went to another pool", ports[i], st.Requests, want)
		}
	}
}

// A stop signal during an upgrade must end in a drain, never in an abrupt death. Aimed with
// the slow build (each side of its handovers waits 500 ms): before the exec, the upgrade is
// abandoned and the sidecar thaws and drains; during the new binary's restore, the new
// binary drains once it serves. Either way the sidecar exits 0 and consumers that honour
// READONLY see no error and no reset. (A signal in the few milliseconds of the exec itself,
// before the new Go runtime has handlers, still ends the process: docs/operations.md.)
func TestSIGTERMDuringUpgrade(t *testing.T) {
	const conns, rate = 200, 400
	builds := upgradeBinaries(t)
	for _, c := range []struct {
		name, from, to, want string
	}{
		{"before the exec", builds.slow, builds.next, "arrived during the handover"},
		{"during the restore", bins.sidecar, builds.slow, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			prov := startProvider(t, "")
			sc := attachSidecar(t, startProc(t, "sidecar", c.from, "run", "--listen", "127.0.0.1:0", "--upstream", prov.addr,
				"--metrics", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--log-level", "info"), 4)
			load := startLoad(t, nil, "--target", sc.listen, "--conns", strconv.Itoa(conns), "--rate", strconv.Itoa(rate),
				"--duration", "5s", "--heartbeat", "1s", "--timeout", "3s", "--honor-readonly", "--leave-on-readonly")
			sc.waitMetric(t, 20*time.Second, "stormgate_downstream_connections", func(v float64) bool { return v == conns })
			sc.waitMetric(t, 20*time.Second, "stormgate_requests_total", func(v float64) bool { return v >= rate })

			up := startProc(t, "upgrade", bins.sidecar, "upgrade", "--binary", c.to, "--admin", sc.admin, "--timeout", "20s")
			if !poll(20*time.Second, func() bool {
				return up.Exited() || slices.ContainsFunc(up.stdoutLines(), func(l string) bool { return strings.HasPrefix(l, "preflight passed") })
			}) {
				t.Fatal("sidecar upgrade printed nothing")
			}
			time.Sleep(200 * time.Millisecond) // into the 500 ms wait of the slow side
			if err := sc.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			code := sc.wait(t, 20*time.Second)
			up.wait(t, 30*time.Second)
			said := strings.Join(append(up.stdoutLines(), up.logLines()...), " | ")
			t.Logf("sidecar exit %d; sidecar upgrade said: %s", code, said)
			if code != 0 {
				t.Errorf("sidecar exit code %d after SIGTERM during an upgrade, want 0 (a drain)", code)
			}
			if c.want != "" && !strings.Contains(said, c.want) {
				t.Errorf("sidecar upgrade did not report %q", c.want)
			}
			res := load.result(t, time.Minute)
			t.Logf("load: sent %d ok %d, errors %d, resets %d, left after READONLY %d, closed by the sidecar %d", res.Sent, res.OK,
				res.Errors, res.Resets, res.LeftOnReadonly, res.ClosedByPeer)
			if res.Errors+res.Timeouts+res.Lost+res.Resets+res.OtherConnErrors+res.HeartbeatsTimedOut+res.HeartbeatsLost != 0 || res.OK != res.Sent {
				t.Errorf("consumers saw errors %d, timeouts %d, lost %d, resets %d, other %d, heartbeats timed out %d lost %d; want a clean drain",
					res.Errors, res.Timeouts, res.Lost, res.Resets, res.OtherConnErrors, res.HeartbeatsTimedOut, res.HeartbeatsLost)
			}
		})
	}
}

// Requests in flight at the handover are answered however long the provider takes, and
// requests held while the provider is away are sent once it is back, by the new binary:
// the pending tables and the hold queue cross the exec (issue 14).
func TestUpgradeCarriesSlowAndHeldRequests(t *testing.T) {
	const conns = 40
	next := upgradeBinaries(t).next
	prov := startProvider(t, "")
	sc := startSidecar(t, prov.addr, "hold:\n  timeout: 10s\nlimits:\n  max_request_age: 30s\n", 4)
	f := dialFleet(t, sc.listen, conns, false)
	sc.waitMetric(t, 20*time.Second, "stormgate_downstream_connections", func(v float64) bool { return v == conns })

	// Half the consumers call a method that takes 1.5 s: in flight across the upgrade.
	type result struct {
		arg  string
		resp peer.Response
		err  error
	}
	results := make(chan result, conns)
	call := func(c *consumer, id int64, method, arg string) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		resp, err := c.c.Call(ctx, id, service, method, arg)
		results <- result{arg, resp, err}
	}
	for _, c := range f.conns[:conns/2] {
		go call(c, 1, "sleep", "1500ms")
	}
	sc.waitMetric(t, 5*time.Second, "stormgate_inflight_requests", func(v float64) bool { return v == conns/2 })
	out, code := sc.upgrade(t, nil, next)
	if code != 0 {
		t.Fatalf("upgrade with slow requests in flight: exit %d\n%s", code, out)
	}
	for range conns / 2 {
		r := <-results
		if r.err != nil || r.resp.Status != 20 || r.resp.Value != r.arg {
			t.Errorf("a request in flight across the upgrade: status %d value %q err %v; want its answer", r.resp.Status, r.resp.Value, r.err)
		}
	}

	// The provider goes away; the other half's requests are held; upgrade back; the provider
	// returns and the new binary sends them.
	prov.Kill()
	sc.waitMetric(t, 10*time.Second, "stormgate_upstream_connections", func(v float64) bool { return v == 0 })
	for i, c := range f.conns[conns/2:] {
		go call(c, 2, "echo", fmt.Sprintf("held-%d", i))
	}
	sc.waitMetric(t, 5*time.Second, "stormgate_held_requests", func(v float64) bool { return v == conns/2 })
	if out, code := sc.upgrade(t, nil, bins.sidecar); code != 0 {
		t.Fatalf("upgrade with requests held: exit %d\n%s", code, out)
	}
	if got := sc.metric(t, "stormgate_held_requests"); got != conns/2 {
		t.Errorf("stormgate_held_requests = %v after the upgrade, want the %d held before it", got, conns/2)
	}
	startProvider(t, prov.addr)
	for range conns / 2 {
		r := <-results
		if r.err != nil || r.resp.Status != 20 || r.resp.Value != r.arg {
			t.Errorf("a request held across the upgrade: status %d value %q err %v; want its echo %q", r.resp.Status, r.resp.Value, r.err, r.arg)
		}
	}
	for _, c := range f.conns {
		select {
		case <-c.c.Closed():
			t.Fatalf("consumer %d was closed", c.idx)
		default:
		}
	}
}
