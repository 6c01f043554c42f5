package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// The doc's parts about the floors (issue 12): the heartbeat ratio, the quiet cost, CPU per
// forwarded request, and where Stormgate's CPU goes (profiles).

// Targets of issue 12, from DESIGN §8.
const (
	targetHBRatio   = 1.15  // Stormgate CPU per heartbeat ÷ the bare epoll responder's
	targetQuiet     = 0.002 // cores with no consumer connected
	targetFwdRatio  = 0.8   // proxy CPU per forwarded request, Stormgate ÷ HAProxy
	targetLabelCost = 1.05  // Stormgate's CPU per forwarded request with per-method metrics ÷ without
	targetBaseCost  = 1.05  // Stormgate's CPU per forwarded request ÷ the base commit's (BENCH_BASE_REF)
	targetTPRatio   = 1.2   // max throughput at the largest connection count, Stormgate ÷ HAProxy
	targetKiBIdle   = 4.0   // RSS per idle consumer connection
	targetAddedP99  = 0.5   // ms, p99 added over direct
	pprofTopN       = 20
	kernelRowsShown = 6
)

// --- lookups ---

func (p *reporter) profile(key, tg string) *Profile {
	return find(p.r.Profiles, func(x *Profile) bool { return x.Scenario == key && x.Target == tg })
}

func (p *reporter) fwdRow(tg string, l FwdLoad) *FwdRow {
	if p.r.Forward == nil {
		return nil
	}
	return find(p.r.Forward.Rows, func(x *FwdRow) bool {
		return x.Target == tg && x.Conns == l.Conns && x.Rate == l.Rate && x.Error == "" && len(x.UsPerReq) > 0
	})
}

// fwdPerf is tg's system calls and context switches per forwarded request at load l, from perf
// stat in its profiled window (section 9's columns); NaN when that window was not counted (a
// count perf had but the window's requests did not is -1).
func (p *reporter) fwdPerf(tg string, l FwdLoad) (sys, cs float64) {
	pr := p.profile(profileForward(l), tg)
	if pr == nil || pr.Syscalls < 0 {
		return math.NaN(), math.NaN()
	}
	return pr.perfPerOp(pr.Syscalls), pr.perfPerOp(pr.CtxSwitches)
}

// idle30CPU is tg's proxy CPU (cores) with the idle consumers heartbeating every 30 s; NaN when
// not measured.
func (p *reporter) idle30CPU(tg string) float64 {
	return fIdle(p.idle(tg, 30*time.Second), func(x *IdleRow) float64 { return x.ProxyCPU })
}

func (p *reporter) quietRow(tg string) *QuietRow {
	if p.r.Quiet == nil {
		return nil
	}
	return find(p.r.Quiet.Rows, func(x *QuietRow) bool { return x.Target == tg })
}

func (r *FwdRow) median() float64 {
	if r == nil || len(r.UsPerReq) == 0 {
		return math.NaN()
	}
	return median(r.UsPerReq)
}

// spread prints a row's windows as "min–max".
func spread(v []float64, prec int) string {
	if len(v) == 0 {
		return na
	}
	return num(slices.Min(v), prec) + "–" + num(slices.Max(v), prec)
}

// --- summary rows ---

// floorSummaryRows are the summary rows of issue 12's targets that come from the floor
// scenarios and the profiles.
func (p *reporter) heartbeatSummaryRow() sumRow {
	hr := p.r.Heartbeat
	r, fl, sg, pairs := hr.ratio()
	known := len(pairs) > 0
	row := sumRow{
		figure: fmt.Sprintf("CPU per answered heartbeat, %s consumers beating every second: Stormgate ÷ the bare epoll responder (same run, alternating windows, median of %d)", count(uint64(p.r.Options.HBConns)), max(len(pairs), p.r.Options.HBPairs)),
		d:      "–", h: "–", target: fmt.Sprintf("≤ %s×", num(targetHBRatio, 2)), known: known, ok: r <= targetHBRatio,
	}
	row.s = na
	if known {
		row.s = fmt.Sprintf("%s (responder %s)", usStr(sg), usStr(fl))
		row.verdict = num(r, 2) + "×: " + verdict(true, r <= targetHBRatio)
		row.note = fmt.Sprintf("%s above the target: Stormgate spent %s per heartbeat, %s more than the %s the target allows (responder %s × %s). %s",
			pctOver(r, targetHBRatio), usStr(sg), usStr(sg-targetHBRatio*fl), usStr(targetHBRatio*fl), usStr(fl), num(targetHBRatio, 2),
			p.profileWhy(profileHeartbeat, hbFloor, "the responder"))
		if pr := p.profile(profileHeartbeat, stormgate); pr != nil {
			row.note += text("note-heartbeat-room", usStr((targetHBRatio-1)*fl), usStr(shareUs(pr, catNetpoll)))
		}
		if nr, _, nu, nps := hr.ratioOf(npFloor); len(nps) > 0 {
			row.note += text("note-heartbeat-npfloor", usStr(nu), num(nr, 2))
		}
	}
	return row
}

