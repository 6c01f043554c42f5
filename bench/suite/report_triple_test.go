package main

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// addTripleFixture adds the Triple scenarios' results, figures scaled by k (the verdicts do not
// change with k).
func addTripleFixture(r *Results, k float64) {
	r.Options.FwdLoads = []FwdLoad{{Conns: 2000, Rate: 4000}, {Conns: 10000, Rate: 5000}}
	r.Options.HBConns, r.Options.HBWindow, r.Options.HBSettle, r.Options.FwdWindows = 10000, 6*time.Second, 2*time.Second, 3
	r.TripleIdle = &IdleResult{Provider: dubboGoTriple, Conns: 10000, Settle: 3 * time.Second}
	for i, tg := range targets {
		r.TripleIdle.Rows = append(r.TripleIdle.Rows, IdleRow{Target: tg, Period: 10 * time.Second, Window: 20 * time.Second,
			Conns: 10000, Command: "stormbench load --protocol triple x", ProviderCPU: k * []float64{0.3, 0.01, 0.01}[i],
			ProviderIdleCPU: 0.005 * k, ProviderRSSMiB: 300 * k, ProvKiBPerConn: 25 * k, ProxyCPU: k * []float64{0, 0.02, 0.03}[i],
			ProxyRSSMiB: 90 * k, ProxyKiBPerConn: k * []float64{0, 5, 8}[i], HBPerSec: 1000 * k,
			ProviderHBPerSec: []float64{1000 * k, notCounted, 0.4 * k}[i], ProxyUsPerHB: k * []float64{0, 12, 20}[i]})
	}
	r.TriplePing = &HeartbeatResult{Conns: 10000, Period: time.Second, Window: 6 * time.Second, Settle: 2 * time.Second, Pairs: 3,
		Commands: map[string]string{armDubbo: "stormbench load d", armTriple: "stormbench load --protocol triple t"}}
	for pair := -1; pair < 3; pair++ {
		for j, a := range []string{armDubbo, armTriple} {
			r.TriplePing.Windows = append(r.TriplePing.Windows, HBWindow{Pair: pair, Target: a, Elapsed: 6 * time.Second,
				CPU: time.Duration(k * float64(time.Second) * []float64{0.5, 0.7}[j]), Sys: time.Duration(k * float64(300*time.Millisecond)),
				HB: 60000, Profiled: pair < 0})
		}
	}
	r.TripleForward = &ForwardResult{Provider: dubboGoTriple, Method: tripleMethod, Arg: fwdArg, Loads: r.Options.FwdLoads, Windows: 3}
	for _, l := range r.Options.FwdLoads {
		for i, tg := range tripleForward.targets {
			us := k * []float64{40, 30}[i]
			r.TripleForward.Rows = append(r.TripleForward.Rows, FwdRow{Target: tg, Conns: l.Conns, Rate: l.Rate, Command: "stormbench load --protocol triple f",
				UsPerReq: []float64{us, us, us}, SysUsPerReq: []float64{us / 2, us / 2, us / 2}, ProviderUsPerReq: []float64{50 * k, 50 * k, 50 * k},
				Sent: 36000, OK: 36000, P50ms: k, P99ms: 3 * k})
		}
	}
	r.TripleRestart = &RestartResult{Provider: dubboGoTriple, Conns: 2000, Rate: 2000, KillAfter: 3 * time.Second, Down: time.Second}
	for i, tg := range targets {
		row := RestartRow{Target: tg, Command: "stormbench load --protocol triple r", Sent: 24000, OK: 20000, Errors: 100,
			ClosedByPeer: []uint64{2000, 2000, 0}[i], InsideAtKill: -1, DownFor: time.Second, P99ms: 900 * k, MaxMs: 1500 * k}
		g := row
		if tg == stormgate {
			row.Errors, row.OK, row.Held, row.Reheld = 5, 23995, 1500*k, 8
			g.Errors, g.OK, g.Held = 0, 24000, 1200*k
		}
		r.TripleRestart.Rows, r.TripleRestart.Graceful = append(r.TripleRestart.Rows, row), append(r.TripleRestart.Graceful, g)
	}
	r.TripleStorm = &StormResult{Conns: 10000, Somaxconn: 4096, HARate: 2000, SGRate: 2000, SGBurst: 500}
	for i, tg := range []string{haproxy, stormgate} {
		r.TripleStorm.Rows = append(r.TripleStorm.Rows, StormRow{Target: tg, Command: "ip netns exec $NS suite storm-client --protocol triple", Opened: 10000,
			HBAnswered: 10000, ListenOverflows: uint64(k * []float64{3000, 0}[i]), FirstP50ms: 100 * k, FirstP99ms: k * []float64{3000, 700}[i], FirstMaxMs: 900 * k})
	}
}

