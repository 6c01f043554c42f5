package main

import (
	"context"
	"fmt"
	"math"
	"time"
)

// runRestart is scenario 4: the provider is SIGKILLed under load and started again ~1 s later.
// Consumers reconnect after 1 s when their connection closes (as Dubbo consumers do).
func (s *Suite) runRestart(ctx context.Context) (*RestartResult, error) {
	o := s.opt
	res := &RestartResult{Provider: fastProvider, Conns: o.RestartConns, Rate: o.RestartRate,
		KillAfter: o.RestartKill, Down: o.RestartDown}
	err := s.eachTarget(ctx, "restart", func(tg string) error {
		row, err := s.restartTarget(ctx, tg)
		if err != nil {
			row.Error = err.Error()
		}
		res.Rows = append(res.Rows, row)
		return err
	})
	return res, err
}

func (s *Suite) restartTarget(ctx context.Context, tg string) (RestartRow, error) {
	o := s.opt
	row := RestartRow{Target: tg}
	prov, err := s.startProvider(ctx, fastProvider, 0, "")
	if err != nil {
		return row, err
	}
	defer func() { prov.proc.Kill() }()
	px, err := s.startProxy(ctx, tg, prov, proxyOpts{})
	if err != nil {
		return row, err
	}
	defer px.stop()

	spec := loadSpec{Conns: o.RestartConns, Rate: o.RestartRate, Duration: o.RestartDuration,
		Timeout: o.RestartTimeout, Reconnect: time.Second}
	row.Command = spec.command("$" + targetVar(tg))
	h, err := s.startLoad(ctx, "restart-"+tg, px.addr, "", spec)
	if err != nil {
		return row, err
	}
	if err := h.waitRun(ctx); err != nil {
		h.proc.Kill()
		return row, err
	}
	if err := sleepCtx(ctx, o.RestartKill); err != nil {
		h.proc.Kill()
		return row, err
	}
	m0 := s.snapshot(ctx, nil, px, nil).m
	tKill := time.Now()
	prov.proc.Kill()
	s.logf("  restart %s: provider killed", tg)
	if err := sleepCtx(ctx, o.RestartDown); err != nil {
		h.proc.Kill()
		return row, err
	}
	prov, err = s.startProvider(ctx, fastProvider, prov.port, "")
	if err != nil {
		h.proc.Kill()
		return row, fmt.Errorf("restarting the provider: %w", err)
	}
	row.DownFor = time.Since(tKill).Round(time.Millisecond)
	s.logf("  restart %s: provider back after %v", tg, row.DownFor)
	run, err := h.wait()
	if err != nil {
		return row, err
	}
	m1 := s.snapshot(ctx, nil, px, nil).m
	r := run.Result
	row.Sent, row.OK, row.Errors = r.Sent, r.OK, r.Errors+r.Exceptions
	row.Timeouts, row.Lost, row.Unsent = r.Timeouts, r.Lost, r.Unsent
	row.Resets, row.ClosedByPeer, row.ConnectFailures = r.Resets, r.ClosedByPeer, r.ConnectFailures.Total()
	row.Reconnects = r.Reconnects
	row.P99ms, row.MaxMs = ms(r.Latency.P99), ms(r.Latency.Max)
	row.Held = delta(m0, m1, "stormgate_hold_outcomes_total", `outcome="sent"`)
	row.LocalReplies = delta(m0, m1, "stormgate_local_replies_total")
	row.Points, row.Recovery = okSeries(run.Series, tKill, o.RestartRate)
	s.logf("  restart %s: ok %d/%d, errors %d, timeouts %d, lost %d, unsent %d, resets %d, closed %d, recovery %v, max %.0fms",
		tg, row.OK, row.Sent, row.Errors, row.Timeouts, row.Lost, row.Unsent, row.Resets, row.ClosedByPeer, row.Recovery, row.MaxMs)
	return row, nil
}

// okSeries turns the progress lines of the request phase into answered requests per second,
// plotted against seconds since the kill, and finds the recovery: the end of the last interval
// after the kill that answered under 90 % of the rate. Intervals are the load tool's, about one
// second each. (Failures show as a drop in answers; timeouts are only counted Timeout later, so
// they are not used to place the recovery.)
func okSeries(series []progress, tKill time.Time, rate float64) ([]Point, time.Duration) {
	var pts []Point
	var recovery time.Duration
	var prev *progress
	for i := range series {
		cur := &series[i]
		if cur.Phase != "run" {
			prev = nil
			continue
		}
		if prev != nil {
			dt := cur.At.Sub(prev.At).Seconds()
			if dt > 0 {
				okps := float64(cur.OK-prev.OK) / dt
				pts = append(pts, Point{X: round3(cur.At.Sub(tKill).Seconds()), Y: round3(okps)})
				if okps < 0.9*rate && cur.At.After(tKill) {
					recovery = cur.At.Sub(tKill)
				}
			}
		}
		prev = cur
	}
	return pts, recovery.Round(10 * time.Millisecond)
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }
