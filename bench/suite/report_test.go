package main

import (
	"bytes"
	"encoding/xml"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// fixture builds a complete Results whose figures are scaled by k (k=1 and k=1.3 give the same
// verdicts, so only the figures differ).
func fixture(k float64) *Results {
	r := &Results{
		Machine: Machine{Cores: 2, CPUModel: "Test CPU", MemGiB: 24, Kernel: "6.1", GoVersion: "go1.26.8", HAProxy: "2.6.12",
			DubboGo: "v3.3.0", Stormgate: "abc123", Somaxconn: "4096", NoFile: "20000", LoadAvgPre: "0.1 0.2 0.3"},
		Started: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Wall: time.Duration(k * float64(12*time.Minute)), Command: "make bench",
	}
	o := Options{Scenarios: allScenarios, IdleConns: 10000, IdleWindow1s: 10 * time.Second, IdleWindow30: 20 * time.Second,
		IdleSettle: 3 * time.Second, ConnectRate: 2000, LatConns: 10000, LatRate: 5000, LatDuration: 10 * time.Second, TPConns: []int{1000, 10000},
		TPStart: 5000, TPMax: 320000, TPStep: 4 * time.Second, TPRefine: 2, TPMaxP99: 50 * time.Millisecond, RestartConns: 2000,
		RestartRate: 2000, RestartDuration: 12 * time.Second, RestartKill: 3 * time.Second, RestartDown: time.Second,
		RestartTimeout: 3 * time.Second, StormConns: 10000, StormSomaxconn: 4096, StormBacklog: 50, StormAcceptDelay: time.Millisecond,
		MicroBenchtime: "300ms"}
	r.Options = o
	r.Micro = &MicroResult{Command: "go test -bench", Rows: []MicroRow{
		{Package: "proxy", Name: "HeartbeatReply", NsOp: 100 * k, AllocsOp: 0},
		{Package: "keepalive", Name: "Wheel", NsOp: 20 * k, AllocsOp: 0},
	}}
	r.Idle = &IdleResult{Provider: dubboGoProvider, Conns: 10000, Settle: 3 * time.Second}
	for _, p := range []time.Duration{time.Second, 30 * time.Second} {
		for i, tg := range targets {
			r.Idle.Rows = append(r.Idle.Rows, IdleRow{Target: tg, Period: p, Window: 10 * time.Second, Conns: 10000, Command: "stormbench load x",
				ProviderCPU: k * []float64{0.5, 0.55, 0.004}[i], ProviderRSSMiB: 100 * k, ProxyCPU: k * []float64{0, 0.2, 0.05}[i],
				ProxyRSSMiB: 50 * k, ProxyKiBPerConn: k * []float64{0, 3, 6}[i], ProvKiBPerConn: 20 * k, HBPerSec: 10000 * k,
				ProviderHBPerSec: k * []float64{10000, 10000, 0.13}[i], ProxyUsPerHB: k * []float64{0, 3, 3.5}[i], ProviderUsPerHB: 48 * k})
		}
	}
	r.Latency = &LatencyResult{Provider: fastProvider, Conns: 10000, Rate: 5000}
	for _, m := range latencyMethods {
		for i, tg := range targets {
			base, add := []float64{0.3, 0.5, 0.6}[i], 0.0
			if m.method == "sleep" {
				add = 100
			}
			row := LatencyRow{Target: tg, Method: m.name, Command: "stormbench load y", Conns: 10000, Rate: 5000, Sent: 50000, OK: 50000,
				P50ms: add + base*k, P99ms: add + (base+0.5)*k, P999ms: add + (base+1)*k, MaxMs: add + (base+5)*k,
				ProxyCPU: 0.1 * k, ProxyUsPerReq: k * []float64{0, 10, 12}[i], LoadUsPerReq: 8 * k, LoadCPU: 0.04 * k, BatchFrames: 1.1 * k}
			for j := range curveQuantiles {
				row.Curve = append(row.Curve, base*k*(1+float64(j)))
			}
			r.Latency.Rows = append(r.Latency.Rows, row)
		}
	}
	r.Throughput = &ThroughputResult{Provider: fastProvider, StepTime: 4 * time.Second, MaxP99ms: 50}
	for _, c := range o.TPConns {
		for i, tg := range targets {
			mx := []float64{40000, 30000, 20000}[i]
			se := TPSeries{Target: tg, Conns: c, Command: "stormbench load z", Max: mx, Steps: []TPStep{
				{Rate: mx, Pass: true, Sent: 1000, OK: 1000, P99ms: 3 * k, ProxyCPU: 0.9 * k, ProxyUsPerReq: 15 * k, LoadUsPerReq: 7 * k},
				{Rate: 2 * mx, Pass: false, Sent: 1000, OK: 900, Failed: 100, P99ms: 900 * k},
			}}
			r.Throughput.Series = append(r.Throughput.Series, se)
		}
	}
	r.Restart = &RestartResult{Provider: fastProvider, Conns: 2000, Rate: 2000, KillAfter: 3 * time.Second, Down: time.Second}
	for i, tg := range targets {
		row := RestartRow{Target: tg, Command: "stormbench load r", Sent: 24000, OK: uint64(k * 20000), Errors: uint64(i), Lost: uint64(k * 50),
			Unsent: uint64(k * 900), ClosedByPeer: uint64(k * 2000), P99ms: 900 * k, MaxMs: 1500 * k, DownFor: time.Second, Recovery: 2 * time.Second}
		row.InsideAtKill = 3
		if tg == stormgate {
			row.Lost, row.Unsent, row.ClosedByPeer, row.Held, row.Recovery = 0, 0, 0, 2000*k, time.Second
		}
		for x := -3.0; x < 9; x++ {
			row.Points = append(row.Points, Point{X: x, Y: 2000 * k})
		}
		r.Restart.Rows = append(r.Restart.Rows, row)
		g := row
		g.InsideAtKill, g.StopTook = -1, 20*time.Millisecond
		if tg == stormgate {
			g.Errors = 0
		}
		r.Restart.Graceful = append(r.Restart.Graceful, g)
	}
	r.Storm = &StormResult{Conns: 10000, Somaxconn: 4096, SynBacklog: "4096", Syncookies: "1", AcceptDelay: time.Millisecond,
		BaseBacklog: 50, HARate: 2000, HABacklog: 4096, SGRate: 2000, SGBurst: 500}
	for i, tg := range []string{baseline, haproxy, stormgate} {
		r.Storm.Rows = append(r.Storm.Rows, StormRow{Target: tg, Command: "ip netns exec $NS stormbench load s", Opened: 10000,
			ListenOverflows: uint64(k * []float64{5000, 3000, 0}[i]), FirstP50ms: 100 * k, FirstP99ms: k * []float64{9000, 3000, 700}[i], FirstMaxMs: 10000 * k})
	}
	addFloorFixture(r, k)
	addTripleFixture(r, k)
	return r
}

var digits = regexp.MustCompile(`[0-9]+(?:[.,][0-9]+)*`)

func TestReportLayoutDependsOnlyOnCode(t *testing.T) {
	render := func(r *Results) (string, map[string][]byte) {
		dir := t.TempDir()
		doc := filepath.Join(dir, "docs", "benchmarks.md")
		if err := writeReport(r, doc, filepath.Join(dir, "docs", "img")); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		imgs := map[string][]byte{}
		ents, _ := os.ReadDir(filepath.Join(dir, "docs", "img"))
		for _, e := range ents {
			imgs[e.Name()], _ = os.ReadFile(filepath.Join(dir, "docs", "img", e.Name()))
		}
		return string(b), imgs
	}
	a1, i1 := render(fixture(1))
	a2, i2 := render(fixture(1))
	if a1 != a2 {
		t.Fatal("the same results rendered twice differ")
	}
	for k := range i1 {
		if !bytes.Equal(i1[k], i2[k]) {
			t.Fatalf("plot %s differs between two renders of the same results", k)
		}
	}
	b, _ := render(fixture(1.3))
	if a1 == b {
		t.Fatal("different figures rendered the same doc")
	}
	if x, y := digits.ReplaceAllString(a1, "#"), digits.ReplaceAllString(b, "#"); x != y {
		diffLine(t, x, y)
	}
	if !strings.Contains(a1, "](img/restart.svg)") {
		t.Fatal("plots are not linked relative to the doc")
	}
	for _, want := range []string{"idle-provider-cpu.svg", "latency-echo.svg", "latency-sleep.svg", "throughput.svg", "restart.svg", "storm-first-answer.svg", "cpu-per-op.svg"} {
		if _, ok := i1[want]; !ok {
			t.Fatalf("plot %s not written", want)
		}
	}
}

func diffLine(t *testing.T, x, y string) {
	t.Helper()
	xl, yl := strings.Split(x, "\n"), strings.Split(y, "\n")
	for i := range min(len(xl), len(yl)) {
		if xl[i] != yl[i] {
			t.Fatalf("layout differs at line %d:\n%s\n%s", i+1, xl[i], yl[i])
		}
	}
	t.Fatalf("layout differs in length: %d vs %d lines", len(xl), len(yl))
}

func TestReportAnswersAndLosses(t *testing.T) {
	p := &reporter{r: fixture(1), img: "img"}
	doc := p.markdown()
	for _, want := range []string{
		"| Provider CPU, 10,000 idle consumers, 1 s heartbeats (dubbo-go provider) | 50.0 % | 55.0 % | 0.4 % | direct ÷ Stormgate ≥ 10× | 125.0×: **met** | – |",
		"(+0.30 ms)", // p99 added by Stormgate over direct
		"| Max throughput, small requests, 1,000 conns (Stormgate : HAProxy : direct) | 40,000 req/s | 30,000 req/s | 20,000 req/s | (ratio reported) | 0.50 : 0.75 : 1 | – |",
		"0 closed/reset, 0 timeouts, 2 errors+lost+unsent (3 requests inside the provider at the kill) | 0, 0, only requests already inside the provider | **met** | – |",
		"| Provider restarted gracefully (SIGTERM: READONLY, drain, exit; started 1 s after it exits), same load | ",
		"| 0 closed/reset, 0 timeouts, 0 errors+lost+unsent | 0, 0, 0 | **met** | – |",
		"| Accept storm, 10,000 connections at once: listen overflows (\"direct\" = the baseline listener, backlog 50) | 5,000 | 3,000 | 0 | 0 | **met** | – |",
		"| Accept storm: first answer p99 (from the start of the dial) | 9,000 ms | 3,000 ms | 700 ms | ≤ 1 s | **met** | – |",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("doc lacks %q", want)
		}
	}
	// Stormgate loses on memory to HAProxy (6 > 3 KiB) and on throughput: those rows say yes, with a reason.
	for _, row := range p.lossRows() {
		switch {
		case strings.HasPrefix(row.figure, "memory per idle"), strings.HasPrefix(row.figure, "max throughput"),
			strings.HasPrefix(row.figure, "p99 latency, echo, vs HAProxy"):
			if !row.known || !row.loses || row.why == "" {
				t.Errorf("%s: known=%v loses=%v why=%q", row.figure, row.known, row.loses, row.why)
			}
		case strings.HasPrefix(row.figure, "accept storm"), strings.HasPrefix(row.figure, "provider restart"):
			if !row.known || row.loses {
				t.Errorf("%s: known=%v loses=%v, want a known win", row.figure, row.known, row.loses)
			}
		}
	}
	if !strings.Contains(doc, "| memory per idle consumer connection | 6.0 KiB | HAProxy 3.0 KiB | **yes** | HAProxy holds no buffer") {
		t.Error("the memory loss is not stated plainly with its reason")
	}
}

