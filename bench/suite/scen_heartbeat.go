package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"syscall"
	"time"
)

// HeartbeatResult is the heartbeat-floor scenario: Stormgate's CPU per answered heartbeat against
// the bare epoll responder's (bench/floor/hbfloor.c), both with HBConns consumers beating every
// second. Both targets and both load tools run for the whole scenario; the load tool of the
// target not being measured is stopped (SIGSTOP), so each window has the machine to itself, and
// the windows alternate (floor, Stormgate, Stormgate, floor, ...) so that a drift in the machine's
// load hits both alike. The figure is the median of the pairs' ratios; a last pair of windows runs
// under the profilers and is not part of it.
type HeartbeatResult struct {
	Conns  int           `json:"conns"`
	Period time.Duration `json:"period_ns"`
	Window time.Duration `json:"window_ns"`
	Settle time.Duration `json:"settle_ns"` // after resuming a load tool, before its window
	Pairs  int           `json:"pairs"`

	Probe   string            `json:"probe"`   // the heartbeat request both answered (hex)
	Answers map[string]string `json:"answers"` // target → its answer (hex)
	Same    bool              `json:"same"`    // the answers are byte for byte the same

	// Windows: CPU from /proc; heartbeats answered from each target's own count (Stormgate's
	// metric, the responder's SIGUSR1 count) read just outside the CPU samples.
	Windows  []HBWindow        `json:"windows"`
	Commands map[string]string `json:"commands"`
	HBFailed map[string]uint64 `json:"hb_failed"` // heartbeats timed out or lost, whole run
	HBLate   map[string]uint64 `json:"hb_late"`   // answers the load tool read after their timeout
	Error    string            `json:"error,omitempty"`
}

// HBWindow is one sampled window of one target.
type HBWindow struct {
	Pair     int           `json:"pair"` // -1: the profiled pair
	Target   string        `json:"target"`
	Elapsed  time.Duration `json:"elapsed_ns"`
	CPU      time.Duration `json:"cpu_ns"`
	Sys      time.Duration `json:"sys_ns"`
	HB       float64       `json:"heartbeats"` // answered in the window
	Profiled bool          `json:"profiled"`
}

// UsPerHB is CPU µs per answered heartbeat.
func (w HBWindow) UsPerHB() float64 {
	if w.HB <= 0 {
		return 0
	}
	return float64(w.CPU) / 1e3 / w.HB
}

// Cores is the window's CPU in cores (1.0: one core busy).
func (w HBWindow) Cores() float64 { return float64(w.CPU) / float64(max(w.Elapsed, 1)) }

// KernelUsPerHB is kernel CPU µs per answered heartbeat.
func (w HBWindow) KernelUsPerHB() float64 { return float64(w.Sys) / 1e3 / w.HB }

// hbTargets are the targets of the heartbeat scenario, in the first round's order: the bare
// responder (the figure's yardstick), the netpoll responder (what netpoll's connection layer
// costs by itself) and Stormgate.
var hbTargets = []string{hbFloor, npFloor, stormgate}

func (s *Suite) runHeartbeat(ctx context.Context) (*HeartbeatResult, error) {
	o := s.opt
	res := &HeartbeatResult{Conns: o.HBConns, Period: time.Second, Window: o.HBWindow, Settle: o.HBSettle, Pairs: o.HBPairs,
		Answers: map[string]string{}, Commands: map[string]string{}, HBFailed: map[string]uint64{}, HBLate: map[string]uint64{}}
	err := s.heartbeat(ctx, res)
	if err != nil {
		res.Error = err.Error()
	}
	return res, err
}

func (s *Suite) heartbeat(ctx context.Context, res *HeartbeatResult) error {
	prov, err := s.startProvider(ctx, dubboGoProvider, 0, "", 0)
	if err != nil {
		return err
	}
	defer prov.proc.Kill()
	pxs := map[string]*proxy{}
	for _, tg := range hbTargets {
		px, err := s.startProxy(ctx, tg, prov, proxyOpts{})
		if err != nil {
			return err
		}
		defer px.stop()
		pxs[tg] = px
	}

	// The same heartbeat to both: the answers must be the same bytes (the Java form).
	res.Probe = hexBytes(probeHeartbeat())
	var first []byte
	res.Same = true
	for i, tg := range hbTargets {
		b, err := heartbeatAnswer(ctx, pxs[tg].addr)
		if err != nil {
			return fmt.Errorf("%s: probe heartbeat: %w", tg, err)
		}
		res.Answers[tg] = hexBytes(b)
		if i == 0 {
			first = b
		} else if !bytes.Equal(b, first) {
			res.Same = false
		}
	}

	var arms []hbArm
	for _, tg := range hbTargets {
		arms = append(arms, hbArm{name: tg, px: pxs[tg]})
	}
	return s.alternateWindows(ctx, res, arms, profileHeartbeat)
}