func (p *reporter) quietSummaryRow() sumRow {
	d, h, s := p.quietRow(direct), p.quietRow(haproxy), p.quietRow(stormgate)
	cores := func(x *QuietRow) float64 {
		if x == nil {
			return math.NaN()
		}
		return x.Cores()
	}
	sv := cores(s)
	row := sumRow{
		figure: fmt.Sprintf("CPU with no consumer connected, over %s (Direct: the dubbo-go provider alone)", dur(p.r.Options.QuietWindow)),
		d:      pctCore3(cores(d)), h: pctCore3(cores(h)), s: pctCore3(sv), target: "Stormgate ≤ " + pctCore2(targetQuiet),
		known: s != nil, ok: sv <= targetQuiet,
	}
	if s != nil {
		pr := p.profile(profileQuiet, stormgate)
		row.note = fmt.Sprintf("%s of a core over the target (%s of CPU in %s). %s", pctCore3(sv-targetQuiet), s.CPUTime.Round(100*time.Microsecond), dur(s.Elapsed), quietWhy(pr, p.profile(profileQuiet, haproxy)))
	}
	return row
}

func (p *reporter) idle30SummaryRow() sumRow {
	hv, sv := p.idle30CPU(haproxy), p.idle30CPU(stormgate)
	row := sumRow{
		figure: fmt.Sprintf("Proxy CPU with %s idle consumers heartbeating every 30 s", count(uint64(p.r.Options.IdleConns))),
		d:      "–", h: pctCore2(hv), s: pctCore2(sv), target: "Stormgate ≤ HAProxy", known: !math.IsNaN(hv + sv), ok: sv <= hv,
	}
	if row.known {
		row.note = p.idle30Why(hv, sv)
	}
	return row
}

// idle30Why explains Stormgate's proxy CPU (sv) above HAProxy's (hv) with the idle consumers
// heartbeating every 30 s.
func (p *reporter) idle30Why(hv, sv float64) string {
	return fmt.Sprintf("Stormgate used %s of a core more than HAProxy (%s of its own with nothing connected, section 8). %s",
		pctCore2(sv-hv), pctCore2(fQuiet(p.quietRow(stormgate))), p.profileWhy(profileIdle30, haproxy, "HAProxy"))
}

func (p *reporter) forwardSummaryRows() []sumRow {
	var rows []sumRow
	for _, l := range p.r.Options.FwdLoads {
		h, s, f, n := p.fwdRow(haproxy, l), p.fwdRow(stormgate, l), p.fwdRow(fwdFloor, l), p.fwdRow(npFwd, l)
		hv, sv, fv, nv := h.median(), s.median(), f.median(), n.median()
		row := sumRow{
			figure: fmt.Sprintf("Proxy CPU per forwarded request, SayHello on the dubbo-go provider, %s conns, %s req/s: Stormgate ÷ HAProxy (median of %d alternating rounds)",
				count(uint64(l.Conns)), num(l.Rate, 0), p.r.Options.FwdWindows),
			d: "–", h: usStr(hv), s: usStr(sv), target: fmt.Sprintf("≤ %s×", num(targetFwdRatio, 1)),
			known: !math.IsNaN(hv+sv) && hv > 0, ok: sv <= targetFwdRatio*hv,
		}
		if row.known {
			row.s += " (" + ratio(sv, hv) + ")"
			row.note = text("note-forward-ratio", pctOver(sv/hv, targetFwdRatio), usStr(sv), usStr(sv-targetFwdRatio*hv), usStr(targetFwdRatio*hv), usStr(hv), num(targetFwdRatio, 1), usStr(fv), p.profileWhy(profileForward(l), haproxy, "HAProxy"))
			if pr := p.profile(profileForward(l), stormgate); pr != nil {
				row.note += text("note-forward-kernel", usStr(shareUs(pr, catKernel)), usStr(targetFwdRatio*hv))
			}
			if !math.IsNaN(nv) {
				row.note += text("note-forward-npfwd", usStr(nv), ratio(nv, hv), ratio(nv, fv), ratio(sv, nv))
			}
		}
		rows = append(rows, row)
		if lr := p.labelCostRow(l); lr.known {
			rows = append(rows, lr)
		}
		if br := p.baseCostRow(l); br.known {
			rows = append(rows, br)
		}
	}
	return rows
}

