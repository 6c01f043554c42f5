package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

const (
	echoMethod  = "echo"
	sleepMethod = "sleep 100ms"
)

func (p *reporter) markdown() string {
	r := p.r
	p.exec("header", struct {
		Command, Started string
		Wall             time.Duration
	}{r.Command, r.Started.UTC().Format("2006-01-02 15:04"), r.Wall.Round(time.Second)})
	p.machine()
	p.summary()
	p.losses()
	p.patchSetSection()
	p.idleSection()
	p.latencySection()
	p.throughputSection()
	p.restartSection()
	p.stormSection()
	p.fleetSection()
	p.heartbeatSection()
	p.quietSection()
	p.forwardSection()
	p.profilesSection()
	p.giveUpSection()
	p.greedySection()
	p.tripleSection()
	p.loadToolSection()
	p.microSection()
	p.failures()
	return p.b.String()
}

func (p *reporter) machine() {
	type scen struct{ Name, Wall, Busy, Steal string }
	var sc []scen
	for _, x := range p.r.Scenarios {
		sc = append(sc, scen{x.Name, x.Wall.Round(time.Second).String(), num(x.Busy, 2), num(x.Steal, 2)})
	}
	p.exec("machine", struct {
		M                        Machine
		Procs, Maxconn, Sessions int
		Scenarios                []scen
	}{p.r.Machine, haproxyProcs, haproxyMaxconn, dubbogoSessions, sc})
}

// --- summary ---

// sumRow is one row of the summary table.
type sumRow struct {
	figure, d, h, s, target string
	known, ok               bool
	verdict                 string // overrides the met/missed verdict when set
	note                    string // why a target was missed (shown only then)
}

func (p *reporter) summary() {
	p.ln("## Summary against the performance targets")
	p.ln("")
	p.ln("| Figure | Direct | HAProxy | Stormgate | Target | Verdict | Why, when missed |")
	p.ln("|---|---|---|---|---|---|---|")
	for _, r := range p.summaryRows() {
		p.summaryLine(r)
	}
	p.ln("")
}

func (p *reporter) summaryLine(r sumRow) {
	v := r.verdict
	if v == "" {
		v = verdict(r.known, r.ok)
	}
	note := "–"
	if r.known && !r.ok && r.note != "" {
		note = r.note
	}
	p.f("| %s | %s | %s | %s | %s | %s | %s |\n", r.figure, r.d, r.h, r.s, r.target, v, note)
}

