package main

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// ForwardResult is the forward scenario: proxy CPU per forwarded request at fixed rates, SayHello
// on the real dubbo-go provider, for HAProxy in TCP mode, the bare epoll forwarder
// (bench/floor/fwdfloor.c), the forwarder on netpoll's connections (bench/floor/npfwd) and
// Stormgate. Every target runs for the whole scenario in front of a provider of its own; for each
// load the targets take turns, Windows rounds of one window each (a fresh run of the load tool per
// window), the order reversed every other round as the heartbeat scenario does, so that a change
// in the machine's speed hits all alike. The figure is the median of a target's rounds. Then one
// more window each under the profilers, which is not part of the figure.
type ForwardResult struct {
	Provider   string        `json:"provider"`
	Method     string        `json:"method"`
	Arg        string        `json:"arg"`
	Loads      []FwdLoad     `json:"loads"`
	Lead       time.Duration `json:"lead_ns"`
	Window     time.Duration `json:"window_ns"`
	Windows    int           `json:"windows"`
	ProfWindow time.Duration `json:"prof_window_ns"`
	// Base is the commit the stormgate-base target was built from ("" when it did not run).
	Base string   `json:"base,omitempty"`
	Rows []FwdRow `json:"rows"`
	// Pairs are the labels' cost measured side by side, one per load (scen_labelpair.go), after
	// the rounds; PairWindows windows of Window each.
	PairWindows int       `json:"pair_windows"`
	Pairs       []FwdPair `json:"pairs,omitempty"`
}

// fwdPair is a target and the provider of its own it forwards to.
type fwdPair struct {
	prov *provider
	px   *proxy
}

// FwdLoad is one fixed-rate load.
type FwdLoad struct {
	Conns int     `json:"conns"`
	Rate  float64 `json:"rate"`
}

// FwdRow is one target under one load.
type FwdRow struct {
	Target  string  `json:"target"`
	Conns   int     `json:"conns"`
	Rate    float64 `json:"rate"`
	Command string  `json:"command"`

	UsPerReq         []float64 `json:"us_per_req"`     // proxy CPU µs per request, one per round
	SysUsPerReq      []float64 `json:"sys_us_per_req"` // of which in the kernel (stime)
	ProviderUsPerReq []float64 `json:"provider_us_per_req"`
	ProxyCores       []float64 `json:"proxy_cores"`

	Sent   uint64  `json:"sent"`
	OK     uint64  `json:"ok"`
	Failed uint64  `json:"failed"`
	P50ms  float64 `json:"p50_ms"` // the median of the rounds' p50s
	P99ms  float64 `json:"p99_ms"` // the worst round's p99
	Error  string  `json:"error,omitempty"`

	p50s []float64
}

// fwdTargets are the forward scenario's targets, in the first round's order. stormgateNoLabels is
// Stormgate with per-method metrics off (metrics.max_methods 0), so that their cost is measured in the
// same rounds (issue 25: at most 5 % more CPU per request with them).
var fwdTargets = []string{haproxy, fwdFloor, npFwd, stormgate, stormgateNoLabels}

// fwdProfiled are the targets profiled after the rounds (the profile of Stormgate without labels
// would repeat Stormgate's).
var fwdProfiled = []string{haproxy, fwdFloor, npFwd, stormgate}

// The method the forward scenario calls (dgprovider's SayHello, in the Java spelling).
const (
	fwdMethod = "sayHello"
	fwdArg    = "stormgate"
)

// profileForward is the forward scenario's profile key for one load.
func profileForward(l FwdLoad) string { return dubboForward.profileKey(l) }

// fwdSetup is what a forward run measures: the provider (and so the protocol), the call, the
// targets, and whether the labels' cost and the stormgate-base target are measured too.
type fwdSetup struct {
	name              string // the scenario's: logs, run names, profile keys
	provider          string
	method, arg       string
	targets, profiled []string
	labelPairs, base  bool
}

var (
	dubboForward = fwdSetup{name: "forward", provider: dubboGoProvider, method: fwdMethod, arg: fwdArg,
		targets: fwdTargets, profiled: fwdProfiled, labelPairs: true, base: true}
	// tripleForward: unary Triple calls (dgprovider's Echo, a String argument, as dubbo-go's
	// client sends it without IDL) through HAProxy in HTTP/2 mode and through Stormgate (and the
	// sidecar at BENCH_BASE_REF, in the same alternating rounds, when bench/run.sh built it).
	tripleForward = fwdSetup{name: "triple-forward", provider: dubboGoTriple, method: tripleMethod, arg: fwdArg,
		targets: []string{haproxy, stormgate}, profiled: []string{haproxy, stormgate}, base: true}
)

