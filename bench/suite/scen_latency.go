package main

import (
	"context"
	"fmt"
	"time"

	"github.com/stormgate/stormgate/loadgen"
)

// latencyMethods are the two methods of scenario 2: the fast one and the incident's 100 ms one.
var latencyMethods = []struct{ name, method, arg string }{
	{"echo", "echo", "hello"},
	{"sleep 100ms", "sleep", "100ms"},
}

// runLatency is scenario 2: fixed-rate latency at many connections, project's fast provider.
func (s *Suite) runLatency(ctx context.Context) (*LatencyResult, error) {
	o := s.opt
	res := &LatencyResult{Provider: fastProvider, Conns: o.LatConns, Rate: o.LatRate}
	err := s.eachTarget(ctx, "latency", func(tg string) error {
		rows, err := s.latencyTarget(ctx, tg)
		if err != nil {
			rows = append(rows, LatencyRow{Target: tg, Error: err.Error()})
		}
		res.Rows = append(res.Rows, rows...)
		return err
	})
	return res, err
}

func (s *Suite) latencyTarget(ctx context.Context, tg string) ([]LatencyRow, error) {
	o := s.opt
	prov, px, stop, err := s.startPair(ctx, fastProvider, tg, 0)
	if err != nil {
		return nil, err
	}
	defer stop()
	var rows []LatencyRow
	for _, m := range latencyMethods {
		spec := loadSpec{Conns: o.LatConns, ConnectRate: o.ConnectRate, ConnectTimeout: 10 * time.Second, Rate: o.LatRate, Duration: o.LatDuration,
			Method: m.method, Arg: m.arg}
		row := LatencyRow{Target: tg, Method: m.name, Conns: o.LatConns, Rate: o.LatRate,
			Command: spec.command("$" + targetVar(tg))}
		st, run, err := s.loadStep(ctx, fmt.Sprintf("latency-%s-%s", tg, m.method), prov, px, spec, 2*time.Second)
		if err != nil {
			return rows, err
		}
		row.MedianP99ms, row.P99Seconds = medianSecondP99(run, 2*time.Second)
		r := run.Result
		row.Sent, row.OK, row.Failed = r.Sent, r.OK, failed(r)
		row.P50ms, row.P99ms, row.P999ms, row.MaxMs = ms(r.Latency.P50), ms(r.Latency.P99), ms(r.Latency.P999), ms(r.Latency.Max)
		for _, q := range curveQuantiles {
			row.Curve = append(row.Curve, ms(r.LatencyHist.Percentile(q)))
		}
		row.ProxyCPU, row.ProxyUsPerReq, row.ProviderCPU, row.LoadUsPerReq = st.ProxyCPU, st.ProxyUsPerReq, st.ProviderCPU, st.LoadUsPerReq
		row.LoadCPU, row.BatchFrames = st.LoadCPU, st.BatchFrames
		s.logf("  latency %s %s: p50 %.2fms p99 %.2fms p99.9 %.2fms max %.1fms, failed %d, proxy %.2f µs/req",
			tg, m.name, row.P50ms, row.P99ms, row.P999ms, row.MaxMs, row.Failed, row.ProxyUsPerReq)
		rows = append(rows, row)
		if !px.alive() {
			return rows, fmt.Errorf("%s died during the run", tg)
		}
	}
	return rows, nil
}

// loadStep runs one fixed-rate load and samples CPU over the middle of its request phase: from
// lead after the phase is seen (it is seen within a second of its start) to 1.5 s before it ends.
// Requests in the window are rate × window (open loop). SteadyP99ms is the worst one-second p99
// of the load tool's progress lines after the lead: the steady state, without the transient of
// thousands of connections just opened.
func (s *Suite) loadStep(ctx context.Context, name string, prov *provider, px *proxy, spec loadSpec, lead time.Duration) (TPStep, *loadRun, error) {
	st := TPStep{Rate: spec.Rate}
	h, err := s.startLoad(ctx, name, px.addr, "", spec)
	if err != nil {
		return st, nil, err
	}
	if err := h.waitRun(ctx); err != nil {
		h.proc.Kill()
		return st, nil, err
	}
	win := spec.Duration - lead - 1500*time.Millisecond
	if win < 500*time.Millisecond {
		win = 500 * time.Millisecond
	}
	if err := sleepCtx(ctx, lead); err != nil {
		h.proc.Kill()
		return st, nil, err
	}
	a := s.snapshot(ctx, prov, px, h)
	if err := sleepCtx(ctx, win); err != nil {
		h.proc.Kill()
		return st, nil, err
	}
	b := s.snapshot(ctx, prov, px, h)
	run, err := h.wait()
	if err != nil {
		return st, nil, err
	}
	w := between(a, b)
	reqs := spec.Rate * w.elapsed.Seconds()
	st.ProxyCPU, st.ProviderCPU, st.LoadCPU = w.proxyCores(), w.provCores(), w.loadCores()
	if n := delta(a.m, b.m, "stormgate_upstream_write_batch_frames_count"); n > 0 {
		st.BatchFrames = delta(a.m, b.m, "stormgate_upstream_write_batch_frames_sum") / n
	}
	if px.kind != direct {
		st.ProxyUsPerReq = perOp(a.px, b.px, reqs)
	}
	r := run.Result
	st.Sent, st.OK, st.Failed = r.Sent, r.OK, failed(r)
	st.P99ms = ms(r.Latency.P99)
	st.SteadyP99ms = -1
	for _, pr := range run.Series {
		if pr.Phase == "run" && pr.At.After(run.RunAt.Add(lead)) {
			st.SteadyP99ms = max(st.SteadyP99ms, pr.P99ms)
		}
	}
	if st.SteadyP99ms < 0 {
		st.SteadyP99ms = st.P99ms
	}
	st.LoadUsPerReq = float64(r.CPU.PerRequest) / 1e3
	return st, run, nil
}

// failed counts every request a consumer would see fail.
func failed(r *loadgen.Result) uint64 {
	return r.Errors + r.Exceptions + r.Timeouts + r.Lost + r.Unsent + r.Abandoned
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }
