package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// QuietResult is the quiet scenario: what each process burns with no consumer connected at all,
// sampled over one long window in which every target sits idle side by side (a sleeping process
// costs the others nothing): the dubbo-go provider, HAProxy in front of it, Stormgate in front of
// it (with its upstream connections open), and the bare epoll responder. A shorter window after
// it runs HAProxy and Stormgate under the profilers (how often they wake up, and for what).
type QuietResult struct {
	Window     time.Duration `json:"window_ns"`
	Settle     time.Duration `json:"settle_ns"`
	ProfWindow time.Duration `json:"prof_window_ns"`
	Rows       []QuietRow    `json:"rows"`
	Error      string        `json:"error,omitempty"`
}

// QuietRow is one target's idle cost.
type QuietRow struct {
	Target  string        `json:"target"` // direct: the provider alone
	Elapsed time.Duration `json:"elapsed_ns"`
	CPUTime time.Duration `json:"cpu_time_ns"` // from schedstat (ns); from /proc/PID/stat when Ticks
	Ticks   bool          `json:"ticks,omitempty"`
	RSSMiB  float64       `json:"rss_mib"`
}

// Cores is the row's CPU in cores (1.0 = one core busy).
func (r QuietRow) Cores() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.CPUTime) / float64(r.Elapsed)
}

// profileQuiet is the quiet scenario's profile key.
const profileQuiet = "quiet"

// quietTargets are profiled (perf; Stormgate also pprof) during the window.
var quietProfiled = []string{haproxy, stormgate}

func (s *Suite) runQuiet(ctx context.Context) (*QuietResult, error) {
	res := &QuietResult{Window: s.opt.QuietWindow, Settle: s.opt.QuietSettle, ProfWindow: s.opt.QuietProfile}
	if err := s.quiet(ctx, res); err != nil {
		res.Error = err.Error()
		return res, err
	}
	return res, nil
}

func (s *Suite) quiet(ctx context.Context, res *QuietResult) error {
	prov, err := s.startProvider(ctx, dubboGoProvider, 0, "", 0)
	if err != nil {
		return err
	}
	defer prov.proc.Kill()
	order := []string{direct, haproxy, stormgate, hbFloor}
	pxs := map[string]*proxy{}
	for _, tg := range order[1:] {
		px, err := s.startProxy(ctx, tg, prov, proxyOpts{})
		if err != nil {
			return err
		}
		defer px.stop()
		pxs[tg] = px
	}
	pids := func(tg string) []int {
		if tg == direct {
			return []int{prov.proc.PID}
		}
		return pxs[tg].pids()
	}
	if err := sleepCtx(ctx, res.Settle); err != nil {
		return err
	}
	sample := func() (map[string]Usage, error) {
		u := map[string]Usage{}
		for _, tg := range order {
			var err error
			if u[tg], err = sampleUsage(pids(tg)...); err != nil {
				return nil, err
			}
		}
		return u, nil
	}
	runTimes := func() map[string]time.Duration {
		rt := map[string]time.Duration{}
		for _, tg := range order {
			if v, err := runTime(pids(tg)...); err == nil {
				rt[tg] = v
			}
		}
		return rt
	}
	a, err := sample()
	if err != nil {
		return err
	}
	ra := runTimes()
	if err := sleepCtx(ctx, res.Window); err != nil {
		return err
	}
	rb := runTimes()
	b, err := sample()
	if err != nil {
		return err
	}
	for _, tg := range order {
		cpu, el := b[tg].Sub(a[tg])
		row := QuietRow{Target: tg, Elapsed: el, CPUTime: cpu, Ticks: true, RSSMiB: mib(b[tg].RSSKiB)}
		x, okA := ra[tg]
		y, okB := rb[tg]
		if okA && okB && y >= x {
			row.CPUTime, row.Ticks = y-x, false
		}
		res.Rows = append(res.Rows, row)
		s.logf("  quiet %s: %.4f %% of a core over %v (%v of CPU)", tg, 100*row.Cores(), el.Round(time.Millisecond), row.CPUTime)
		if tg != direct && !pxs[tg].alive() {
			return fmt.Errorf("%s died during the run", tg)
		}
	}
	if res.ProfWindow <= 0 {
		return nil
	}
	profs := map[string]*profiling{}
	for _, tg := range quietProfiled {
		profs[tg] = s.startProfile(ctx, "quiet-"+tg, pxs[tg], res.ProfWindow)
	}
	// The CPU of the profiled window sits inside the profilers' so that serving the Go profile
	// over HTTP (at its start and end) is not counted.
	if err := sleepCtx(ctx, 300*time.Millisecond); err != nil {
		return err
	}
	if a, err = sample(); err != nil {
		return err
	}
	ra = runTimes()
	if err := sleepCtx(ctx, res.ProfWindow-800*time.Millisecond); err != nil {
		return err
	}
	rb = runTimes()
	if b, err = sample(); err != nil {
		return err
	}
	for _, tg := range quietProfiled { // parsed after the window, which they cost nothing
		cpu, el := b[tg].Sub(a[tg])
		if x, y := ra[tg], rb[tg]; y > x {
			cpu = y - x
		}
		prof := Profile{Scenario: profileQuiet, Target: tg, Window: el, CPU: cpu, SysCPU: b[tg].Sys - a[tg].Sys}
		profs[tg].finish(ctx, &prof)
		s.addProfile(prof)
	}
	return nil
}

// runTime is the CPU time the live threads of the given processes have run, in nanoseconds,
// from /proc/PID/task/TID/schedstat (first field): /proc/PID/stat counts in 10 ms ticks, which
// over 30 s cannot tell 0.03 % of a core from nothing. Threads that exited are not counted
// (an idle process starts none).
func runTime(pids ...int) (time.Duration, error) {
	var total time.Duration
	for _, pid := range pids {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			return 0, err
		}
		for _, t := range tasks {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
			if err != nil {
				continue // the thread has just exited
			}
			ns, err := parseSchedstat(string(b))
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/task/%s/schedstat: %w", pid, t.Name(), err)
			}
			total += ns
		}
	}
	return total, nil
}

// parseSchedstat returns the first field of a schedstat line: time spent on the CPU, in ns.
func parseSchedstat(s string) (time.Duration, error) {
	f := strings.Fields(s)
	if len(f) < 1 {
		return 0, errors.New("empty schedstat")
	}
	v, err := strconv.ParseUint(f[0], 10, 64)
	return time.Duration(v), err
}