// labelCostRow is issue 25's figure: Stormgate's CPU per forwarded request with per-method metrics
// (the default) over the same with metrics.max_methods 0. The verdict is the side-by-side
// measurement's (scen_labelpair.go) when it ran, else the alternating rounds'; the row shows both.
func (p *reporter) labelCostRow(l FwdLoad) sumRow {
	s, n := p.fwdRow(stormgate, l), p.fwdRow(stormgateNoLabels, l)
	if s == nil || n == nil {
		return sumRow{}
	}
	sv, nv := s.median(), n.median()
	row := sumRow{
		figure: fmt.Sprintf("Stormgate CPU per forwarded request with per-method metrics ÷ without (metrics.max_methods 0), %s conns, %s req/s (median of %d alternating rounds)",
			count(uint64(l.Conns)), num(l.Rate, 0), p.r.Options.FwdWindows),
		d: "–", h: "–", s: usStr(sv) + " ÷ " + usStr(nv) + " (" + ratio(sv, nv) + ")", target: fmt.Sprintf("≤ %s×", num(targetLabelCost, 2)),
		known: !math.IsNaN(sv+nv) && nv > 0, ok: sv <= targetLabelCost*nv,
	}
	if row.known {
		row.note = text("note-label-cost", usStr(slices.Min(s.UsPerReq)), usStr(slices.Max(s.UsPerReq)), usStr(slices.Min(n.UsPerReq)), usStr(slices.Max(n.UsPerReq)))
	}
	pr := p.fwdPair(l)
	if pr == nil || len(pr.Ratios) == 0 {
		return row
	}
	r := pr.Ratio()
	row.figure = fmt.Sprintf("Stormgate CPU per forwarded request with per-method metrics ÷ without (metrics.max_methods 0), %s conns, %s req/s each, side by side (median of %d windows' ratios)",
		count(uint64(l.Conns)), num(l.Rate, 0), len(pr.Ratios))
	row.s = fmt.Sprintf("%s× (%s ÷ %s); alternating rounds: %s ÷ %s (%s)", num(r, 2), usStr(median(pr.With)), usStr(median(pr.Without)),
		usStr(sv), usStr(nv), ratio(sv, nv))
	row.known, row.ok = true, r <= targetLabelCost
	row.note = text("note-label-cost-pair", num(slices.Min(pr.Ratios), 3), num(slices.Max(pr.Ratios), 3), num(pr.Cores, 2), count(pr.Failed), row.note)
	if pr.Failed > 0 {
		// Calls that failed were not carried at the load the row names: the machine could not
		// run both pairs at once, and their CPU is not a cost per answered request.
		row.ok = false
		row.verdict = fmt.Sprintf("no verdict: %s of %s calls failed side by side", count(pr.Failed), count(pr.Sent))
	}
	return row
}

// fwdPair is the side-by-side measurement of load l, nil when it did not run.
func (p *reporter) fwdPair(l FwdLoad) *FwdPair {
	if p.r.Forward == nil {
		return nil
	}
	for i := range p.r.Forward.Pairs {
		if pr := &p.r.Forward.Pairs[i]; pr.Conns == l.Conns && pr.Rate == l.Rate && pr.Error == "" {
			return pr
		}
	}
	return nil
}

// fwdTargets are the forward scenario's targets in this run: fwdTargets, and the base commit's
// sidecar when it ran.
func (p *reporter) fwdTargets() []string {
	if f := p.r.Forward; f != nil && f.Base != "" {
		return append(slices.Clone(fwdTargets), stormgateBase)
	}
	return fwdTargets
}

// baseCostRow is Stormgate's CPU per forwarded request over the base commit's (BENCH_BASE_REF), in
// the same alternating rounds: what a change costs the common case (issue 23: fairness must not
// cost more than 5 %). This commit runs with per-method metrics off (stormgate-nolabels), as a base
// from before they existed did; their own cost has its row (labelCostRow).
func (p *reporter) baseCostRow(l FwdLoad) sumRow {
	s, b := p.fwdRow(stormgateNoLabels, l), p.fwdRow(stormgateBase, l)
	if s == nil || b == nil {
		return sumRow{}
	}
	sv, bv := s.median(), b.median()
	row := sumRow{
		figure: fmt.Sprintf("Stormgate CPU per forwarded request (per-method metrics off) ÷ the same at %s, %s conns, %s req/s (median of %d alternating rounds)",
			p.r.Forward.Base, count(uint64(l.Conns)), num(l.Rate, 0), p.r.Options.FwdWindows),
		d: "–", h: "–", s: usStr(sv) + " ÷ " + usStr(bv) + " (" + ratio(sv, bv) + ")", target: fmt.Sprintf("≤ %s×", num(targetBaseCost, 2)),
		known: !math.IsNaN(sv+bv) && bv > 0, ok: sv <= targetBaseCost*bv,
	}
	if row.known {
		row.note = fmt.Sprintf("Each round measured both binaries on the same load; the rounds' spread was %s to %s for this commit and %s to %s at %s.",
			usStr(slices.Min(s.UsPerReq)), usStr(slices.Max(s.UsPerReq)), usStr(slices.Min(b.UsPerReq)), usStr(slices.Max(b.UsPerReq)), p.r.Forward.Base)
	}
	return row
}