// tripleMethod is dgprovider's Echo(String) as a Triple consumer names it in :path.
const tripleMethod = "Echo"

// profileKey is the setup's profile key for one load.
func (su fwdSetup) profileKey(l FwdLoad) string {
	return fmt.Sprintf("%s-%d-%s", su.name, l.Conns, fmtNum(l.Rate))
}

func (s *Suite) runForward(ctx context.Context) (*ForwardResult, error) {
	return s.forward(ctx, dubboForward)
}

// runTripleForward is runForward for Triple: HAProxy (HTTP/2 on both sides) and Stormgate.
func (s *Suite) runTripleForward(ctx context.Context) (*ForwardResult, error) {
	return s.forward(ctx, tripleForward)
}

func (s *Suite) forward(ctx context.Context, su fwdSetup) (*ForwardResult, error) {
	o := s.opt
	res := &ForwardResult{Provider: su.provider, Method: su.method, Arg: su.arg, Loads: o.FwdLoads,
		Lead: o.FwdLead, Window: o.FwdWindow, Windows: o.FwdWindows, ProfWindow: o.FwdProfWindow}
	if su.labelPairs {
		res.PairWindows = o.FwdPairWindows
	}
	tgs := su.targets
	if su.base && s.bins.sidecarBase != "" {
		tgs = append(slices.Clone(tgs), stormgateBase)
	}
	if len(o.FwdTargets) > 0 {
		tgs = slices.DeleteFunc(slices.Clone(tgs), func(tg string) bool { return !slices.Contains(o.FwdTargets, tg) })
	}
	if su.base {
		res.Base = s.bins.baseRef
	}
	rows := map[string][]*FwdRow{} // by target, one per load
	for _, tg := range tgs {
		for _, l := range res.Loads {
			rows[tg] = append(rows[tg], &FwdRow{Target: tg, Conns: l.Conns, Rate: l.Rate})
		}
	}
	defer func() {
		for _, tg := range tgs {
			for _, r := range rows[tg] {
				if len(r.p50s) > 0 {
					r.P50ms = median(r.p50s)
				}
				res.Rows = append(res.Rows, *r)
			}
		}
	}()
	pairs := map[string]fwdPair{}
	// fail marks what a target has not measured yet with why, and drops the target.
	fail := func(tg string, err error) {
		s.logf("  %s %s: %v", su.name, tg, err)
		for _, r := range rows[tg] {
			if len(r.UsPerReq) < res.Windows {
				r.Error = err.Error()
			}
		}
		delete(pairs, tg)
	}
	bound := fwdBound(o, res, len(tgs), len(su.profiled))
	for _, tg := range tgs {
		prov, px, stop, err := s.startPair(ctx, su.provider, tg, bound)
		if err != nil {
			fail(tg, err)
			continue
		}
		defer stop()
		pairs[tg] = fwdPair{prov, px}
	}
	// run is one run of the load tool on tg: n windows (0 or 1) or, with profKey, the profiled one.
	run := func(tg string, li int, round int, profKey string) error {
		l, pr, row := res.Loads[li], pairs[tg], rows[tg][li]
		n, pw := 1, time.Duration(0)
		if profKey != "" {
			n, pw = 0, res.ProfWindow
		}
		spec := loadSpec{Protocol: pr.prov.proto, Conns: l.Conns, Rate: l.Rate, Method: res.Method, Arg: res.Arg,
			Duration: res.Lead + time.Duration(n)*res.Window + pw + 1500*time.Millisecond}
		if l.Conns > 2000 {
			spec.ConnectRate, spec.ConnectTimeout = s.opt.ConnectRate, 10*time.Second
		}
		name := fmt.Sprintf("%s-%s-%d-%s", su.name, tg, l.Conns, fmtNum(l.Rate)) // the profiled run's, named as the profiles are
		if profKey == "" {
			name += fmt.Sprintf("-round%d", round)
			row.Command = spec.command("$" + targetVar(tg))
		}
		wl, err := s.windowedLoad(ctx, name, pr.prov, pr.px, spec, res.Lead, res.Window, n, pw, profKey)
		if err != nil {
			return err
		}
		for _, w := range wl.wins {
			reqs := l.Rate * w.elapsed.Seconds()
			row.UsPerReq = append(row.UsPerReq, perOp(w.a.px, w.b.px, reqs))
			row.SysUsPerReq = append(row.SysUsPerReq, float64(w.b.px.Sys-w.a.px.Sys)/1e3/reqs)
			row.ProviderUsPerReq = append(row.ProviderUsPerReq, perOp(w.a.prov, w.b.prov, reqs))
			row.ProxyCores = append(row.ProxyCores, w.proxyCores())
			s.logf("  %s %s %d conns %s req/s round %d: %.2f µs/request", su.name, tg, l.Conns, fmtNum(l.Rate), round,
				row.UsPerReq[len(row.UsPerReq)-1])
		}
		r := wl.run.Result
		row.Sent, row.OK, row.Failed = row.Sent+r.Sent, row.OK+r.OK, row.Failed+failed(r)
		if profKey == "" { // the rounds' latency, as section 9 says: not the run slowed by the profilers
			row.p50s = append(row.p50s, ms(r.Latency.P50))
			row.P99ms = max(row.P99ms, ms(r.Latency.P99))
		}
		if !pr.px.alive() {
			return fmt.Errorf("%s died during the run", tg)
		}
		return nil
	}
	// each runs every target still standing once, in order; false when the scenario is cancelled.
	each := func(order []string, li, round int, profKey string) bool {
		for _, tg := range order {
			if _, ok := pairs[tg]; !ok {
				continue
			}
			if err := run(tg, li, round, profKey); err != nil {
				fail(tg, err)
			}
			if ctx.Err() != nil {
				return false
			}
		}
		return true
	}
	for li, l := range res.Loads {
		for round := range res.Windows {
			if !each(alternate(tgs, round), li, round, "") {
				return res, ctx.Err()
			}
		}
		with, ok1 := pairs[stormgate]
		without, ok2 := pairs[stormgateNoLabels]
		if res.PairWindows > 0 && ok1 && ok2 {
			res.Pairs = append(res.Pairs, s.labelPair(ctx, l, res.Method, res.Arg, res.Lead, res.Window, res.PairWindows, with, without))
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
		}
		if res.ProfWindow > 0 && !each(su.profiled, li, -1, su.profileKey(l)) {
			return res, ctx.Err()
		}
		for _, tg := range tgs {
			if row := rows[tg][li]; len(row.UsPerReq) > 0 {
				s.logf("  %s %s %d conns %s req/s: %.2f µs/request (median of %v), failed %d, p99 %.2fms",
					su.name, tg, l.Conns, fmtNum(l.Rate), median(row.UsPerReq), row.UsPerReq, row.Failed, row.P99ms)
			}
		}
	}
	return res, nil
}