// TestTripleReport: the Triple section and summary rows say what the fixture measured, with
// the verdicts issue 27 asks for.
func TestTripleReport(t *testing.T) {
	p := &reporter{r: fixture(1), img: "img"}
	doc := p.markdown()
	for _, want := range []string{
		"## 13. Triple (gRPC over h2c)",
		"| Triple: provider CPU, 10,000 idle h2c consumers PINGing every 10 s (dubbo-go Triple provider) | 30.0 % | 1.0 % | 1.0 % | direct ÷ Stormgate ≥ 10× | 30.0×: **met** |",
		"| Triple: Stormgate CPU per PING ÷ its CPU per Dubbo heartbeat (median of alternating rounds) | – | – | 11.67 µs per PING, 8.33 µs per heartbeat | ≤ 1.2× | 1.40×: **missed** |",
		"| Triple: proxy CPU per unary call at 2,000 conns and 4,000 calls/s (Echo on the dubbo-go Triple provider): Stormgate ÷ HAProxy in HTTP/2 mode | – | 40.00 µs | 30.00 µs (0.75×) | ≤ 1.0× | **met** |",
		"| Triple: provider SIGKILL and restart, 2,000 h2c consumers: failed calls, connections closed | 100 failed, 2,000 closed | 100 failed, 2,000 closed | 5 failed, 0 closed | 0 closed; only calls the provider had read fail | not judged: the provider's reads are not counted |",
		"| Triple: provider graceful restart (SIGTERM), 2,000 h2c consumers: failed calls, connections closed | 100 failed, 2,000 closed | 100 failed, 2,000 closed | 0 failed, 0 closed | 0 closed, 0 failed | **met** |",
		"| HAProxy | 10,000 | 1.0 % |",
		"| not counted |",
		"**PING ÷ Dubbo heartbeat: 1.40×**",
		"| SIGKILL | Stormgate | 24,000 | 23,995 | 5 |",
		"| SIGTERM | HAProxy | 24,000 | 20,000 | 100 |",
		"### Triple: forwarding Echo, 2,000 conns, 4,000 calls/s (dubbo-go Triple provider)",
		"| Triple: accept storm of 10,000 h2c connections at once: listen overflows | – | 3,000 (first PING ack p99 3,000 ms) | 0 (first PING ack p99 700 ms) | Stormgate 0 | **met** |",
		"| Stormgate | 0 | 0 | 0 | 10,000 | 0 | 10,000 | 0 |",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("doc lacks %q", want)
		}
	}
	if err := p.err; err != nil {
		t.Fatal(err)
	}

	// A run with only some Triple scenarios says what was not measured.
	r := fixture(1)
	r.TriplePing, r.TripleForward, r.TripleRestart, r.TripleStorm = nil, nil, nil, nil
	q := &reporter{r: r, img: "img"}
	doc = q.markdown()
	if q.err != nil {
		t.Fatal(q.err)
	}
	for _, want := range []string{"## 13. Triple", "| Stormgate | 10,000 |", "Not measured in this run.", "| 2,000 conns, 4,000 calls/s | Stormgate | not measured |"} {
		if !strings.Contains(doc, want) {
			t.Errorf("partial run: doc lacks %q", want)
		}
	}
	// A run without any leaves the section and its summary rows out.
	r.TripleIdle = nil
	if doc := (&reporter{r: r, img: "img"}).markdown(); strings.Contains(doc, "Triple") {
		t.Error("a run without Triple scenarios mentions Triple")
	}
}