func (p *reporter) throughputSummaryRow(c int) sumRow {
	d, h, s := p.tp(direct, c), p.tp(haproxy, c), p.tp(stormgate, c)
	hv, sv := fTP(h), fTP(s)
	row := sumRow{
		figure: fmt.Sprintf("Max throughput, small requests, %s conns: Stormgate ÷ HAProxy", count(uint64(c))),
		d:      tpLabel(d) + " req/s", h: tpLabel(h) + " req/s", s: tpLabel(s) + " req/s", target: fmt.Sprintf("≥ %s×", num(targetTPRatio, 1)),
		known: !math.IsNaN(hv + sv), ok: sv >= targetTPRatio*hv,
	}
	r, b := p.tpRatio(c)
	switch b {
	case lowerBound:
		row.known, row.ok = true, r >= targetTPRatio
		row.verdict = "> " + num(r, 2) + "×: " + verdict(true, row.ok)
		row.note = fmt.Sprintf("HAProxy failed even its first rate (%s req/s), so the ratio is only bounded below.", num(lowestFailed(h), 0))
		return row
	case upperBound:
		row.known, row.ok = true, r >= targetTPRatio
		row.verdict = "< " + num(r, 2) + "×: " + verdict(true, row.ok)
		row.note = fmt.Sprintf("Stormgate failed even its first rate (%s req/s). %s", num(lowestFailed(s), 0), p.profileWhy(profileThroughput, "", ""))
		return row
	}
	if row.known {
		row.verdict = ratio(sv, hv) + ": " + verdict(true, row.ok)
		row.note = text("note-throughput-ratio", pctUnder(sv/hv, targetTPRatio), num(targetTPRatio*hv, 0)) + " " + p.tpWhy(c)
	}
	return row
}

// valueBound says where a figure lies relative to the value printed for it.
type valueBound int

const (
	exactValue valueBound = iota
	lowerBound            // the figure is above the value
	upperBound            // the figure is below the value
)

// tpRatio is Stormgate's max throughput ÷ HAProxy's at c connections, NaN when either was not
// measured. A series whose first rate failed has only a bound, below that rate, and so has the
// ratio: b says which side of r the ratio lies on (exactValue when both passed a rate).
func (p *reporter) tpRatio(c int) (r float64, b valueBound) {
	h, s := p.tp(haproxy, c), p.tp(stormgate, c)
	hv, sv := fTP(h), fTP(s)
	hLow, sLow := lowestFailed(h), lowestFailed(s)
	switch {
	case !math.IsNaN(sv) && math.IsNaN(hv) && hLow > 0:
		return sv / hLow, lowerBound
	case math.IsNaN(sv) && !math.IsNaN(hv) && sLow > 0:
		return sLow / hv, upperBound
	}
	return sv / hv, exactValue
}

// tpWhy explains Stormgate's max throughput at c connections: its CPU at its maximum against
// HAProxy's, and its profile there.
func (p *reporter) tpWhy(c int) string {
	why := ""
	if s := p.tp(stormgate, c); s != nil && s.maxStep() != nil {
		st := s.maxStep()
		why = fmt.Sprintf("At its maximum Stormgate used %s (%s per request); HAProxy at its own %s. ", pctCore(st.ProxyCPU), usStr(st.ProxyUsPerReq), maxStepCPU(p.tp(haproxy, c)))
	}
	return why + p.profileWhy(profileThroughput, "", "")
}

// lowestFailed is the lowest rate a series tried when none passed (0 otherwise).
func lowestFailed(se *TPSeries) float64 {
	if se == nil || se.Max > 0 || len(se.Steps) == 0 {
		return 0
	}
	low := se.Steps[0].Rate
	for _, st := range se.Steps {
		low = math.Min(low, st.Rate)
	}
	return low
}

func maxStepCPU(se *TPSeries) string {
	if se == nil || se.maxStep() == nil {
		return na
	}
	st := se.maxStep()
	return pctCore(st.ProxyCPU) + " (" + usStr(st.ProxyUsPerReq) + " per request)"
}

func fQuiet(x *QuietRow) float64 {
	if x == nil {
		return math.NaN()
	}
	return x.Cores()
}

// pctOver prints how far a ratio is above its target, as a percentage of the target.
func pctOver(r, target float64) string { return num(100*(r/target-1), 0) + " %" }

// pctUnder prints how far a ratio is below its target.
func pctUnder(r, target float64) string { return num(100*(1-r/target), 0) + " %" }

// pctCore3 prints cores as a percentage of one core with three decimals (CPU while idle).
func pctCore3(v float64) string {
	if math.IsNaN(v) {
		return na
	}
	return num(100*v, 3) + " %"
}

// pctCore2 prints cores as a percentage of one core with two decimals (for small figures).
func pctCore2(v float64) string {
	if math.IsNaN(v) {
		return na
	}
	return num(100*v, 2) + " %"
}

// --- why, from the profiles ---

// profileWhy explains a missed figure with Stormgate's profile for key: per operation, the
// system calls and context switches against the comparison target's (when given), the kernel's
// share against it, and the split of Stormgate's own CPU with its largest items.
func (p *reporter) profileWhy(key, vsTarget, vsName string) string {
	return p.profileWhyTarget(key, stormgate, vsTarget, vsName)
}

// profileWhyTarget is profileWhy for the Stormgate profile of key recorded under target name tg
// (an arm of a comparison between two Stormgates).
func (p *reporter) profileWhyTarget(key, tg, vsTarget, vsName string) string {
	sg := p.profile(key, tg)
	if sg == nil {
		return "No profile was captured for it in this run."
	}
	var parts []string
	// Per operation, except where the operations are too few to carry the process's own
	// background (idle consumers at 30 s: per second, with the operations per second).
	perSec := sg.OpName == "" || key == profileIdle30
	per := "per " + sg.OpName
	if perSec {
		per = "per second"
		if sg.Ops > 0 && sg.Window > 0 {
			per = fmt.Sprintf("per second (%s %ss per second)", num(sg.Ops/sg.Window.Seconds(), 0), sg.OpName)
		}
	}
	perf := func(x *Profile, n float64) float64 {
		if perSec {
			return x.perfPerSec(n)
		}
		return x.perfPerOp(n)
	}
	sys, cs := perf(sg, sg.Syscalls), perf(sg, sg.CtxSwitches)
	prec := 2
	if perSec {
		prec = 0
	}
	if sys >= 0 {
		s := fmt.Sprintf("%s Stormgate made %s system calls and %s context switches", upperFirst(per), num(sys, prec), num(cs, prec))
		if vs := p.profile(key, vsTarget); vs != nil && perf(vs, vs.Syscalls) >= 0 {
			s += fmt.Sprintf(" against %s's %s and %s", vsName, num(perf(vs, vs.Syscalls), prec), num(perf(vs, vs.CtxSwitches), prec))
		}
		parts = append(parts, s+".")
	}
	if split := sg.Split; len(split) > 0 {
		parts = append(parts, "Its profile (section 10): "+splitText(split, sg)+".")
	} else if len(sg.PprofSplit) > 0 {
		parts = append(parts, "Its Go profile (section 10; perf was not available, so the kernel share is the time charged to system-call functions): "+splitText(sg.PprofSplit, sg)+".")
	}
	if len(sg.Kernel) > 0 {
		parts = append(parts, "Kernel time by system call: "+kernelText(sg.Kernel, 4)+".")
	}
	if len(sg.Runtime) > 0 {
		parts = append(parts, "Go runtime time by what it did: "+kernelText(sg.Runtime, 4)+".")
	}
	return strings.Join(parts, " ")
}

// shareUs is the CPU per operation a profile charges to one owner (kernel, netpoll, ...):
// its share of the perf samples times the window's CPU per operation; 0 when unknown.
func shareUs(pr *Profile, name string) float64 {
	for _, s := range pr.Split {
		if s.Name == name && pr.Ops > 0 {
			return s.Frac * pr.perOp(pr.CPU)
		}
	}
	return 0
}

// splitText prints a split as "kernel 58 % (12.1 µs), Go runtime 20 % (top: runtime.findRunnable), …".
func splitText(split []Share, pr *Profile) string {
	var out []string
	for _, s := range split {
		if s.Frac <= 0 {
			continue
		}
		t := s.Name + " " + num(100*s.Frac, 0) + " %"
		if pr.Ops > 0 {
			t += " (" + usStr(s.Frac*pr.perOp(pr.CPU)) + ")"
		}
		if s.Top != "" && s.Name != catKernel {
			t += ", largest " + shortFunc(s.Top)
		}
		out = append(out, t)
	}
	return strings.Join(out, "; ")
}

// kernelText prints the n largest shares as "write 38 %, readv 6 %", leaving out perf's own
// tracing (the profiled window's cost, not the target's).
func kernelText(k []Share, n int) string {
	var out []string
	for _, s := range k {
		if len(out) == n {
			break
		}
		if s.Name == kernPerfTrace {
			continue
		}
		out = append(out, fmt.Sprintf("%s %s %%", s.Name, num(100*s.Frac, 0)))
	}
	return strings.Join(out, ", ")
}

// quietWhy explains Stormgate's CPU with nothing connected from its quiet profile.
func quietWhy(sg, ha *Profile) string {
	if sg == nil {
		return "No profile was captured for it in this run."
	}
	s := ""
	if sg.Syscalls >= 0 {
		s = fmt.Sprintf("With nothing to do Stormgate made %s system calls and %s context switches per second", num(sg.perfPerSec(sg.Syscalls), 1), num(sg.perfPerSec(sg.CtxSwitches), 1))
		if ha != nil && ha.Syscalls >= 0 {
			s += fmt.Sprintf(" (HAProxy: %s and %s)", num(ha.perfPerSec(ha.Syscalls), 1), num(ha.perfPerSec(ha.CtxSwitches), 1))
		}
		s += ": each is a timer or a poller waking up."
	}
	if len(sg.Kernel) > 0 {
		s += " Kernel time by system call (section 10): " + kernelText(sg.Kernel, 4) + "."
	}
	return strings.TrimSpace(s)
}

// callerText prints a share's top item: a function in code format, or the runtime's own
// activity ("the runtime: sysmon") as text.
func callerText(s string) string {
	switch {
	case s == "":
		return "–"
	case strings.HasPrefix(s, "the runtime"):
		return s
	}
	if fn, rest, ok := strings.Cut(s, " via the runtime"); ok {
		return shortFunc(fn) + " via the runtime" + rest
	}
	return shortFunc(s)
}