// windowed is a fixed-rate load sampled in windows.
type windowed struct {
	wins []window // provider and proxy CPU of each unprofiled window
	run  *loadRun
}

// windowedLoad runs one fixed-rate load: after lead, n consecutive windows of length win
// (provider and proxy CPU from /proc only: nothing else runs in them), then, if profWin > 0, one
// window under the profilers, whose Profile it records under profKey. The load's Duration must
// cover them all.
func (s *Suite) windowedLoad(ctx context.Context, name string, prov *provider, px *proxy, spec loadSpec,
	lead, win time.Duration, n int, profWin time.Duration, profKey string) (*windowed, error) {
	h, err := s.startLoad(ctx, name, px.addr, "", spec)
	if err != nil {
		return nil, err
	}
	defer h.proc.Kill()
	if err := h.waitRun(ctx); err != nil {
		return nil, err
	}
	if err := sleepCtx(ctx, lead); err != nil {
		return nil, err
	}
	usage := func() snap {
		var sn snap
		sn.prov, _ = sampleUsage(prov.proc.PID)
		if px.kind != direct {
			sn.px, _ = sampleUsage(px.pids()...)
		}
		return sn
	}
	out := &windowed{}
	a := usage()
	for range n {
		if err := sleepCtx(ctx, win); err != nil {
			return nil, err
		}
		b := usage()
		out.wins = append(out.wins, between(a, b))
		a = b
	}
	var prof *profiling
	var pw window
	if profWin > 0 {
		prof = s.startProfile(ctx, name, px, profWin)
		a = usage()
		if err := sleepCtx(ctx, profWin); err != nil {
			return nil, err
		}
		pw = between(a, usage())
	}
	if out.run, err = h.wait(); err != nil {
		return nil, err
	}
	if prof != nil {
		p := Profile{Scenario: profKey, Target: px.kind, Window: pw.elapsed, Ops: spec.Rate * pw.elapsed.Seconds(),
			OpName: "request", CPU: pw.b.px.CPU - pw.a.px.CPU, SysCPU: pw.b.px.Sys - pw.a.px.Sys}
		prof.finish(ctx, &p)
		s.addProfile(p)
	}
	return out, nil
}

