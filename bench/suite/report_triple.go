package main

import (
	"fmt"
	"math"
)

// Issue 27's targets for the Triple rows.
const (
	targetPingRatio       = 1.2 // Stormgate CPU per PING ÷ its CPU per Dubbo heartbeat
	targetTripleFwdRatio  = 1.0 // proxy CPU per unary call, Stormgate ÷ HAProxy in HTTP/2 mode
	targetTripleProvRatio = 10  // provider CPU with idle h2c consumers, direct ÷ through Stormgate
)

// tripleRan reports whether any Triple scenario has a result (the section and its summary rows
// are left out of a run without them).
func (p *reporter) tripleRan() bool {
	r := p.r
	return r.TripleIdle != nil || r.TriplePing != nil || r.TripleForward != nil || r.TripleRestart != nil || r.TripleStorm != nil
}

// tripleStormRows are the Triple storm's rows, HAProxy and Stormgate.
func (p *reporter) tripleStormRows() []targetRow[StormRow] {
	var rows []targetRow[StormRow]
	for _, tg := range []string{haproxy, stormgate} {
		var x *StormRow
		if r := p.r.TripleStorm; r != nil {
			x = find(r.Rows, func(sr *StormRow) bool { return sr.Target == tg && sr.Error == "" })
		}
		rows = append(rows, targetRow[StormRow]{tg, x})
	}
	return rows
}

func (p *reporter) tripleIdleRow(tg string) *IdleRow {
	if p.r.TripleIdle == nil {
		return nil
	}
	return find(p.r.TripleIdle.Rows, func(x *IdleRow) bool { return x.Target == tg && x.Error == "" })
}

func (p *reporter) tripleFwdRow(tg string, l FwdLoad) *FwdRow {
	if p.r.TripleForward == nil {
		return nil
	}
	return find(p.r.TripleForward.Rows, func(x *FwdRow) bool {
		return x.Target == tg && x.Conns == l.Conns && x.Rate == l.Rate && len(x.UsPerReq) > 0
	})
}

// tripleRestartRows are the kill (graceful false) or graceful rows, one per target.
func (p *reporter) tripleRestartRows(graceful bool) []targetRow[RestartRow] {
	var rows []targetRow[RestartRow]
	for _, tg := range targets {
		var x *RestartRow
		if r := p.r.TripleRestart; r != nil {
			src := r.Rows
			if graceful {
				src = r.Graceful
			}
			x = find(src, func(rr *RestartRow) bool { return rr.Target == tg && rr.Error == "" })
		}
		rows = append(rows, targetRow[RestartRow]{tg, x})
	}
	return rows
}

// triplePingRatio is Stormgate's CPU per PING ÷ its CPU per Dubbo heartbeat, median of the rounds.
func (p *reporter) triplePingRatio() (ratio, dubboUs, tripleUs float64, pairs []float64) {
	return p.r.TriplePing.ratioTo(armDubbo, armTriple)
}

// tripleParts are the Triple scenarios in the order of their rows and subsections: each has a
// subsection of section 13 between its own markers and its own summary rows, so that a run of some
// of them (--update-section) rewrites theirs and keeps the others' (tripleSubsection).
var tripleParts = []struct {
	name string
	ran  func(*Results) bool
	rows func(*reporter) []sumRow
}{
	{"triple-idle", func(r *Results) bool { return r.TripleIdle != nil }, (*reporter).tripleIdleSummary},
	{"triple-ping", func(r *Results) bool { return r.TriplePing != nil }, (*reporter).triplePingSummary},
	{"triple-forward", func(r *Results) bool { return r.TripleForward != nil }, (*reporter).tripleFwdSummary},
	{"triple-restart", func(r *Results) bool { return r.TripleRestart != nil }, (*reporter).tripleRestartSummary},
	{"triple-storm", func(r *Results) bool { return r.TripleStorm != nil }, (*reporter).tripleStormSummary},
}

// tripleSummaryRows are the Triple rows of the summary table (issue 27, acceptance 3); none when no
// Triple scenario ran.
func (p *reporter) tripleSummaryRows() []sumRow {
	if !p.tripleRan() {
		return nil
	}
	var rows []sumRow
	for _, x := range tripleParts {
		rows = append(rows, x.rows(p)...)
	}
	return rows
}

func (p *reporter) tripleIdleSummary() []sumRow {
	d, h, s := p.tripleIdleRow(direct), p.tripleIdleRow(haproxy), p.tripleIdleRow(stormgate)
	provCPU := func(x *IdleRow) float64 { return x.ProviderCPU }
	ratioStr, ok, known := p.provRatio(fIdle(d, provCPU), s)
	return []sumRow{{
		figure: fmt.Sprintf("Triple: provider CPU, %s idle h2c consumers PINGing every 10 s (dubbo-go Triple provider)", count(uint64(p.r.Options.IdleConns))),
		d:      pctCore(fIdle(d, provCPU)), h: pctCore(fIdle(h, provCPU)), s: pctCore(fIdle(s, provCPU)),
		target: fmt.Sprintf("direct ÷ Stormgate ≥ %d×", targetTripleProvRatio),
		known:  known, ok: ok, verdict: ratioStr + ": " + verdict(known, ok),
		note: text("note-triple-provider-floor", pctCore(fIdle(s, provCPU)), pctCore(fIdle(h, provCPU)),
			pctCore(fIdle(d, provCPU)-fIdle(s, provCPU))),
	}}
}