// TestTripleSectionUpdate: the Triple scenarios alone (--update-section) put section 13 and the
// summary's Triple rows into a doc that has neither, in order, and a second run replaces them.
func TestTripleSectionUpdate(t *testing.T) {
	before, err := os.ReadFile("../../docs/benchmarks.md")
	if err != nil {
		t.Fatal(err)
	}
	r := fixture(1)
	r.Command = "bash bench/run.sh --scenarios triple-idle,triple-ping,triple-forward,triple-restart --update-section"
	once, err := updateTripleSection(&reporter{r: r, img: "img"}, string(before), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	twice, err := updateTripleSection(&reporter{r: r, img: "img"}, once, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if once != twice {
		t.Fatal("a second update changed the doc")
	}
	if strings.Count(once, tripleBegin) != 1 || !strings.Contains(once, "Measured by `"+r.Command+"`") {
		t.Fatal("the section is not in the doc once, with the command that measured it")
	}
	var rows []int
	for _, key := range []string{"| Triple: provider CPU", "| Triple: Stormgate CPU per PING", "| Triple: proxy CPU per unary call at 2,000",
		"| Triple: proxy CPU per unary call at 10,000", "| Triple: provider SIGKILL", "| Triple: provider graceful", "| Triple: accept storm"} {
		if strings.Count(once, key) != 1 {
			t.Fatalf("summary row %q is in the doc %d times", key, strings.Count(once, key))
		}
		rows = append(rows, strings.Index(once, key))
	}
	if !slices.IsSorted(rows) || rows[0] > strings.Index(once, "## Where Stormgate loses") {
		t.Fatalf("the Triple rows are not in order in the summary table: %v", rows)
	}
	// Everything else is the doc as it was (which may hold a Triple section and rows already).
	if withoutTriple(once) != withoutTriple(string(before)) {
		t.Fatal("the update changed the doc outside the Triple section and rows")
	}
}

// withoutTriple is doc without its Triple section and summary rows.
func withoutTriple(doc string) string {
	if i, j := strings.Index(doc, tripleBegin), strings.Index(doc, tripleEnd); i >= 0 && j > i {
		doc = doc[:i] + doc[j+len(tripleEnd):]
	}
	var kept []string
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(l, "| Triple: ") {
			kept = append(kept, l)
		}
	}
	doc = strings.Join(kept, "\n")
	for strings.Contains(doc, "\n\n\n") {
		doc = strings.ReplaceAll(doc, "\n\n\n", "\n\n")
	}
	return strings.TrimSpace(doc)
}

// TestTripleSectionPartialUpdate: a run of one Triple scenario rewrites its subsection and its
// summary rows and keeps the other scenarios' from the run before (a triple-forward run alone wiped
// the restart, storm, idle and PING figures of the run before it).
func TestTripleSectionPartialUpdate(t *testing.T) {
	before, err := os.ReadFile("../../docs/benchmarks.md")
	if err != nil {
		t.Fatal(err)
	}
	all := fixture(1)
	all.Command = "bash bench/run.sh --scenarios triple-idle,triple-ping,triple-forward,triple-restart,triple-storm --update-section"
	full, err := updateTripleSection(&reporter{r: all, img: "img"}, string(before), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	fwd := fixture(2)
	fwd.Command = "bash bench/run.sh --scenarios triple-forward --update-section"
	fwd.TripleIdle, fwd.TriplePing, fwd.TripleRestart, fwd.TripleStorm = nil, nil, nil, nil
	part, err := updateTripleSection(&reporter{r: fwd, img: "img"}, full, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range tripleParts {
		was, ok1 := markedText(full, tripleSubBegin(x.name), tripleSubEnd(x.name))
		is, ok2 := markedText(part, tripleSubBegin(x.name), tripleSubEnd(x.name))
		if !ok1 || !ok2 {
			t.Fatalf("subsection %s is not between its markers (before %v, after %v)", x.name, ok1, ok2)
		}
		if changed := was != is; changed != (x.name == "triple-forward") {
			t.Errorf("subsection %s changed: %v; want a change only for triple-forward", x.name, changed)
		}
		if x.name == "triple-forward" && !strings.Contains(is, "Measured by `"+fwd.Command+"`") {
			t.Errorf("the rewritten subsection does not say which run measured it:\n%s", is)
		}
	}
	rowsOf := func(doc, prefix string) []string {
		var out []string
		for _, l := range strings.Split(doc, "\n") {
			if strings.HasPrefix(l, prefix) {
				out = append(out, l)
			}
		}
		return out
	}
	for _, key := range []string{"| Triple: provider CPU", "| Triple: Stormgate CPU per PING", "| Triple: provider SIGKILL",
		"| Triple: provider graceful", "| Triple: accept storm"} {
		if a, b := rowsOf(full, key), rowsOf(part, key); len(b) != 1 || a[0] != b[0] {
			t.Errorf("summary row %q changed or doubled: %q -> %q", key, a, b)
		}
	}
	if a, b := rowsOf(full, "| Triple: proxy CPU per unary call"), rowsOf(part, "| Triple: proxy CPU per unary call"); len(b) != 2 || slices.Equal(a, b) {
		t.Errorf("the forward rows were not rewritten once each: %q -> %q", a, b)
	}
}