// profileIdle30 is the idle scenario's profile key (Stormgate, 30 s heartbeats).
const profileIdle30 = "idle-30s"

// profileIdleWindow profiles px for d while h's consumers heartbeat (one more window after the
// idle scenario's own, at the 30 s period). The returned function, called once the load has
// ended, parses the profile and records it.
func (s *Suite) profileIdleWindow(ctx context.Context, px *proxy, h *loadHandle, d time.Duration) (func(), error) {
	prof := s.startProfile(ctx, profileIdle30+"-"+px.kind, px, d)
	a, err := sampleUsage(px.pids()...)
	if err != nil {
		return nil, err
	}
	if err := sleepCtx(ctx, d); err != nil {
		return nil, err
	}
	b, err := sampleUsage(px.pids()...)
	if err != nil {
		return nil, err
	}
	cpu, el := b.Sub(a)
	p := Profile{Scenario: profileIdle30, Target: px.kind, Window: el, OpName: "heartbeat", CPU: cpu, SysCPU: b.Sys - a.Sys}
	if rate, err := h.hbRate(a.At, b.At); err == nil {
		p.Ops = rate * el.Seconds()
	}
	return func() {
		prof.finish(ctx, &p)
		s.addProfile(p)
	}, nil
}

// profileThroughput is the throughput scenario's profile key (Stormgate at its maximum).
const profileThroughput = "throughput"

// profileAtMax runs one more step at rate, the series' maximum, with a profiled window after the
// warm-up; the step is not judged and does not count in the series.
func (s *Suite) profileAtMax(ctx context.Context, prov *provider, px *proxy, conns int, rate float64) error {
	o := s.opt
	spec := loadSpec{Conns: conns, Rate: rate, Duration: o.TPStep, Timeout: 2 * time.Second}
	if conns > 2000 {
		spec.ConnectRate, spec.ConnectTimeout = o.ConnectRate, 10*time.Second
	}
	win := (o.TPStep - o.TPWarmup - 1500*time.Millisecond).Round(time.Second)
	if win < time.Second {
		win = time.Second
	}
	_, err := s.windowedLoad(ctx, fmt.Sprintf("tp-%s-%d-%s-profiled", px.kind, conns, fmtNum(rate)), prov, px, spec,
		o.TPWarmup, 0, 0, win, profileThroughput)
	return err
}

// fwdBound is how long a forward scenario's providers and proxies may live (procSpec.bound): twice what
// its plan takes, for every load: each target's rounds, the labels pair, the profiled runs, each run its
// load tool's connect phase (at o.ConnectRate), lead, windows and exit. The suite's 10-minute default
// was shorter than the plan once a base build joined the targets (BENCH_BASE_REF: 10m29s), and the
// profiled runs at 10,000 connections found every target killed by then.
func fwdBound(o Options, res *ForwardResult, targets, profiled int) time.Duration {
	var d time.Duration
	for _, l := range res.Loads {
		connect := 2 * time.Second
		if o.ConnectRate > 0 {
			connect += time.Duration(float64(l.Conns) / o.ConnectRate * float64(time.Second))
		}
		run := func(windows int, prof time.Duration) time.Duration {
			return connect + res.Lead + time.Duration(windows)*res.Window + prof + 1500*time.Millisecond
		}
		d += time.Duration(targets*res.Windows)*run(1, 0) + run(res.PairWindows, 0) + time.Duration(profiled)*run(0, res.ProfWindow)
	}
	return 2 * d
}