func (p *reporter) triplePingSummary() []sumRow {
	r, du, tu, _ := p.triplePingRatio()
	pr := sumRow{
		figure: "Triple: Stormgate CPU per PING ÷ its CPU per Dubbo heartbeat (median of alternating rounds)",
		d:      "–", h: "–", s: na, target: fmt.Sprintf("≤ %s×", num(targetPingRatio, 1)), known: r > 0, ok: r <= targetPingRatio,
	}
	if r > 0 {
		pr.s = fmt.Sprintf("%s per PING, %s per heartbeat", usStr(tu), usStr(du))
		pr.verdict = num(r, 2) + "×: " + verdict(true, pr.ok)
		pr.note = text("note-ping-ratio", pctOver(r, targetPingRatio), p.profileWhyTarget(profileTriplePing, armTriple, armDubbo, "the Dubbo arm"))
	}
	return []sumRow{pr}
}

func (p *reporter) tripleFwdSummary() []sumRow {
	var rows []sumRow
	for _, l := range p.r.Options.FwdLoads {
		hv, sv := p.tripleFwdRow(haproxy, l).median(), p.tripleFwdRow(stormgate, l).median()
		row := sumRow{
			figure: fmt.Sprintf("Triple: proxy CPU per unary call at %s conns and %s calls/s (Echo on the dubbo-go Triple provider): Stormgate ÷ HAProxy in HTTP/2 mode",
				count(uint64(l.Conns)), num(l.Rate, 0)),
			d: "–", h: usStr(hv), s: usStr(sv), target: fmt.Sprintf("≤ %s×", num(targetTripleFwdRatio, 1)),
			known: !math.IsNaN(hv+sv) && hv > 0, ok: sv <= targetTripleFwdRatio*hv,
		}
		if row.known {
			row.s += " (" + ratio(sv, hv) + ")"
			row.note = text("note-triple-forward", pctOver(sv/hv, targetTripleFwdRatio), p.profileWhyTarget(tripleForward.profileKey(l), stormgate, haproxy, "HAProxy"))
		}
		rows = append(rows, row)
	}
	return rows
}

func (p *reporter) tripleRestartSummary() []sumRow {
	var rows []sumRow
	for _, graceful := range []bool{false, true} {
		cells := map[string]string{}
		var sg *RestartRow
		for _, x := range p.tripleRestartRows(graceful) {
			cells[x.Target] = na
			if x.X != nil {
				cells[x.Target] = fmt.Sprintf("%s failed, %s closed", count(x.X.visibleErrors()), count(x.X.ClosedByPeer))
			}
			if x.Target == stormgate {
				sg = x.X
			}
		}
		conns := count(uint64(p.r.Options.RestartConns))
		row := sumRow{figure: "Triple: provider SIGKILL and restart, " + conns + " h2c consumers: failed calls, connections closed",
			d: cells[direct], h: cells[haproxy], s: cells[stormgate],
			target: "0 closed; only calls the provider had read fail", known: sg != nil,
			note: text("note-triple-kill")}
		if graceful {
			row.figure = "Triple: provider graceful restart (SIGTERM), " + conns + " h2c consumers: failed calls, connections closed"
			row.target, row.note = "0 closed, 0 failed", text("note-triple-graceful")
		}
		if sg != nil {
			row.ok = sg.ClosedByPeer == 0 && sg.visibleErrors() == 0
			if !graceful && sg.ClosedByPeer == 0 && sg.visibleErrors() > 0 {
				// Failures are allowed for calls the provider had read, which are not counted here.
				row.verdict = "not judged: the provider's reads are not counted"
			}
		}
		rows = append(rows, row)
	}
	return rows
}

func (p *reporter) tripleStormSummary() []sumRow {
	st := sumRow{figure: fmt.Sprintf("Triple: accept storm of %s h2c connections at once: listen overflows", count(uint64(p.r.Options.StormConns))),
		d: "–", h: na, s: na, target: "Stormgate 0"}
	for _, x := range p.tripleStormRows() {
		if x.X == nil {
			continue
		}
		v := count(x.X.ListenOverflows) + " (first PING ack p99 " + firstP99(x.X) + ")"
		if x.Target == haproxy {
			st.h = v
		} else {
			st.s, st.known, st.ok = v, true, x.X.ListenOverflows == 0
		}
	}
	return []sumRow{st}
}

func (p *reporter) tripleSection() {
	if !p.tripleRan() {
		return
	}
	type fwdRow struct {
		Load, Target, Missing                                       string
		Median, Spread, Kernel, VsHAProxy, Provider, P50, P99, Fail string
	}
	d := struct {
		Begin, End, Command, Started string
		ByOther                      bool
		Opt                          Options
		DubboGo                      string
		Idle                         []targetRow[IdleRow]
		Direct                       string
		Ping                         *HeartbeatResult
		PingRatio, PingDu, PingTu    float64
		PingPairs                    []float64
		PingTarget                   float64
		Fwd                          []fwdRow
		Kill, Graceful               []targetRow[RestartRow]
		Storm                        []targetRow[StormRow]
		StormResult                  *StormResult
		SG                           string
		Restart                      *RestartResult
		Marks                        map[string][2]string // each scenario's subsection markers
		IdleCommands, PingCommands   []string
		FwdCommands, RestartCommands []string
		StormCommands                []string
		NotCounted                   float64
		TripleMethod, Arg, Windows   string
	}{Begin: tripleBegin, End: tripleEnd, Command: p.r.Command, Started: p.r.Started.UTC().Format("2006-01-02 15:04"),
		ByOther: p.r.Command != "make bench", Opt: p.r.Options, DubboGo: p.r.Machine.DubboGo, Direct: direct, Ping: p.r.TriplePing, PingTarget: targetPingRatio,
		SG: stormgate, Restart: p.r.TripleRestart, NotCounted: notCounted, TripleMethod: tripleMethod, Arg: fwdArg,
		Windows: fmt.Sprint(p.r.Options.FwdWindows), Marks: map[string][2]string{}}
	for _, x := range tripleParts {
		d.Marks[x.name] = [2]string{tripleSubBegin(x.name), tripleSubEnd(x.name)}
	}
	for _, tg := range targets {
		x := p.tripleIdleRow(tg)
		d.Idle = append(d.Idle, targetRow[IdleRow]{tg, x})
		if x != nil {
			d.IdleCommands = append(d.IdleCommands, x.Command)
		}
	}
	if d.Ping != nil {
		d.PingRatio, d.PingDu, d.PingTu, d.PingPairs = p.triplePingRatio()
		for _, a := range []string{armDubbo, armTriple} {
			if c, ok := d.Ping.Commands[a]; ok {
				d.PingCommands = append(d.PingCommands, c)
			}
		}
	}
	for _, l := range p.r.Options.FwdLoads {
		load := fmt.Sprintf("%s conns, %s calls/s", count(uint64(l.Conns)), num(l.Rate, 0))
		hv := p.tripleFwdRow(haproxy, l).median()
		for _, tg := range tripleForward.targets {
			x := p.tripleFwdRow(tg, l)
			if x == nil {
				d.Fwd = append(d.Fwd, fwdRow{Load: load, Target: tg, Missing: "not measured"})
				continue
			}
			sys := make([]float64, 0, len(x.SysUsPerReq))
			sys = append(sys, x.SysUsPerReq...)
			prov := append([]float64(nil), x.ProviderUsPerReq...)
			row := fwdRow{Load: load, Target: tg, Median: usStr(x.median()), Spread: spread(x.UsPerReq, 1),
				Kernel: usStr(median(sys)), VsHAProxy: "–", Provider: usStr(median(prov)), P50: msStr(x.P50ms), P99: msStr(x.P99ms),
				Fail: count(x.Failed) + " of " + count(x.Sent)}
			if tg != haproxy && !math.IsNaN(hv) && hv > 0 {
				row.VsHAProxy = ratio(x.median(), hv)
			}
			d.Fwd = append(d.Fwd, row)
			d.FwdCommands = append(d.FwdCommands, x.Command)
		}
	}
	d.Kill, d.Graceful = p.tripleRestartRows(false), p.tripleRestartRows(true)
	d.Storm, d.StormResult = p.tripleStormRows(), p.r.TripleStorm
	for _, x := range d.Storm {
		if x.X != nil {
			d.StormCommands = append(d.StormCommands, x.X.Command)
		}
	}
	for _, x := range d.Kill {
		if x.X != nil {
			d.RestartCommands = append(d.RestartCommands, x.X.Command)
		}
	}
	p.exec("triple", d)
}

// tripleProfileScenarios are the Triple scenarios' profiles for section 10 (none when they did not run).
func (p *reporter) tripleProfileScenarios() []profileScenario {
	if !p.tripleRan() {
		return nil
	}
	out := []profileScenario{{profileTriplePing, fmt.Sprintf("Triple: %s h2c consumers PINGing every second, beside as many Dubbo consumers heartbeating",
		count(uint64(p.r.Options.HBConns))), armTriple}}
	for _, l := range p.r.Options.FwdLoads {
		out = append(out, profileScenario{tripleForward.profileKey(l),
			fmt.Sprintf("Triple: forwarding Echo, %s conns, %s calls/s (dubbo-go Triple provider)", count(uint64(l.Conns)), num(l.Rate, 0)), stormgate})
	}
	return out
}
