package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"
)

// runThroughput is scenario 3: the highest open-loop rate of small requests each target sustains.
// The rate doubles from TPStart until a step fails (a failed request over 0.1 %, or a one-second
// p99 after the TPWarmup above TPMaxP99), then TPRefine bisection steps narrow the gap. Every step opens its connections anew;
// the provider and proxy live for the whole series.
func (s *Suite) runThroughput(ctx context.Context) (*ThroughputResult, error) {
	o := s.opt
	res := &ThroughputResult{Provider: fastProvider, StepTime: o.TPStep, Warmup: o.TPWarmup, MaxP99ms: ms(o.TPMaxP99)}
	for _, conns := range o.TPConns {
		err := s.eachTarget(ctx, fmt.Sprintf("throughput %d conns", conns), func(tg string) error {
			se, err := s.tpSeries(ctx, tg, conns)
			if err != nil {
				se.Error = err.Error()
			}
			res.Series = append(res.Series, se)
			return err
		})
		if err != nil {
			return res, err
		}
	}
	return res, nil
}

func (s *Suite) tpSeries(ctx context.Context, tg string, conns int) (TPSeries, error) {
	o := s.opt
	se := TPSeries{Target: tg, Conns: conns}
	prov, err := s.startProvider(ctx, fastProvider, 0, "")
	if err != nil {
		return se, err
	}
	defer prov.proc.Kill()
	px, err := s.startProxy(ctx, tg, prov, proxyOpts{})
	if err != nil {
		return se, err
	}
	defer px.stop()

	step := func(rate float64) (bool, error) {
		spec := loadSpec{Conns: conns, Rate: rate, Duration: o.TPStep, Timeout: 2 * time.Second}
		if conns > 2000 {
			spec.ConnectRate, spec.ConnectTimeout = o.ConnectRate, 10*time.Second
		}
		st, _, err := s.loadStep(ctx, fmt.Sprintf("tp-%s-%d-%s", tg, conns, fmtNum(rate)), prov, px, spec, o.TPWarmup)
		if err != nil {
			return false, err
		}
		st.Pass = float64(st.Failed) <= 0.001*float64(st.Sent) && st.Sent > 0 &&
			float64(st.OK) >= 0.999*float64(st.Sent) && st.SteadyP99ms <= ms(o.TPMaxP99)
		se.Steps = append(se.Steps, st)
		if st.Pass && rate > se.Max {
			se.Max = rate
			se.Command = spec.command("$" + targetVar(tg))
		}
		s.logf("  throughput %s %d conns %.0f/s: pass=%v steady p99 %.1fms (whole run %.1fms) failed %d proxy %.2f cores %.2f µs/req, load %.2f µs/req",
			tg, conns, rate, st.Pass, st.SteadyP99ms, st.P99ms, st.Failed, st.ProxyCPU, st.ProxyUsPerReq, st.LoadUsPerReq)
		if !px.alive() {
			return false, fmt.Errorf("%s died during the run", tg)
		}
		return st.Pass, nil
	}

	lo, hi := 0.0, 0.0
	for rate := o.TPStart; rate <= o.TPMax; rate *= 2 {
		ok, err := step(rate)
		if err != nil {
			return se, err
		}
		if !ok {
			hi = rate
			break
		}
		lo = rate
	}
	for i := 0; i < o.TPRefine && hi > 0 && lo > 0; i++ {
		mid := math.Round((lo+hi)/2/500) * 500
		if mid <= lo || mid >= hi {
			break
		}
		ok, err := step(mid)
		if err != nil {
			return se, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	if o.TPProfile && tg == stormgate && conns == slices.Max(o.TPConns) && se.Max > 0 {
		if err := s.profileAtMax(ctx, prov, px, conns, se.Max); err != nil {
			s.logf("  throughput %s %d conns: profiled step: %v", tg, conns, err)
		}
	}
	return se, nil
}
