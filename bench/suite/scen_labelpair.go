package main

import (
	"context"
	"fmt"
	"time"
)

// FwdPair is issue 25's figure measured side by side: Stormgate with per-method metrics and
// Stormgate without (metrics.max_methods 0) carry the same load at the same time, each in front
// of a provider of its own, and every window samples both at the same instants. Whatever the
// machine does meanwhile (a GC of some other process, a timer storm, the other pair's batching)
// hits both alike, so the ratio of one window is steadier than the ratio of two windows taken
// seconds apart, which is what the alternating rounds compare: there single windows move by
// ±30 % here. The figure is the median of the windows' ratios.
type FwdPair struct {
	Conns   int     `json:"conns"`
	Rate    float64 `json:"rate"` // each of the two loads
	Windows int     `json:"windows"`

	With    []float64 `json:"with_us_per_req"`    // Stormgate CPU µs per request, one per window
	Without []float64 `json:"without_us_per_req"` // the same, metrics.max_methods 0
	Ratios  []float64 `json:"ratios"`             // With[i] ÷ Without[i]
	Cores   float64   `json:"cores"`              // the whole machine's busy cores over the windows (both pairs and their loads)
	Sent    uint64    `json:"sent"`               // calls the two loads sent
	Failed  uint64    `json:"failed"`             // of which failed (timeouts: the machine could not carry both)
	Error   string    `json:"error,omitempty"`
}

// Ratio is the median of the windows' ratios (NaN without windows).
func (p *FwdPair) Ratio() float64 { return median(p.Ratios) }

// labelPair runs the side-by-side measurement for load l on two pairs already started: with is
// Stormgate, without Stormgate with metrics.max_methods 0.
func (s *Suite) labelPair(ctx context.Context, l FwdLoad, method, arg string, lead, win time.Duration, n int,
	with, without fwdPair) FwdPair {
	out := FwdPair{Conns: l.Conns, Rate: l.Rate, Windows: n}
	if err := s.runLabelPair(ctx, &out, method, arg, lead, win, with, without); err != nil {
		out.Error = err.Error()
		s.logf("  forward labels side by side, %d conns: %v", l.Conns, err)
	}
	return out
}

func (s *Suite) runLabelPair(ctx context.Context, out *FwdPair, method, arg string, lead, win time.Duration, with, without fwdPair) error {
	spec := loadSpec{Conns: out.Conns, Rate: out.Rate, Method: method, Arg: arg,
		Duration: lead + time.Duration(out.Windows)*win + 1500*time.Millisecond}
	if out.Conns > 2000 {
		spec.ConnectRate, spec.ConnectTimeout = s.opt.ConnectRate, 10*time.Second
	}
	pairs := []fwdPair{with, without}
	hs := make([]*loadHandle, len(pairs))
	for i, pr := range pairs {
		h, err := s.startLoad(ctx, fmt.Sprintf("forward-labels-pair-%s-%d-%s", pr.px.kind, out.Conns, fmtNum(out.Rate)), pr.px.addr, "", spec)
		if err != nil {
			return err
		}
		defer h.proc.Kill()
		hs[i] = h
	}
	for _, h := range hs {
		if err := h.waitRun(ctx); err != nil {
			return err
		}
	}
	if err := sleepCtx(ctx, lead); err != nil {
		return err
	}
	sample := func() (us []Usage, machine machineCPU) {
		for _, pr := range pairs {
			u, _ := sampleUsage(pr.px.pids()...)
			us = append(us, u)
		}
		return us, sampleMachine()
	}
	a, ma := sample()
	first := ma
	for range out.Windows {
		if err := sleepCtx(ctx, win); err != nil {
			return err
		}
		b, mb := sample()
		var per [2]float64
		for i := range pairs {
			per[i] = perOp(a[i], b[i], out.Rate*b[i].At.Sub(a[i].At).Seconds())
		}
		out.With, out.Without = append(out.With, per[0]), append(out.Without, per[1])
		if per[1] > 0 {
			out.Ratios = append(out.Ratios, per[0]/per[1])
		}
		s.logf("  forward labels side by side %d conns %s req/s: %.2f ÷ %.2f µs/request", out.Conns, fmtNum(out.Rate), per[0], per[1])
		a, ma = b, mb
	}
	out.Cores, _ = ma.cores(first)
	for i, h := range hs {
		run, err := h.wait()
		if err != nil {
			return err
		}
		out.Sent += run.Result.Sent
		out.Failed += failed(run.Result)
		if !pairs[i].px.alive() {
			return fmt.Errorf("%s died during the run", pairs[i].px.kind)
		}
	}
	s.logf("  forward labels side by side %d conns %s req/s: ratio %.3f (median of %v), machine %.2f cores, failed %d",
		out.Conns, fmtNum(out.Rate), out.Ratio(), out.Ratios, out.Cores, out.Failed)
	return nil
}