func (p *reporter) summaryRows() []sumRow {
	var rows []sumRow

	// Provider CPU ratio at 10,000 idle consumers.
	d1, h1, s1 := p.idle(direct, time.Second), p.idle(haproxy, time.Second), p.idle(stormgate, time.Second)
	provCPU := func(x *IdleRow) float64 { return x.ProviderCPU }
	dv, sv := fIdle(d1, provCPU), fIdle(s1, provCPU)
	ratioStr, ratioOK, known := p.provRatio(dv, s1)
	floor := fIdle(s1, func(x *IdleRow) float64 { return x.ProviderIdleCPU })
	rows = append(rows, sumRow{
		figure: fmt.Sprintf("Provider CPU, %s idle consumers, 1 s heartbeats (dubbo-go provider)", count(uint64(p.r.Options.IdleConns))),
		d:      pctCore(dv), h: pctCore(fIdle(h1, provCPU)), s: pctCore(sv), target: "direct ÷ Stormgate ≥ 10×",
		known: known, ok: ratioOK, verdict: ratioStr + ": " + verdict(known, ratioOK),
		note: text("note-provider-cpu-floor", pctCore(floor)),
	})

	// CPU per answered heartbeat against the bare epoll responder; CPU with nothing to do.
	rows = append(rows, p.heartbeatSummaryRow(), p.quietSummaryRow(), p.idle30SummaryRow())

	// RSS per idle connection.
	kib := func(x *IdleRow) float64 { return x.ProxyKiBPerConn }
	pk := func(x *IdleRow) float64 { return x.ProvKiBPerConn }
	sK := fIdle(s1, kib)
	rows = append(rows, sumRow{
		figure: "Memory per idle consumer connection (the provider's when direct; the proxy's otherwise)",
		d:      kibStr(fIdle(d1, pk)), h: kibStr(fIdle(h1, kib)), s: kibStr(sK), target: "Stormgate ≤ " + num(targetKiBIdle, 0) + " KiB",
		known: !math.IsNaN(sK), ok: sK <= targetKiBIdle,
		note: text("note-idle-memory", num(sK-targetKiBIdle, 1)),
	})

	// p99 added latency.
	ld, lh, ls := p.lat(direct, echoMethod), p.lat(haproxy, echoMethod), p.lat(stormgate, echoMethod)
	p99 := func(x *LatencyRow) float64 { return x.P99ms }
	addS := p.addedP99()
	rows = append(rows, sumRow{
		figure: fmt.Sprintf("p99 latency, %s conns, %s req/s, echo on the fast provider (added over direct)", count(uint64(p.r.Options.LatConns)), num(p.r.Options.LatRate, 0)),
		d:      msStr(fLat(ld, p99)), h: msStr(fLat(lh, p99)) + " (" + signedMs(fLat(lh, p99)-fLat(ld, p99)) + ")",
		s: msStr(fLat(ls, p99)) + " (" + signedMs(addS) + ")", target: "added ≤ " + msStr(targetAddedP99), known: !math.IsNaN(addS), ok: addS <= targetAddedP99,
		note: signedMs(addS-targetAddedP99) + " over the target. " + text("why-added-p99"),
	})
	rows = append(rows, p.steadyP99Row(ld, lh, ls))

	// p99 on the 100 ms method.
	sd, sh, ss := p.lat(direct, sleepMethod), p.lat(haproxy, sleepMethod), p.lat(stormgate, sleepMethod)
	s99 := fLat(ss, p99)
	rows = append(rows, sumRow{
		figure: fmt.Sprintf("p99 latency, %s conns, 100 ms method", count(uint64(p.r.Options.LatConns))),
		d:      msStr(fLat(sd, p99)), h: msStr(fLat(sh, p99)), s: msStr(s99), target: "≤ 105 ms", known: !math.IsNaN(s99), ok: s99 <= 105,
		note: text("note-sleep-p99", msStr(fLat(sd, p99)), msStr(fLat(sh, p99))),
	})

	// CPU per forwarded request against HAProxy (SayHello on the dubbo-go provider).
	rows = append(rows, p.forwardSummaryRows()...)

	// Max throughput.
	for _, c := range p.tpConns() {
		if c == slices.Max(p.tpConns()) { // the target's connection count
			rows = append(rows, p.throughputSummaryRow(c))
			continue
		}
		d, h, s := fTP(p.tp(direct, c)), fTP(p.tp(haproxy, c)), fTP(p.tp(stormgate, c))
		rows = append(rows, sumRow{
			figure: fmt.Sprintf("Max throughput, small requests, %s conns (Stormgate : HAProxy : direct)", count(uint64(c))),
			d:      tpLabel(p.tp(direct, c)) + " req/s", h: tpLabel(p.tp(haproxy, c)) + " req/s", s: tpLabel(p.tp(stormgate, c)) + " req/s",
			target: "(ratio reported)", known: true, ok: true, verdict: num(s/d, 2) + " : " + num(h/d, 2) + " : 1",
		})
	}

	// Restart.
	rows = append(rows, p.restartSummaryRows()...)
	rows = append(rows, p.consumersSummaryRows()...)
	rows = append(rows, p.tripleSummaryRows()...)

	// Accept storm.
	sb, shp, ssg := p.storm(baseline), p.storm(haproxy), p.storm(stormgate)
	ov := func(x *StormRow) string {
		if x == nil {
			return na
		}
		return count(x.ListenOverflows)
	}
	rows = append(rows, sumRow{
		figure: fmt.Sprintf("Accept storm, %s connections at once: listen overflows (\"direct\" = the baseline listener, backlog %d)", count(uint64(p.r.Options.StormConns)), p.r.Options.StormBacklog),
		d:      ov(sb), h: ov(shp), s: ov(ssg), target: "0", known: ssg != nil, ok: ssg != nil && ssg.ListenOverflows == 0,
		note: text("note-storm-overflows"),
	})
	fa := func(x *StormRow) string {
		if x == nil {
			return na
		}
		return firstP99(x)
	}
	rows = append(rows, sumRow{
		figure: "Accept storm: first answer p99 (from the start of the dial)",
		d:      fa(sb), h: fa(shp), s: fa(ssg), target: "≤ 1 s", known: ssg != nil, ok: ssg != nil && ssg.FirstP99ms <= 1000 && ssg.ConnectFailures == 0,
		note: stormNote(ssg, p.r.Storm),
	})

	// Hot-path allocations.
	allocs, aknown := p.hotAllocs()
	rows = append(rows, sumRow{
		figure: "Hot paths (heartbeat reply, request forward, response routing): allocs/op, worst of the three",
		d:      "–", h: "–", s: num(allocs, 0), target: "0", known: aknown, ok: allocs == 0,
		note: "See the micro-benchmark table.",
	})
	return rows
}

// addedP99 is the p99 Stormgate added over direct (ms), echo on the fast provider at the latency
// scenario's load, over the whole request phase; NaN when either was not measured.
func (p *reporter) addedP99() float64 {
	p99 := func(x *LatencyRow) float64 { return x.P99ms }
	return fLat(p.lat(stormgate, echoMethod), p99) - fLat(p.lat(direct, echoMethod), p99)
}

// provRatio prints direct ÷ Stormgate provider CPU. Stormgate's provider may use less CPU than
// /proc can resolve (one 10 ms tick over the window); then the ratio is a lower bound.
func (p *reporter) provRatio(dv float64, s *IdleRow) (string, bool, bool) {
	if math.IsNaN(dv) || s == nil {
		return na, false, false
	}
	if s.ProviderCPU*float64(s.Window) < float64(clockTick) {
		bound := dv / (float64(clockTick) / float64(s.Window))
		return "> " + num(bound, 0) + "×", bound >= 10, true
	}
	r := dv / s.ProviderCPU
	return num(r, 1) + "×", r >= 10, true
}

func (p *reporter) hotAllocs() (float64, bool) {
	m := p.r.Micro
	if m == nil || len(m.Rows) == 0 {
		return math.NaN(), false
	}
	worst, seen := 0.0, false
	for _, r := range m.Rows {
		if isHotPath(r) {
			worst, seen = math.Max(worst, r.AllocsOp), true
		}
	}
	if !seen {
		return math.NaN(), false
	}
	return worst, true
}

// stormNote explains a missed first-answer target from the storm's own figures.
func stormNote(x *StormRow, st *StormResult) string {
	if x == nil || st == nil {
		return ""
	}
	return text("note-storm-first",
		msStr(x.ConnectP99ms), msStr(x.AnswerP99ms), num(st.SGRate, 0), st.SGBurst, dur(time.Duration(float64(st.Conns-st.SGBurst)/math.Max(st.SGRate, 1)*float64(time.Second))), count(uint64(st.Conns)))
}

// stormNever reports whether a storm's first-answer quantile q is "never": more than 1-q of its
// connections were not answered within the client's timeout.
func stormNever(x *StormRow, q float64) bool {
	n := x.Opened + x.ConnectFailures
	return n > 0 && float64(x.HBFailed+x.ConnectFailures) > (1-q)*float64(n)
}

func stormNeverP99(x *StormRow) bool { return stormNever(x, 0.99) }

// stormNeverMax reports whether any connection of a storm was never answered.
func stormNeverMax(x *StormRow) bool { return x.HBFailed+x.ConnectFailures > 0 }

// firstAt prints a storm's first-answer quantile.
func firstAt(x *StormRow, q, v float64) string {
	if stormNever(x, q) {
		return "never"
	}
	return msStr(v)
}

// firstP99 prints a storm's first-answer p99.
func firstP99(x *StormRow) string { return firstAt(x, 0.99, x.FirstP99ms) }

// firstMax prints a storm's slowest first answer.
func firstMax(x *StormRow) string {
	if stormNeverMax(x) {
		return "never (" + count(x.HBFailed+x.ConnectFailures) + " unanswered)"
	}
	return msStr(x.FirstMaxMs)
}

// hotPaths are the proxy package's benchmarks of the per-request path, held to 0 allocs/op (by name, up to
// the first '/'). Its other benchmarks (the handover's SnapshotSessions) are not on that path.
var hotPaths = []string{"HeartbeatReply", "RequestForward", "ResponseRouting", "ForwardAndRoute"}

// isHotPath reports the benchmarks held to 0 allocs/op.
func isHotPath(r MicroRow) bool {
	name, _, _ := strings.Cut(r.Name, "/")
	return r.Package == "proxy" && slices.Contains(hotPaths, name)
}

// tpLabel is a series' maximum, "< R" when even its first rate R failed, n/a when not measured.
func tpLabel(se *TPSeries) string {
	if se == nil || len(se.Steps) == 0 {
		return na
	}
	if se.Max > 0 {
		return num(se.Max, 0)
	}
	lowest := se.Steps[0].Rate
	for _, st := range se.Steps {
		lowest = math.Min(lowest, st.Rate)
	}
	return "< " + num(lowest, 0)
}

func usStr(v float64) string {
	if math.IsNaN(v) || v == 0 {
		return na
	}
	return num(v, 2) + " µs"
}
func kibStr(v float64) string {
	if math.IsNaN(v) {
		return na
	}
	return num(v, 1) + " KiB"
}
func signedMs(v float64) string {
	if math.IsNaN(v) {
		return na
	}
	s := msStr(math.Abs(v))
	if v < 0 {
		return "−" + s
	}
	return "+" + s
}

// --- where Stormgate loses ---

// loss is one fixed comparison of the "where Stormgate loses" table.
type loss struct {
	figure   string
	sg, best string
	known    bool
	loses    bool
	why      string
}

func (p *reporter) losses() {
	p.ln("## Where Stormgate loses")
	p.ln("")
	p.ln("Each row is a fixed comparison; \"loses\" says whether Stormgate did worse than the best baseline in this run,")
	p.ln("and the note says why when it did.")
	p.ln("")
	p.ln("| Figure | Stormgate | Best baseline | Stormgate loses | Why |")
	p.ln("|---|---|---|---|---|")
	for _, l := range p.lossRows() {
		why := "–"
		if l.known && l.loses {
			why = l.why
		}
		p.f("| %s | %s | %s | %s | %s |\n", l.figure, l.sg, l.best, yesNo(l.known, l.loses), why)
	}
	p.ln("")
}