func TestReportWithoutResults(t *testing.T) {
	// A run where every scenario failed still renders every section, with n/a figures.
	r := fixture(1)
	r.Idle, r.Latency, r.Throughput, r.Restart, r.Storm, r.Micro = nil, nil, nil, nil, nil, nil
	r.Failures = []string{"idle: boom | bang"}
	doc := (&reporter{r: r, img: "img"}).markdown()
	for _, want := range []string{"## 1. Idle C10K", "## 5. Accept storm", "not measured", "- idle: boom / bang"} {
		if !strings.Contains(doc, want) {
			t.Errorf("doc lacks %q", want)
		}
	}
	for name, svg := range (&reporter{r: r}).plots() {
		checkXML(t, name, svg)
	}
}

func checkXML(t *testing.T, name string, b []byte) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	for {
		_, err := d.Token()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("%s is not well-formed XML: %v", name, err)
		}
	}
}

func TestSVGWellFormedAndEscaped(t *testing.T) {
	svg := barChart(chart{Title: `a <b> & "c"`, XLabel: "x", YLabel: "y"}, []string{"g<1>", "g2"},
		[]barSeries{{Name: "s&1", Color: "#000", Values: []float64{1, math.NaN()}}, {Name: "s2", Color: "#fff", Values: []float64{3, 4}}})
	checkXML(t, "bar", svg)
	if !bytes.Contains(svg, []byte("a &lt;b&gt; &amp; &#34;c&#34;")) {
		t.Fatalf("title not escaped: %s", svg)
	}
	if !bytes.Contains(svg, []byte(">n/a<")) {
		t.Fatal("a missing value is not marked n/a")
	}
	line := lineChart(chart{Title: "t", LogY: true}, 0, 4, []xTick{{0, "p50"}}, []xTick{{1, "kill"}},
		[]lineSeries{{Name: "a", Color: "#123", Points: []Point{{0, 0.2}, {2, 30}, {4, 1500}}}, {Name: "empty", Color: "#456"}})
	checkXML(t, "line", line)
	for _, tick := range []string{">0.1<", ">1<", ">10<", ">100<", ">1k<", ">10k<"} {
		if !bytes.Contains(line, []byte(tick)) {
			t.Errorf("log axis lacks tick %s", tick)
		}
	}
}