// shortFunc trims the module path off a function name for prose.
func shortFunc(fn string) string {
	for _, p := range []string{"github.com/stormgate/stormgate/", "github.com/cloudwego/", "github.com/bytedance/gopkg/"} {
		fn = strings.ReplaceAll(fn, p, "")
	}
	return "`" + fn + "`"
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// --- sections ---

func (p *reporter) heartbeatSection() {
	d := struct {
		Opt                      Options
		HR                       *HeartbeatResult
		Ratio, Floor, SG, Target float64
		Met                      bool
		Pairs, NPPairs           []float64
		NPRatio, NPUs, SGOverNP  float64
		Targets, Commands        []string
	}{Opt: p.r.Options, HR: p.r.Heartbeat, Target: targetHBRatio, Targets: hbTargets}
	if hr := d.HR; hr != nil {
		d.Ratio, d.Floor, d.SG, d.Pairs = hr.ratio()
		d.Met = d.Ratio <= targetHBRatio
		d.NPRatio, _, d.NPUs, d.NPPairs = hr.ratioOf(npFloor)
		d.SGOverNP = hr.overNetpoll()
		for _, tg := range hbTargets {
			d.Commands = append(d.Commands, hr.Commands[tg])
		}
	}
	p.exec("heartbeat", d)
}

func (p *reporter) quietSection() {
	type row struct{ Name, CPU, CPUTime, RSS, Sys, CS string }
	d := struct {
		Opt        Options
		Q          *QuietResult
		Procs      int
		Rows       []row
		HA30, SG30 string
	}{Opt: p.r.Options, Q: p.r.Quiet, Procs: haproxyProcs}
	if d.Q != nil {
		for _, x := range d.Q.Rows {
			r := row{Name: targetTitle[x.Target], CPU: pctCore3(x.Cores()), CPUTime: x.CPUTime.Round(100 * time.Microsecond).String(),
				RSS: num(x.RSSMiB, 1), Sys: "–", CS: "–"}
			if pr := p.profile(profileQuiet, x.Target); pr != nil && pr.Syscalls >= 0 {
				r.Sys, r.CS = num(pr.perfPerSec(pr.Syscalls), 1), num(pr.perfPerSec(pr.CtxSwitches), 1)
			}
			if x.Target == direct {
				r.Name = "dubbo-go provider"
			}
			if x.Ticks {
				r.CPUTime = x.CPUTime.Round(time.Millisecond).String() + " (10 ms ticks)"
			}
			d.Rows = append(d.Rows, r)
		}
	}
	pc := func(x *IdleRow) float64 { return x.ProxyCPU }
	d.HA30, d.SG30 = pctCore2(fIdle(p.idle(haproxy, 30*time.Second), pc)), pctCore2(fIdle(p.idle(stormgate, 30*time.Second), pc))
	p.exec("quiet", d)
}

func (p *reporter) forwardSection() {
	type row struct {
		Load, Target, Missing                                                       string
		Median, Spread, Kernel, VsHAProxy, CPU, Provider, Sys, CS, P50, P99, Failed string
	}
	d := struct {
		Opt               Options
		DubboGo, Arg, Img string
		Upstreams         int
		Rows              []row
		Pairs             []pairRow
		Commands          []string
	}{Opt: p.r.Options, DubboGo: p.r.Machine.DubboGo, Arg: fwdArg, Img: p.img, Upstreams: floorUpstreamConns}
	for _, l := range p.r.Options.FwdLoads {
		load := fmt.Sprintf("%s conns, %s req/s", count(uint64(l.Conns)), num(l.Rate, 0))
		hv := p.fwdRow(haproxy, l).median()
		for _, tg := range p.fwdTargets() {
			x := p.fwdRow(tg, l)
			if x == nil {
				d.Rows = append(d.Rows, row{Load: load, Target: tg, Missing: p.fwdErr(tg, l)})
				continue
			}
			r := row{Load: load, Target: tg, Median: usStr(x.median()), Spread: spread(x.UsPerReq, 1), Kernel: usStr(median(x.SysUsPerReq)),
				VsHAProxy: "–", CPU: pctCore(median(x.ProxyCores)), Provider: usStr(median(x.ProviderUsPerReq)), Sys: na, CS: na,
				P50: msStr(x.P50ms), P99: msStr(x.P99ms), Failed: count(x.Failed)}
			if sys, cs := p.fwdPerf(tg, l); !math.IsNaN(sys) {
				r.Sys, r.CS = num(sys, 2), num(cs, 2)
			}
			if tg != haproxy {
				r.VsHAProxy = ratio(x.median(), hv)
			}
			d.Rows = append(d.Rows, r)
			d.Commands = append(d.Commands, x.Command)
		}
	}
	if f := p.r.Forward; f != nil {
		for _, x := range f.Pairs {
			r := pairRow{Load: fmt.Sprintf("%s conns, %s req/s each", count(uint64(x.Conns)), num(x.Rate, 0)), Missing: x.Error}
			if len(x.Ratios) > 0 {
				r.Ratio, r.Spread = num(x.Ratio(), 3)+"×", num(slices.Min(x.Ratios), 3)+"–"+num(slices.Max(x.Ratios), 3)
				r.With, r.Without = usStr(median(x.With)), usStr(median(x.Without))
				r.Cores, r.Failed = num(x.Cores, 2), count(x.Failed)
			} else if r.Missing == "" {
				r.Missing = "no window"
			}
			d.Pairs = append(d.Pairs, r)
		}
	}
	p.exec("forward", d)
}

// pairRow is one side-by-side measurement of the labels' cost in section 9.
type pairRow struct {
	Load, Missing                               string
	Ratio, Spread, With, Without, Cores, Failed string
}

func (p *reporter) fwdErr(tg string, l FwdLoad) string {
	if p.r.Forward != nil {
		for _, x := range p.r.Forward.Rows {
			if x.Target == tg && x.Conns == l.Conns && x.Rate == l.Rate && x.Error != "" {
				return "not measured: " + oneLine(x.Error)
			}
		}
	}
	return "not measured"
}

// profileScenarios are the profiled windows in the order section 10 shows them.
// profileScenario is one subsection of section 10: a profile key, its title, and the target name
// Stormgate's profile is recorded under.
type profileScenario struct{ key, title, sg string }

func (p *reporter) profileScenarios() []profileScenario {
	out := []profileScenario{
		{profileQuiet, "No consumer connected", stormgate},
		{profileHeartbeat, fmt.Sprintf("%s consumers heartbeating every second", count(uint64(p.r.Options.HBConns))), stormgate},
		{profileIdle30, fmt.Sprintf("%s consumers heartbeating every 30 s", count(uint64(p.r.Options.IdleConns))), stormgate},
	}
	for _, l := range p.r.Options.FwdLoads {
		out = append(out, profileScenario{profileForward(l),
			fmt.Sprintf("Forwarding SayHello, %s conns, %s req/s (dubbo-go provider)", count(uint64(l.Conns)), num(l.Rate, 0)), stormgate})
	}
	tc := 0
	if cs := p.tpConns(); len(cs) > 0 {
		tc = slices.Max(cs)
	}
	out = append(out, profileScenario{profileThroughput,
		fmt.Sprintf("At Stormgate's maximum throughput, %s conns (fast provider)", count(uint64(tc))), stormgate})
	return append(out, p.tripleProfileScenarios()...)
}

func (p *reporter) profilesSection() {
	type row struct{ Title, Target, CPU, Kernel, Runtime, Netpoll, SG, Other, Sys, CS, Samples string }
	type section struct {
		Title string
		Pr    *Profile
	}
	d := struct {
		Perf       bool
		Freq, TopN int
		Rows       []row
		Sections   []section
	}{Perf: p.r.Machine.Perf, Freq: perfFreq, TopN: pprofTopN}
	for _, sc := range p.profileScenarios() {
		d.Sections = append(d.Sections, section{sc.title, p.profile(sc.key, sc.sg)})
		for _, pr := range p.r.Profiles {
			if pr.Scenario != sc.key {
				continue
			}
			r := row{Title: sc.title, Target: pr.Target, CPU: pctCore3(float64(pr.CPU) / float64(max(pr.Window, 1))), Sys: "–", CS: "–",
				Samples: count(uint64(pr.PerfSamples))}
			if pr.Ops > 0 {
				r.CPU = usStr(pr.perOp(pr.CPU)) + " per " + pr.OpName
				if pr.Syscalls >= 0 {
					r.Sys, r.CS = num(pr.perfPerOp(pr.Syscalls), 2), num(pr.perfPerOp(pr.CtxSwitches), 2)
				}
			} else if pr.Syscalls >= 0 {
				r.Sys, r.CS = num(pr.perfPerSec(pr.Syscalls), 1)+"/s", num(pr.perfPerSec(pr.CtxSwitches), 1)+"/s"
			}
			split := pr.Split
			if len(split) == 0 {
				split = pr.PprofSplit
			}
			cells := map[string]string{}
			for _, s := range split {
				cells[s.Name] = num(100*s.Frac, 0) + " %"
			}
			cell := func(c string) string {
				if v, ok := cells[c]; ok {
					return v
				}
				return na
			}
			r.Kernel, r.Runtime, r.Netpoll, r.SG, r.Other = cell(catKernel), cell(catRuntime), cell(catNetpoll), cell(catSG), cell(catOther)
			d.Rows = append(d.Rows, r)
		}
	}
	p.exec("profiles", d)
}

// fwdLossWhy explains Stormgate's CPU per request from the forward scenario's largest load.
func (p *reporter) fwdLossWhy() string {
	ls := p.r.Options.FwdLoads
	if len(ls) == 0 {
		return "not measured."
	}
	return p.profileWhy(profileForward(ls[len(ls)-1]), haproxy, "HAProxy")
}

// floorPlot is CPU per operation for the floors (bare epoll and netpoll), HAProxy and Stormgate: heartbeats (the responders
// against Stormgate) and forwarded requests at each forward load.
func (p *reporter) floorPlot() []byte {
	groups := []string{"heartbeat"}
	floor := barSeries{Name: "bare epoll floor", Color: targetColor[hbFloor]}
	npf := barSeries{Name: "netpoll floor", Color: targetColor[npFloor]}
	ha := barSeries{Name: targetTitle[haproxy], Color: targetColor[haproxy]}
	sg := barSeries{Name: targetTitle[stormgate], Color: targetColor[stormgate]}
	_, fl, s, pairs := p.r.Heartbeat.ratio()
	if len(pairs) == 0 {
		fl, s = math.NaN(), math.NaN()
	}
	nf := math.NaN()
	if _, _, nu, nps := p.r.Heartbeat.ratioOf(npFloor); len(nps) > 0 {
		nf = nu
	}
	floor.Values, npf.Values, ha.Values, sg.Values = []float64{fl}, []float64{nf}, []float64{math.NaN()}, []float64{s}
	ha.Labels = []string{"–"}
	for _, l := range p.r.Options.FwdLoads {
		groups = append(groups, fmt.Sprintf("SayHello %s conns %s/s", shortNum(float64(l.Conns)), shortNum(l.Rate)))
		floor.Values = append(floor.Values, p.fwdRow(fwdFloor, l).median())
		npf.Values = append(npf.Values, p.fwdRow(npFwd, l).median())
		ha.Values = append(ha.Values, p.fwdRow(haproxy, l).median())
		sg.Values = append(sg.Values, p.fwdRow(stormgate, l).median())
		ha.Labels = append(ha.Labels, "")
	}
	return barChart(chart{
		Title:  "CPU per heartbeat and per forwarded request (medians)",
		XLabel: "operation", YLabel: "CPU µs per operation",
	}, groups, []barSeries{floor, npf, ha, sg})
}

// steadyP99Row is the p99 added over direct from the median of the load tool's one-second p99s
// (the row above it takes the whole request phase's p99, which one stall of a shared core can
// move by milliseconds).
func (p *reporter) steadyP99Row(ld, lh, ls *LatencyRow) sumRow {
	m := func(x *LatencyRow) float64 {
		if x == nil || x.P99Seconds == 0 {
			return math.NaN()
		}
		return x.MedianP99ms
	}
	d, h, s := m(ld), m(lh), m(ls)
	add := s - d
	return sumRow{
		figure: fmt.Sprintf("The same, p99 as the median of the one-second p99s after the first 2 s (%d seconds)", ls.p99Seconds()),
		d:      msStr(d), h: msStr(h) + " (" + signedMs(h-d) + ")", s: msStr(s) + " (" + signedMs(add) + ")",
		target: "added ≤ " + msStr(targetAddedP99), known: !math.IsNaN(add), ok: add <= targetAddedP99,
		note: text("note-steady-p99", signedMs(add-targetAddedP99), signedMs(h-d), p.r.Machine.LoadAvgPost),
	}
}

func (x *LatencyRow) p99Seconds() int {
	if x == nil {
		return 0
	}
	return x.P99Seconds
}

// medianSecondP99 is the median of a run's one-second p99s (progress lines of the request
// phase) after lead, and how many there were.
func medianSecondP99(run *loadRun, lead time.Duration) (float64, int) {
	var v []float64
	for _, pr := range run.Series {
		if pr.Phase == "run" && pr.At.After(run.RunAt.Add(lead)) {
			v = append(v, pr.P99ms)
		}
	}
	if len(v) == 0 {
		return 0, 0
	}
	return median(v), len(v)
}