func (p *reporter) lossRows() []loss {
	var out []loss
	ld, lh, ls := p.lat(direct, echoMethod), p.lat(haproxy, echoMethod), p.lat(stormgate, echoMethod)
	get := func(x *LatencyRow, f func(*LatencyRow) float64) float64 { return fLat(x, f) }
	p50 := func(x *LatencyRow) float64 { return x.P50ms }
	p99 := func(x *LatencyRow) float64 { return x.P99ms }
	batch := get(ls, func(x *LatencyRow) float64 { return x.BatchFrames })

	sp99, dp99, hp99 := get(ls, p99), get(ld, p99), get(lh, p99)
	out = append(out, loss{
		figure: "p99 latency, echo, vs direct", sg: msStr(sp99), best: "direct " + msStr(dp99),
		known: !math.IsNaN(sp99 + dp99), loses: sp99 > dp99,
		why: text("why-p99-vs-direct"),
	})
	out = append(out, loss{
		figure: "p99 latency, echo, vs HAProxy", sg: msStr(sp99), best: "HAProxy " + msStr(hp99),
		known: !math.IsNaN(sp99 + hp99), loses: sp99 > hp99,
		why: text("why-p99-vs-haproxy", num(batch, 2)),
	})
	sp50, hp50 := get(ls, p50), get(lh, p50)
	out = append(out, loss{
		figure: "p50 latency, echo, vs HAProxy", sg: msStr(sp50), best: "HAProxy " + msStr(hp50),
		known: !math.IsNaN(sp50 + hp50), loses: sp50 > hp50,
		why: "Same cause as the p99 row: frame parsing and the shared upstream connections' queues are on every request's path.",
	})
	cpr := func(x *LatencyRow) float64 { return x.ProxyUsPerReq }
	sc, hc := get(ls, cpr), get(lh, cpr)
	out = append(out, loss{
		figure: fmt.Sprintf("proxy CPU per request at %s req/s", num(p.r.Options.LatRate, 0)), sg: usStr(sc), best: "HAProxy " + usStr(hc),
		known: !math.IsNaN(sc+hc) && hc > 0, loses: sc > hc,
		why: text("why-cpu-vs-haproxy", num(batch, 2), p.fwdLossWhy()),
	})
	for _, c := range p.tpConns() {
		s, h, d := fTP(p.tp(stormgate, c)), fTP(p.tp(haproxy, c)), fTP(p.tp(direct, c))
		out = append(out, loss{
			figure: fmt.Sprintf("max throughput, %s conns, vs HAProxy", count(uint64(c))), sg: tpLabel(p.tp(stormgate, c)) + " req/s", best: "HAProxy " + tpLabel(p.tp(haproxy, c)) + " req/s",
			known: !math.IsNaN(s + h), loses: s < h,
			why: text("why-throughput-vs-haproxy"),
		})
		out = append(out, loss{
			figure: fmt.Sprintf("max throughput, %s conns, vs direct", count(uint64(c))), sg: tpLabel(p.tp(stormgate, c)) + " req/s", best: "direct " + tpLabel(p.tp(direct, c)) + " req/s",
			known: !math.IsNaN(s + d), loses: s < d,
			why: text("why-throughput-vs-direct"),
		})
	}
	h1, s1 := p.idle(haproxy, time.Second), p.idle(stormgate, time.Second)
	kib := func(x *IdleRow) float64 { return x.ProxyKiBPerConn }
	sk, hk := fIdle(s1, kib), fIdle(h1, kib)
	out = append(out, loss{
		figure: "memory per idle consumer connection", sg: kibStr(sk), best: "HAProxy " + kibStr(hk),
		known: !math.IsNaN(sk + hk), loses: sk > hk,
		why: text("why-idle-memory"),
	})
	h30, s30 := p.idle(haproxy, 30*time.Second), p.idle(stormgate, 30*time.Second)
	pc := func(x *IdleRow) float64 { return x.ProxyCPU }
	s30c, h30c := fIdle(s30, pc), fIdle(h30, pc)
	out = append(out, loss{
		figure: fmt.Sprintf("proxy CPU with %s idle consumers, 30 s heartbeats", count(uint64(p.r.Options.IdleConns))), sg: pctCore(s30c), best: "HAProxy " + pctCore(h30c),
		known: !math.IsNaN(s30c + h30c), loses: s30c > h30c,
		why: fmt.Sprintf("Stormgate burns %s of a core with no consumer at all (section 8, over %s). %s", pctCore2(fQuiet(p.quietRow(stormgate))), dur(p.r.Options.QuietWindow), quietWhy(p.profile(profileQuiet, stormgate), p.profile(profileQuiet, haproxy))),
	})
	hbF := func(x *IdleRow) float64 { return x.ProxyUsPerHB }
	sh, hh := fIdle(s1, hbF), fIdle(h1, hbF)
	out = append(out, loss{
		figure: "proxy CPU per consumer heartbeat", sg: usStr(sh), best: "HAProxy " + usStr(hh) + " (forwarding it)",
		known: !math.IsNaN(sh+hh) && hh > 0, loses: sh > hh,
		why: text("why-heartbeat-cpu"),
	})
	sb, shp, ssg := p.storm(baseline), p.storm(haproxy), p.storm(stormgate)
	fp := func(x *StormRow) float64 {
		if x == nil {
			return math.NaN()
		}
		return x.FirstP99ms
	}
	sf, bf, hf := fp(ssg), fp(sb), fp(shp)
	best, bestName := hf, "HAProxy"
	if bf < hf || math.IsNaN(hf) {
		best, bestName = bf, "baseline"
	}
	rate := "?"
	if p.r.Storm != nil {
		rate = num(p.r.Storm.SGRate, 0)
	}
	out = append(out, loss{
		figure: "accept storm, first answer p99", sg: msStr(sf), best: bestName + " " + msStr(best),
		known: !math.IsNaN(sf + best), loses: sf > best,
		why: text("why-storm-first", rate),
	})
	rd, rs := p.restart(direct), p.restart(stormgate)
	rec := func(x *RestartRow) float64 {
		if x == nil {
			return math.NaN()
		}
		return x.Recovery.Seconds()
	}
	sr, dr := rec(rs), rec(rd)
	out = append(out, loss{
		figure: "provider restart, time to full rate", sg: num(sr, 2) + " s", best: "direct " + num(dr, 2) + " s",
		known: !math.IsNaN(sr + dr), loses: sr > dr,
		why: text("why-restart-recovery"),
	})
	return out
}

