package main

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// The netpoll patch set against issue 28's targets ("Below netpoll's floor"): figures the other
// sections compute, each against issue 28's target and beside what issue 28 measured before the
// patch set (third_party/netpoll/PATCHES.md). Every figure comes from the helper its own section
// or summary row uses; this table only judges it.

// Targets of issue 28.
const (
	patchSetHBRatio     = 1.25 // CPU per heartbeat, Stormgate ÷ the bare epoll responder
	patchSetOverNetpoll = 1.10 // Stormgate ÷ the netpoll responder (heartbeats), ÷ the netpoll forwarder (forwarding)
	patchSetFwdRatio    = 0.80 // CPU per forwarded request, Stormgate ÷ HAProxy
	patchSetSyscalls    = 6.0  // system calls per forwarded request
	patchSetIdle30Ratio = 1.0  // proxy CPU, idle consumers heartbeating every 30 s, Stormgate ÷ HAProxy
	patchSetKiBIdle     = 3.0  // RSS per idle consumer connection, KiB
	patchSetTPRatio     = 1.5  // max throughput at the largest connection count, Stormgate ÷ HAProxy
	patchSetAddedP99    = 0.2  // ms, p99 added over direct
)

// Issue 28's "today": the figures of the make bench before the patch set, as the issue states them.
const (
	beforeHBRatio     = "1.52–1.63×"
	beforeOverNetpoll = "1.09–1.22×"
	beforeSyscalls    = "8.7–8.9"
	beforeIdle30Ratio = "1.61×"
	beforeKiBIdle     = "4.4 KiB"
	beforeTPRatio     = "1.25×"
	beforeAddedP99    = "+0.21 ms"
)

// patchSetLoads are the forward loads issue 28 names, with its CPU per forwarded request ÷
// HAProxy before the patch set at each; the table's rows follow the run's loads when it has them.
var patchSetLoads = []FwdLoad{{2000, 4000}, {10000, 5000}}

var beforeFwdRatio = map[FwdLoad]string{{2000, 4000}: "0.97×", {10000, 5000}: "1.04×"}

// limit is a target: a figure at most value, or at least value when atLeast.
type limit struct {
	value   float64
	atLeast bool
	text    string               // the target as the table prints it
	unit    func(float64) string // prints a difference in the target's unit
}

func ratioUnit(v float64) string { return num(v, 2) + "×" }

// judge is the verdict on figure v (b: v is the figure, or only a bound on it); a missed target
// says by how much, in the target's unit and as a share of the target. A bound on the wrong side
// of the target decides nothing. NaN is "not measured".
func (l limit) judge(v float64, b valueBound) (verdict string, missed bool) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "not measured", false
	}
	ok := v <= l.value
	side := "over"
	if l.atLeast {
		ok, side = v >= l.value, "under"
	}
	by := "by "
	switch {
	case b == exactValue:
	case ok && (b == lowerBound) == l.atLeast:
	case !ok && (b == upperBound) == l.atLeast:
		by = "by at least "
	default:
		op := "> "
		if b == upperBound {
			op = "< "
		}
		return "no verdict: only a bound (" + op + l.unit(v) + ")", false
	}
	if ok {
		return "**met**", false
	}
	return fmt.Sprintf("**missed** %s%s (%s %% %s the target)", by, l.unit(math.Abs(v-l.value)),
		num(100*math.Abs(v/l.value-1), 0), side), true
}

// patchSetRow is one figure of the table.
type patchSetRow struct{ Figure, Before, Measured, Target, Verdict, Why string }

// judged is a row with its verdict, and why (called only when the target was missed) in the Why
// column.
func judged(figure, before, measured string, v float64, b valueBound, l limit, why func() string) patchSetRow {
	r := patchSetRow{Figure: figure, Before: before, Measured: measured, Target: l.text, Why: "–"}
	var missed bool
	r.Verdict, missed = l.judge(v, b)
	if math.IsNaN(v) {
		r.Measured = na
	}
	if missed && why != nil {
		if w := why(); w != "" {
			r.Why = w
		}
	}
	return r
}

func (p *reporter) patchSetSection() { p.exec("patchset", p.patchSetRows()) }

