package main

import (
	"fmt"
	"math"
	"time"
)

// plots renders every plot (file name → SVG). Each is always written; a missing figure is
// drawn as "n/a" or left out of its line chart.
func (p *reporter) plots() map[string][]byte {
	out := map[string][]byte{}

	// 1. Provider CPU with idle consumers.
	var idle []barSeries
	for _, tg := range targets {
		var vals []float64
		for _, period := range []time.Duration{time.Second, 30 * time.Second} {
			vals = append(vals, 100*fIdle(p.idle(tg, period), func(x *IdleRow) float64 { return x.ProviderCPU }))
		}
		idle = append(idle, barSeries{Name: targetTitle[tg], Color: targetColor[tg], Values: vals})
	}
	out["idle-provider-cpu.svg"] = barChart(chart{
		Title:  fmt.Sprintf("dubbo-go provider CPU, %s idle consumers", count(uint64(p.r.Options.IdleConns))),
		XLabel: "consumer heartbeat period", YLabel: "provider CPU, % of one core",
	}, []string{"1 s", "30 s"}, idle)

	// 2. Latency curves.
	xs := make([]float64, len(curveQuantiles))
	for i, q := range curveQuantiles {
		xs[i] = -math.Log10(1 - q)
	}
	ticks := []xTick{{-math.Log10(0.5), "p50"}, {1, "p90"}, {2, "p99"}, {3, "p99.9"}, {4, "p99.99"}}
	for _, m := range []struct{ method, file, title string }{
		{echoMethod, "latency-echo.svg", "echo"},
		{sleepMethod, "latency-sleep.svg", "100 ms method"},
	} {
		var ss []lineSeries
		for _, tg := range targets {
			s := lineSeries{Name: targetTitle[tg], Color: targetColor[tg]}
			if x := p.lat(tg, m.method); x != nil {
				for i, v := range x.Curve {
					if i < len(xs) {
						s.Points = append(s.Points, Point{X: xs[i], Y: v})
					}
				}
			}
			ss = append(ss, s)
		}
		out[m.file] = lineChart(chart{
			Title:  fmt.Sprintf("Latency by percentile, %s, %s conns, %s req/s", m.title, count(uint64(p.r.Options.LatConns)), num(p.r.Options.LatRate, 0)),
			XLabel: "percentile", YLabel: "latency, ms (log scale)", LogY: true,
		}, xs[0]-0.1, 4.1, ticks, nil, ss)
	}

	// 3. Throughput.
	var groups []string
	for _, c := range p.tpConns() {
		groups = append(groups, count(uint64(c))+" conns")
	}
	var tp []barSeries
	for _, tg := range targets {
		var vals []float64
		for _, c := range p.tpConns() {
			vals = append(vals, fTP(p.tp(tg, c)))
		}
		tp = append(tp, barSeries{Name: targetTitle[tg], Color: targetColor[tg], Values: vals})
	}
	out["throughput.svg"] = barChart(chart{
		Title: "Maximum sustained rate, small requests", XLabel: "consumer connections", YLabel: "requests/s",
	}, groups, tp)

	// 4. Restart.
	var rs []lineSeries
	xlo, xhi := -3.0, 8.0
	for _, tg := range targets {
		s := lineSeries{Name: targetTitle[tg], Color: targetColor[tg]}
		if x := p.restart(tg); x != nil {
			s.Points = x.Points
		}
		rs = append(rs, s)
	}
	down := p.r.Options.RestartDown.Seconds()
	if p.r.Restart != nil {
		xlo = -math.Ceil(p.r.Restart.KillAfter.Seconds())
		xhi = math.Ceil((p.r.Options.RestartDuration - p.r.Restart.KillAfter).Seconds())
		down = p.r.Restart.Down.Seconds()
	}
	var rticks []xTick
	for x := xlo; x <= xhi; x++ {
		rticks = append(rticks, xTick{X: x, Label: fmt.Sprintf("%.0f", x)})
	}
	out["restart.svg"] = lineChart(chart{
		Title:  fmt.Sprintf("Answers per second, provider killed at 0 s (%s consumers, %s req/s)", count(uint64(p.r.Options.RestartConns)), num(p.r.Options.RestartRate, 0)),
		XLabel: "seconds since the provider was killed", YLabel: "OK answers per second",
	}, xlo, xhi, rticks, []xTick{{0, "kill"}, {down, "restart"}}, rs)

	// 5. Accept storm first answer.
	stormTargets := []string{baseline, haproxy, stormgate}
	var sg []string
	for _, tg := range stormTargets {
		sg = append(sg, targetTitle[tg])
	}
	lowerBounds := func(never func(*StormRow) bool) []string {
		var l []string
		for _, tg := range stormTargets {
			if x := p.storm(tg); x != nil && never(x) {
				l = append(l, "never")
			} else {
				l = append(l, "")
			}
		}
		return l
	}
	pick := func(f func(*StormRow) float64) []float64 {
		var v []float64
		for _, tg := range stormTargets {
			if x := p.storm(tg); x != nil {
				v = append(v, f(x))
			} else {
				v = append(v, math.NaN())
			}
		}
		return v
	}
	out["storm-first-answer.svg"] = barChart(chart{
		Title:  fmt.Sprintf("Accept storm: first answer, %s connections at once", count(uint64(p.r.Options.StormConns))),
		XLabel: "target", YLabel: "time from dial to first answer, ms (log scale)", LogY: true,
	}, sg, []barSeries{
		{Name: "p50", Color: "#9ecae1", Values: pick(func(x *StormRow) float64 {
			if stormNever(x, 0.5) {
				return math.Max(x.FirstP50ms, x.FirstP99ms)
			}
			return x.FirstP50ms
		}), Labels: lowerBounds(func(x *StormRow) bool { return stormNever(x, 0.5) })},
		{Name: "p99", Color: "#3182bd", Values: pick(func(x *StormRow) float64 { return x.FirstP99ms }), Labels: lowerBounds(func(x *StormRow) bool { return stormNeverP99(x) })},
		{Name: "max", Color: "#08519c", Values: pick(func(x *StormRow) float64 {
			if stormNeverMax(x) {
				return math.Max(x.FirstMaxMs, x.FirstP99ms)
			}
			return x.FirstMaxMs
		}), Labels: lowerBounds(stormNeverMax)},
	})
	out["cpu-per-op.svg"] = p.floorPlot()
	return out
}