func TestAxes(t *testing.T) {
	for _, c := range []struct{ in, want float64 }{{0.7, 1}, {1.2, 2}, {3, 5}, {7, 10}, {120, 200}, {0.03, 0.05}} {
		if got := niceStep(c.in); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("niceStep(%v) = %v, want %v", c.in, got, c.want)
		}
	}
	y := newYAxis(false, []float64{0, 42, math.NaN()})
	if y.lo != 0 || y.hi < 42 || y.px(0) != float64(padT+plotH) || y.px(y.hi) != float64(padT) {
		t.Fatalf("linear axis %+v", y)
	}
	for _, c := range []struct {
		v    float64
		want string
	}{{0, "0"}, {0.25, "0.25"}, {3.5, "3.5"}, {42, "42"}, {1200, "1.2k"}, {35000, "35k"}, {1500000, "1.5M"}, {0.004, "0.004"}} {
		if got := shortNum(c.v); got != c.want {
			t.Errorf("shortNum(%v) = %q, want %q", c.v, got, c.want)
		}
	}
	if got := commas("1234567.891"); got != "1,234,567.891" {
		t.Errorf("commas = %q", got)
	}
	if got := commas("-1234"); got != "-1,234" {
		t.Errorf("commas negative = %q", got)
	}
}

// TestUpdateRestartSection: `suite run --scenarios restart --update-section` rewrites section 4,
// the summary's restart rows and the restart plot, and nothing else, idempotently.
func TestUpdateRestartSection(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "benchmarks.md")
	before := (&reporter{r: fixture(1), img: "img"}).markdown()
	if err := os.WriteFile(path, []byte(before), 0o644); err != nil {
		t.Fatal(err)
	}
	only := fixture(2)
	only.Command = "bash bench/run.sh --scenarios restart --update-section"
	only.Idle, only.Latency, only.Throughput, only.Storm, only.Micro, only.Fleet = nil, nil, nil, nil, nil, nil
	only.TripleIdle, only.TriplePing, only.TripleForward, only.TripleRestart, only.TripleStorm = nil, nil, nil, nil, nil
	only.Restart.Rows[2].Errors, only.Restart.Rows[2].InsideAtKill = 7, 4
	for range 2 {
		if err := updateSections(only, path, filepath.Join(dir, "img")); err != nil {
			t.Fatal(err)
		}
	}
	got, _ := os.ReadFile(path)
	doc := string(got)
	for _, want := range []string{"Measured by `bash bench/run.sh --scenarios restart --update-section`",
		"7 errors+lost+unsent (4 requests inside the provider at the kill) | 0, 0, only requests already inside the provider | **missed**"} {
		if !strings.Contains(doc, want) {
			t.Errorf("updated doc lacks %q", want)
		}
	}
	if strings.Count(doc, "| Provider SIGKILLed") != 1 || strings.Count(doc, "| Provider restarted gracefully") != 1 {
		t.Error("the summary's restart rows were added instead of replaced")
	}
	i, j := strings.Index(before, restartBegin), strings.Index(before, restartEnd)+len(restartEnd)
	gi, gj := strings.Index(doc, restartBegin), strings.Index(doc, restartEnd)+len(restartEnd)
	k, gk := strings.Index(before, "| Provider SIGKILLed"), strings.Index(doc, "| Provider SIGKILLed")
	if before[:k] != doc[:gk] || before[j:] != doc[gj:] {
		t.Fatal("the text outside the restart section and rows changed")
	}
	if gi < 0 || i < 0 {
		t.Fatal("markers missing")
	}
	if _, err := os.Stat(filepath.Join(dir, "img", "restart.svg")); err != nil {
		t.Fatalf("restart plot not written: %v", err)
	}
}