func (p *reporter) patchSetRows() []patchSetRow {
	ratioLimit := func(v float64) limit { return limit{value: v, text: "≤ " + ratioUnit(v), unit: ratioUnit} }
	var rows []patchSetRow

	// Heartbeats against the bare epoll responder and the netpoll responder (section 7).
	hr := p.r.Heartbeat
	hbV, fl, sg, pairs := hr.ratio()
	npRatio, _, np, npPairs := hr.ratioOf(npFloor)
	if len(pairs) == 0 {
		hbV = math.NaN()
	}
	rows = append(rows, judged("CPU per heartbeat, Stormgate ÷ the bare epoll responder (section 7)", beforeHBRatio,
		fmt.Sprintf("%s (%s ÷ %s)", ratioUnit(hbV), usStr(sg), usStr(fl)), hbV, exactValue, ratioLimit(patchSetHBRatio),
		func() string {
			why := p.profileWhy(profileHeartbeat, hbFloor, "the responder")
			if len(npPairs) > 0 {
				why += text("note-heartbeat-npfloor", usStr(np), num(npRatio, 2))
			}
			return why
		}))
	ov := hr.overNetpoll()
	rows = append(rows, judged("Stormgate's own code: CPU per heartbeat, Stormgate ÷ the netpoll responder (section 7)", beforeOverNetpoll,
		fmt.Sprintf("%s (%s ÷ %s)", ratioUnit(ov), usStr(sg), usStr(np)), ov, exactValue, ratioLimit(patchSetOverNetpoll), nil))

	// Forwarding (section 9), at each load.
	loads := p.r.Options.FwdLoads
	if len(loads) == 0 {
		loads = patchSetLoads
	}
	for _, l := range loads {
		load := fmt.Sprintf("%s conns, %s req/s", count(uint64(l.Conns)), num(l.Rate, 0))
		sv, nv := p.fwdRow(stormgate, l).median(), p.fwdRow(npFwd, l).median()
		rows = append(rows, judged("Stormgate's own code: CPU per forwarded request, Stormgate ÷ the netpoll forwarder, "+load+" (section 9)", beforeOverNetpoll,
			fmt.Sprintf("%s (%s ÷ %s)", ratio(sv, nv), usStr(sv), usStr(nv)), quotient(sv, nv), exactValue, ratioLimit(patchSetOverNetpoll), nil))
	}
	for _, l := range loads {
		load := fmt.Sprintf("%s conns, %s req/s", count(uint64(l.Conns)), num(l.Rate, 0))
		hv, sv := p.fwdRow(haproxy, l).median(), p.fwdRow(stormgate, l).median()
		before, ok := beforeFwdRatio[l]
		if !ok {
			before = "0.97×, 1.04× (2,000 conns, 4,000 req/s; 10,000 conns, 5,000 req/s)"
		}
		rows = append(rows, judged("CPU per forwarded request, Stormgate ÷ HAProxy, "+load+" (section 9)", before,
			fmt.Sprintf("%s (%s ÷ %s)", ratio(sv, hv), usStr(sv), usStr(hv)), quotient(sv, hv), exactValue, ratioLimit(patchSetFwdRatio),
			func() string {
				why := p.profileWhy(profileForward(l), haproxy, "HAProxy")
				if nv, fv := p.fwdRow(npFwd, l).median(), p.fwdRow(fwdFloor, l).median(); !math.IsNaN(nv) {
					why += text("note-forward-npfwd", usStr(nv), ratio(nv, hv), ratio(nv, fv), ratio(sv, nv))
				}
				return why
			}))
	}
	for _, l := range loads {
		load := fmt.Sprintf("%s conns, %s req/s", count(uint64(l.Conns)), num(l.Rate, 0))
		sys, _ := p.fwdPerf(stormgate, l)
		fsys, _ := p.fwdPerf(fwdFloor, l)
		if sys < 0 {
			sys = math.NaN()
		}
		if fsys < 0 {
			fsys = math.NaN()
		}
		lim := limit{value: patchSetSyscalls, text: fmt.Sprintf("≤ %s (bare epoll forwarder: %s)", num(patchSetSyscalls, 0), num(fsys, 2)),
			unit: func(v float64) string { return num(v, 2) }}
		rows = append(rows, judged("System calls per forwarded request (perf stat), Stormgate, "+load+" (section 9)", beforeSyscalls,
			num(sys, 2), sys, exactValue, lim, nil))
	}

	// Idle consumers: CPU at 30 s heartbeats, memory (section 1).
	hv, sv := p.idle30CPU(haproxy), p.idle30CPU(stormgate)
	rows = append(rows, judged(fmt.Sprintf("Proxy CPU with %s idle consumers heartbeating every 30 s, Stormgate ÷ HAProxy (section 1)", count(uint64(p.r.Options.IdleConns))),
		beforeIdle30Ratio, fmt.Sprintf("%s (%s ÷ %s)", ratio(sv, hv), pctCore2(sv), pctCore2(hv)), quotient(sv, hv), exactValue,
		ratioLimit(patchSetIdle30Ratio), func() string { return p.idle30Why(hv, sv) }))
	kib := fIdle(p.idle(stormgate, time.Second), func(x *IdleRow) float64 { return x.ProxyKiBPerConn })
	rows = append(rows, judged("RSS per idle consumer connection, Stormgate (section 1)", beforeKiBIdle, kibStr(kib), kib, exactValue,
		limit{value: patchSetKiBIdle, text: "≤ " + kibStr(patchSetKiBIdle), unit: kibStr}, func() string { return text("why-idle-memory") }))

	// Max throughput (section 3) and added p99 (section 2).
	c := patchSetLoads[len(patchSetLoads)-1].Conns
	if cs := p.tpConns(); len(cs) > 0 {
		c = slices.Max(cs)
	}
	tr, tb := p.tpRatio(c)
	mark := map[valueBound]string{lowerBound: "> ", upperBound: "< "}[tb]
	rows = append(rows, judged(fmt.Sprintf("Max throughput, %s conns, Stormgate ÷ HAProxy (section 3)", count(uint64(c))), beforeTPRatio,
		fmt.Sprintf("%s%s (%s ÷ %s req/s)", mark, ratioUnit(tr), tpLabel(p.tp(stormgate, c)), tpLabel(p.tp(haproxy, c))), tr, tb,
		limit{value: patchSetTPRatio, atLeast: true, text: "≥ " + ratioUnit(patchSetTPRatio), unit: ratioUnit}, func() string { return p.tpWhy(c) }))
	add := p.addedP99()
	p99 := func(x *LatencyRow) float64 { return x.P99ms }
	rows = append(rows, judged(fmt.Sprintf("p99 added over direct, %s conns, %s req/s, echo (section 2)", count(uint64(p.r.Options.LatConns)), num(p.r.Options.LatRate, 0)),
		beforeAddedP99, fmt.Sprintf("%s (Stormgate %s, direct %s)", signedMs(add), msStr(fLat(p.lat(stormgate, echoMethod), p99)), msStr(fLat(p.lat(direct, echoMethod), p99))),
		add, exactValue, limit{value: patchSetAddedP99, text: "≤ " + signedMs(patchSetAddedP99), unit: msStr}, func() string { return text("why-added-p99") }))
	return rows
}