// hbArm is one side of a heartbeat comparison: a proxy and the consumers heartbeating at it.
type hbArm struct {
	name string // in res.Windows, the logs and the profiles
	px   *proxy
}

// alternateWindows runs res.Conns consumers heartbeating every res.Period at each arm's proxy
// (in its provider's protocol), all load tools for the whole run, and samples the arms in turn:
// res.Pairs rounds of one window each (the load of every other arm stopped with SIGSTOP, the order
// reversed every other round), then one window each under the profilers, recorded under profKey.
func (s *Suite) alternateWindows(ctx context.Context, res *HeartbeatResult, arms []hbArm, profKey string) error {
	o := s.opt
	names := make([]string, len(arms))
	byName := map[string]hbArm{}
	for i, a := range arms {
		names[i], byName[a.name] = a.name, a
	}
	measure := time.Duration(len(arms)) * (res.Settle + res.Window) // one window of each arm
	loads := map[string]*loadHandle{}
	for _, a := range arms {
		spec := loadSpec{Protocol: a.px.proto, Conns: res.Conns, ConnectRate: o.ConnectRate, ConnectTimeout: 10 * time.Second,
			Heartbeat: res.Period, Duration: time.Duration(res.Pairs+1)*measure + 30*time.Second}
		res.Commands[a.name] = spec.command("$" + targetVar(a.px.kind))
		h, err := s.startLoad(ctx, profKey+"-"+a.name, a.px.addr, "", spec)
		if err != nil {
			return err
		}
		defer h.proc.Kill()
		loads[a.name] = h
	}
	for _, n := range names {
		if err := loads[n].waitRun(ctx); err != nil {
			return err
		}
	}
	for _, n := range names {
		if err := signalGroup(loads[n].proc, syscall.SIGSTOP); err != nil {
			return err
		}
	}

	window := func(pair int, tg string, profiled bool) error {
		px, h := byName[tg].px, loads[tg]
		if err := signalGroup(h.proc, syscall.SIGCONT); err != nil {
			return err
		}
		defer func() { _ = signalGroup(h.proc, syscall.SIGSTOP) }() // a failure shows at the next SIGCONT
		if err := sleepCtx(ctx, res.Settle); err != nil {
			return err
		}
		var prof *profiling
		if profiled {
			prof = s.startProfile(ctx, profKey+"-"+tg, px, res.Window)
		}
		// The target's own count of answered heartbeats brackets the CPU samples.
		n0, err := px.heartbeatsAnswered(ctx)
		if err != nil {
			return err
		}
		a, err := sampleUsage(px.pids()...)
		if err != nil {
			return err
		}
		if err := sleepCtx(ctx, res.Window); err != nil {
			return err
		}
		b, err := sampleUsage(px.pids()...)
		if err != nil {
			return err
		}
		n1, err := px.heartbeatsAnswered(ctx)
		if err != nil {
			return err
		}
		if !px.alive() {
			return fmt.Errorf("%s died during the run", tg)
		}
		cpu, el := b.Sub(a)
		w := HBWindow{Pair: pair, Target: tg, Elapsed: el, CPU: cpu, Sys: b.Sys - a.Sys, HB: n1 - n0, Profiled: profiled}
		res.Windows = append(res.Windows, w)
		s.logf("  %s %s window %d: %.2f µs/heartbeat (%.0f heartbeats, %.1f %% of a core)%s",
			profKey, tg, pair, w.UsPerHB(), w.HB, 100*float64(cpu)/float64(el), map[bool]string{true: ", profiled", false: ""}[profiled])
		if profiled {
			p := Profile{Scenario: profKey, Target: tg, Window: el, Ops: w.HB, OpName: "heartbeat", CPU: cpu, SysCPU: w.Sys}
			prof.finish(ctx, &p)
			s.addProfile(p)
		}
		return nil
	}
	for pair := range res.Pairs {
		for _, tg := range alternate(names, pair) {
			if err := window(pair, tg, false); err != nil {
				return err
			}
		}
	}
	for _, tg := range names {
		if err := window(-1, tg, true); err != nil {
			return err
		}
	}

	// End the load tools early (SIGTERM: they write their results) and collect the failures.
	var errs []error
	for _, tg := range names {
		h := loads[tg]
		_ = signalGroup(h.proc, syscall.SIGCONT)
		_ = signalGroup(h.proc, syscall.SIGTERM)
		run, err := h.wait()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		res.HBFailed[tg] = run.Result.HeartbeatsTimedOut + run.Result.HeartbeatsLost
		res.HBLate[tg] = run.Result.LateReplies
	}
	return errors.Join(errs...)
}

// profileHeartbeat is the heartbeat scenario's profile key.
const profileHeartbeat = "heartbeat"

// signalGroup signals a child's process group (the load tool's workers included).
func signalGroup(p *Proc, sig syscall.Signal) error {
	if p.Exited() {
		return fmt.Errorf("%s has exited (%v); see %s", p.Name, p.Err(), p.LogPath)
	}
	return syscall.Kill(-p.PID, sig)
}

// hbRate is the load tool's answered heartbeats per second between two instants, from its
// progress lines inside them (the first and the last), so a burst before the window (a resumed
// tool catching up) is not counted.
func (h *loadHandle) hbRate(from, to time.Time) (float64, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var in []progress
	for _, pr := range h.series {
		if pr.At.After(from) && !pr.At.After(to) {
			in = append(in, pr)
		}
	}
	if len(in) < 2 {
		return 0, fmt.Errorf("fewer than two progress lines of the load tool in the window (%d)", len(in))
	}
	a, b := in[0], in[len(in)-1]
	dt := b.At.Sub(a.At).Seconds()
	if dt <= 0 {
		return 0, errors.New("progress lines without elapsed time")
	}
	return float64(b.HBOK-a.HBOK) / dt, nil
}

// heartbeatRatio is the figure: the median over the unprofiled rounds of Stormgate's CPU per
// heartbeat ÷ the bare responder's, with the medians of each.
func (r *HeartbeatResult) ratio() (ratio, floorUs, sgUs float64, pairs []float64) {
	return r.ratioOf(stormgate)
}

// ratioOf is ratio for any target of the scenario against the bare responder.
func (r *HeartbeatResult) ratioOf(tg string) (ratio, floorUs, tgUs float64, pairs []float64) {
	return r.ratioTo(hbFloor, tg)
}

// ratioTo is the median over the unprofiled rounds of tg's CPU per heartbeat ÷ base's, with the
// medians of each.
func (r *HeartbeatResult) ratioTo(base, tg string) (ratio, baseUs, tgUs float64, pairs []float64) {
	if r == nil {
		return 0, 0, 0, nil
	}
	var fl, sg []float64
	for pair := range r.Pairs {
		var f, g float64
		for _, w := range r.Windows {
			if w.Pair != pair {
				continue
			}
			switch w.Target {
			case base:
				f = w.UsPerHB()
			case tg:
				g = w.UsPerHB()
			}
		}
		if f > 0 && g > 0 {
			fl, sg, pairs = append(fl, f), append(sg, g), append(pairs, g/f)
		}
	}
	if len(pairs) == 0 {
		return 0, 0, 0, nil
	}
	return median(pairs), median(fl), median(sg), pairs
}

// median of a non-empty slice (the mean of the middle two for an even count).
func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// overNetpoll is Stormgate's median CPU per heartbeat ÷ the netpoll responder's (each the median
// of its rounds against the bare responder): what Stormgate's own code costs above netpoll's
// connections. NaN when either did not run.
func (r *HeartbeatResult) overNetpoll() float64 {
	_, _, sg, pairs := r.ratio()
	_, _, np, npPairs := r.ratioOf(npFloor)
	if len(pairs) == 0 || len(npPairs) == 0 {
		return math.NaN()
	}
	return sg / np
}
