package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// runThroughput is scenario 3: the highest open-loop rate of small requests each target sustains.
// For each target the rate doubles from TPStart until a step fails (a failed request over 0.1 %,
// or a one-second p99 after the TPWarmup above TPMaxP99), then TPRefine bisection steps narrow
// the gap. The targets' ladders run interleaved, one step of each in turn (the order alternating
// from round to round), with every target's provider and proxy up for the whole series, so a
// change in the machine's load over the minutes of a series hits every target alike. A step that
// fails narrowly (a p99 within twice the bound, at most 1 % failed) is run once more and the rate
// passes if the repeat does: one stall of the shared cores should not end a ladder. Every step
// opens its connections anew.
func (s *Suite) runThroughput(ctx context.Context) (*ThroughputResult, error) {
	o := s.opt
	res := &ThroughputResult{Provider: fastProvider, StepTime: o.TPStep, Warmup: o.TPWarmup, MaxP99ms: ms(o.TPMaxP99)}
	for _, conns := range o.TPConns {
		series, err := s.tpSeries(ctx, conns)
		res.Series = append(res.Series, series...)
		if err != nil {
			return res, err
		}
	}
	return res, nil
}

// ladder is one target's search for its maximum rate.
type ladder struct {
	se       TPSeries
	prov     *provider
	px       *proxy
	rate     float64 // next rate to try
	lo, hi   float64 // highest pass, lowest fail
	refining bool
	refine   int // bisection steps left
	done     bool
}

// next returns the rate to try, or false when the ladder is over.
func (l *ladder) next() (float64, bool) {
	if l.done {
		return 0, false
	}
	if !l.refining {
		return l.rate, true
	}
	mid := math.Round((l.lo+l.hi)/2/500) * 500
	if l.refine <= 0 || l.lo <= 0 || mid <= l.lo || mid >= l.hi {
		l.done = true
		return 0, false
	}
	return mid, true
}

// record takes a step's outcome at rate.
func (l *ladder) record(rate float64, pass bool, maxRate float64, refineSteps int) {
	if pass && rate > l.se.Max {
		l.se.Max = rate
	}
	switch {
	case l.refining && pass:
		l.lo, l.refine = rate, l.refine-1
	case l.refining:
		l.hi, l.refine = rate, l.refine-1
	case pass:
		l.lo, l.rate = rate, rate*2
		if l.rate > maxRate {
			l.done = true
		}
	default:
		l.hi, l.refining, l.refine = rate, true, refineSteps
		if l.lo <= 0 {
			l.done = true
		}
	}
}

func (s *Suite) tpSeries(ctx context.Context, conns int) ([]TPSeries, error) {
	o := s.opt
	lads := map[string]*ladder{}
	defer func() {
		for _, l := range lads {
			if l.px != nil {
				l.px.stop()
			}
			if l.prov != nil {
				l.prov.proc.Kill()
			}
		}
	}()
	for _, tg := range targets {
		l := &ladder{se: TPSeries{Target: tg, Conns: conns}, rate: o.TPStart}
		lads[tg] = l
		var err error
		if l.prov, err = s.startProvider(ctx, fastProvider, 0, "", 0); err == nil {
			l.px, err = s.startProxy(ctx, tg, l.prov, proxyOpts{})
		}
		if err != nil {
			l.se.Error, l.done = err.Error(), true
			s.logf("  throughput %s %d conns: %v", tg, conns, err)
		}
	}

	// step runs one rate against tg and judges it.
	step := func(tg string, rate float64) (TPStep, error) {
		l := lads[tg]
		spec := loadSpec{Conns: conns, Rate: rate, Duration: o.TPStep, Timeout: 2 * time.Second}
		if conns > 2000 {
			spec.ConnectRate, spec.ConnectTimeout = o.ConnectRate, 10*time.Second
		}
		st, _, err := s.loadStep(ctx, fmt.Sprintf("tp-%s-%d-%s-%d", tg, conns, fmtNum(rate), len(l.se.Steps)), l.prov, l.px, spec, o.TPWarmup)
		if err != nil {
			return st, err
		}
		st.Pass = float64(st.Failed) <= 0.001*float64(st.Sent) && st.Sent > 0 &&
			float64(st.OK) >= 0.999*float64(st.Sent) && st.SteadyP99ms <= ms(o.TPMaxP99)
		l.se.Steps = append(l.se.Steps, st)
		if st.Pass && rate >= l.se.Max {
			l.se.Command = spec.command("$" + targetVar(tg))
		}
		s.logf("  throughput %s %d conns %.0f/s: pass=%v steady p99 %.1fms (whole run %.1fms) failed %d proxy %.2f cores %.2f µs/req, load %.2f µs/req",
			tg, conns, rate, st.Pass, st.SteadyP99ms, st.P99ms, st.Failed, st.ProxyCPU, st.ProxyUsPerReq, st.LoadUsPerReq)
		if !l.px.alive() {
			return st, fmt.Errorf("%s died during the run", tg)
		}
		return st, nil
	}
	for round := 0; ; round++ {
		order := alternate(targets, round)
		active := false
		for _, tg := range order {
			l := lads[tg]
			rate, ok := l.next()
			if !ok {
				continue
			}
			active = true
			st, err := step(tg, rate)
			if err == nil && !st.Pass && marginal(st, o.TPMaxP99) {
				st, err = step(tg, rate)
				if err == nil {
					l.se.Steps[len(l.se.Steps)-1].Repeat = true
				}
			}
			if err != nil {
				l.se.Error, l.done = err.Error(), true
				s.logf("  throughput %s %d conns: %v", tg, conns, err)
				if ctx.Err() != nil {
					return seriesOf(lads), ctx.Err()
				}
				continue
			}
			l.record(rate, st.Pass, o.TPMax, o.TPRefine)
		}
		if !active {
			break
		}
	}
	sg := lads[stormgate]
	if o.TPProfile && conns == slices.Max(o.TPConns) && sg.se.Max > 0 && sg.se.Error == "" {
		if err := s.profileAtMax(ctx, sg.prov, sg.px, conns, sg.se.Max); err != nil && !errors.Is(err, context.Canceled) {
			s.logf("  throughput %s %d conns: profiled step: %v", stormgate, conns, err)
		}
	}
	return seriesOf(lads), ctx.Err()
}

// marginal reports a failed step worth one repeat: its p99 within twice the bound and at most
// 1 % of its requests failed.
func marginal(st TPStep, maxP99 time.Duration) bool {
	return st.Sent > 0 && st.SteadyP99ms <= 2*ms(maxP99) && float64(st.Failed) <= 0.01*float64(st.Sent)
}

// seriesOf returns the ladders' series in target order.
func seriesOf(lads map[string]*ladder) []TPSeries {
	var out []TPSeries
	for _, tg := range targets {
		if l, ok := lads[tg]; ok {
			out = append(out, l.se)
		}
	}
	return out
}