// --- sections ---

func (p *reporter) idleSection() {
	type row struct {
		Target, Err string
		Period      time.Duration
		X           *IdleRow
	}
	d := struct {
		Opt                  Options
		DubboGo, Img, Direct string
		Sessions             int
		Measured             bool
		Rows                 []row
		Commands             []string
	}{Opt: p.r.Options, DubboGo: p.r.Machine.DubboGo, Img: p.img, Direct: direct, Sessions: dubbogoSessions, Measured: p.r.Idle != nil}
	for _, period := range []time.Duration{time.Second, 30 * time.Second} {
		for _, tg := range targets {
			x := p.idle(tg, period)
			d.Rows = append(d.Rows, row{tg, p.errOf(tg, "idle"), period, x})
			if x != nil {
				d.Commands = append(d.Commands, x.Command)
			}
		}
	}
	p.exec("idle", d)
}

func (p *reporter) errOf(tg, scen string) string {
	var rows []struct{ t, e string }
	switch scen {
	case "idle":
		if p.r.Idle != nil {
			for _, x := range p.r.Idle.Rows {
				rows = append(rows, struct{ t, e string }{x.Target, x.Error})
			}
		}
	case "latency":
		if p.r.Latency != nil {
			for _, x := range p.r.Latency.Rows {
				rows = append(rows, struct{ t, e string }{x.Target, x.Error})
			}
		}
	}
	for _, x := range rows {
		if x.t == tg && x.e != "" {
			return "not measured: " + oneLine(x.e)
		}
	}
	return "not measured"
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	s = strings.ReplaceAll(s, "|", "/")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

func (p *reporter) latencySection() {
	type row struct {
		Method, Target, Err, Added string
		X                          *LatencyRow
	}
	d := struct {
		Opt             Options
		Img, Direct, SG string
		Rows            []row
		Commands        []string
	}{Opt: p.r.Options, Img: p.img, Direct: direct, SG: stormgate}
	for _, m := range latencyMethods {
		dp99 := fLat(p.lat(direct, m.name), func(x *LatencyRow) float64 { return x.P99ms })
		for _, tg := range targets {
			x := p.lat(tg, m.name)
			r := row{m.name, tg, p.errOf(tg, "latency"), "–", x}
			if x != nil {
				if tg != direct {
					r.Added = signedMs(x.P99ms - dp99)
				}
				d.Commands = append(d.Commands, x.Command)
			}
			d.Rows = append(d.Rows, r)
		}
	}
	p.exec("latency", d)
}

func (p *reporter) throughputSection() {
	type row struct {
		Conns                                             int
		Target                                            string
		Missing                                           bool
		Max, VsDirect, P99, CPU, Us, Batch, LoadUs, Steps string
	}
	d := struct {
		Opt      Options
		MaxP99   float64
		Img      string
		Rows     []row
		Commands []string
	}{Opt: p.r.Options, MaxP99: ms(p.r.Options.TPMaxP99), Img: p.img}
	for _, c := range p.tpConns() {
		dv := fTP(p.tp(direct, c))
		for _, tg := range targets {
			se := p.tp(tg, c)
			if se == nil {
				d.Rows = append(d.Rows, row{Conns: c, Target: tg, Missing: true})
				continue
			}
			r := row{Conns: c, Target: tg, Max: tpLabel(se), VsDirect: ratio(fTP(se), dv), P99: na, CPU: na, Us: na, Batch: "–", LoadUs: na}
			if ms := se.maxStep(); ms != nil {
				r.P99, r.LoadUs = msStr(ms.SteadyP99ms)+" ("+msStr(ms.P99ms)+")", usStr(ms.LoadUsPerReq)
				r.CPU, r.Us = pctCore(ms.ProxyCPU), usStr(ms.ProxyUsPerReq)
				if tg == stormgate {
					r.Batch = num(ms.BatchFrames, 2)
				}
			}
			if tg == direct {
				r.CPU, r.Us = "–", "–"
			}
			var steps []string
			for _, st := range se.Steps {
				mark := "✗"
				if st.Pass {
					mark = "✓"
				}
				again := ""
				if st.Repeat {
					again = "↻"
				}
				steps = append(steps, again+shortNum(st.Rate)+mark)
			}
			r.Steps = strings.Join(steps, " ")
			d.Rows = append(d.Rows, r)
			if se.Command != "" {
				d.Commands = append(d.Commands, se.Command)
			}
		}
	}
	p.exec("throughput", d)
}

// Markers around section 4, which `suite run --scenarios restart --update-section` may rewrite
// alone (with the summary's restart rows).
const (
	restartBegin = "<!-- section:restart begin (make bench, or the restart scenario alone) -->"
	restartEnd   = "<!-- section:restart end -->"
)

// restartSummaryRows are the summary's two restart rows: SIGKILL, then SIGTERM.
func (p *reporter) restartSummaryRows() []sumRow {
	rd, rh, rs := p.restart(direct), p.restart(haproxy), p.restart(stormgate)
	kill := func(x *RestartRow) string {
		if x == nil {
			return na
		}
		s := fmt.Sprintf("%s closed/reset, %s timeouts, %s errors+lost+unsent", count(x.ClosedByPeer+x.Resets), count(x.Timeouts), count(x.Errors+x.Lost+x.Unsent))
		if x.InsideAtKill >= 0 {
			s += fmt.Sprintf(" (%s requests inside the provider at the kill)", count(uint64(x.InsideAtKill)))
		}
		return s
	}
	okK := rs != nil && rs.ClosedByPeer+rs.Resets+rs.Timeouts == 0 && rs.InsideAtKill >= 0 &&
		rs.visibleErrors() <= uint64(rs.InsideAtKill)
	gd, gh, gs := p.graceful(direct), p.graceful(haproxy), p.graceful(stormgate)
	stop := func(x *RestartRow) string {
		if x == nil {
			return na
		}
		return fmt.Sprintf("%s closed/reset, %s timeouts, %s errors+lost+unsent", count(x.ClosedByPeer+x.Resets), count(x.Timeouts), count(x.Errors+x.Lost+x.Unsent))
	}
	okG := gs != nil && gs.ClosedByPeer+gs.Resets == 0 && gs.visibleErrors() == 0
	return []sumRow{{
		figure: fmt.Sprintf("Provider SIGKILLed and restarted, %s consumers at %s req/s", count(uint64(p.r.Options.RestartConns)), num(p.r.Options.RestartRate, 0)),
		d:      kill(rd), h: kill(rh), s: kill(rs), target: "0, 0, only requests already inside the provider", known: rs != nil, ok: okK,
		note: text("note-restart-kill"),
	}, {
		figure: "Provider restarted gracefully (SIGTERM: READONLY, drain, exit; started 1 s after it exits), same load",
		d:      stop(gd), h: stop(gh), s: stop(gs), target: "0, 0, 0", known: gs != nil, ok: okG,
		note: "A request failed during a graceful restart: see section 4.",
	}}
}

func (p *reporter) restartSection() {
	d := struct {
		Opt                                   Options
		Begin, End, Img, Command, Started, SG string
		ByOther                               bool
		Kill, Graceful                        []targetRow[RestartRow]
		Commands                              []string
	}{Opt: p.r.Options, Begin: restartBegin, End: restartEnd, Img: p.img, Command: p.r.Command, SG: stormgate,
		Started: p.r.Started.UTC().Format("2006-01-02 15:04"), ByOther: p.r.Command != "make bench" && p.r.Restart != nil}
	for _, tg := range targets {
		x := p.restart(tg)
		d.Kill = append(d.Kill, targetRow[RestartRow]{tg, x})
		d.Graceful = append(d.Graceful, targetRow[RestartRow]{tg, p.graceful(tg)})
		if x != nil {
			d.Commands = append(d.Commands, x.Command)
		}
	}
	p.exec("restart", d)
}

func (p *reporter) stormSection() {
	d := struct {
		Opt                                                    Options
		SynBacklog, Syncookies, Rate, Burst, HARate, HABacklog string
		Procs                                                  int
		Img                                                    string
		Rows                                                   []targetRow[StormRow]
		Commands                                               []string
	}{Opt: p.r.Options, SynBacklog: na, Syncookies: na, Rate: na, Burst: na, HARate: na, HABacklog: na, Procs: haproxyProcs, Img: p.img}
	if st := p.r.Storm; st != nil {
		d.SynBacklog, d.Syncookies = st.SynBacklog, st.Syncookies
		d.Rate, d.Burst, d.HARate, d.HABacklog = num(st.SGRate, 0), count(uint64(st.SGBurst)), count(uint64(st.HARate)), count(uint64(st.HABacklog))
	}
	for _, tg := range []string{baseline, haproxy, stormgate} {
		x := p.storm(tg)
		d.Rows = append(d.Rows, targetRow[StormRow]{tg, x})
		if x != nil {
			d.Commands = append(d.Commands, x.Command)
		}
	}
	p.exec("storm", d)
}

func (p *reporter) loadToolSection() {
	type latRow struct {
		Method, Target string
		X              *LatencyRow
	}
	type tpRow struct {
		Conns  int
		Target string
		X      *TPStep
	}
	var d struct {
		Lat []latRow
		TP  []tpRow
	}
	for _, m := range latencyMethods {
		for _, tg := range targets {
			d.Lat = append(d.Lat, latRow{m.name, tg, p.lat(tg, m.name)})
		}
	}
	for _, c := range p.tpConns() {
		for _, tg := range targets {
			var st *TPStep
			if se := p.tp(tg, c); se != nil {
				st = se.maxStep()
			}
			d.TP = append(d.TP, tpRow{c, tg, st})
		}
	}
	p.exec("loadtool", d)
}

func (p *reporter) microSection() {
	m := p.r.Micro
	if m == nil {
		m = &MicroResult{Command: "go test -run=NONE -bench=. -benchmem ./proxy/ ./proxy/dubbo/ ./keepalive/ ./xds/controlplane/"}
	}
	p.exec("micro", m)
}

func (p *reporter) failures() {
	p.exec("failures", p.r.Failures)
}
