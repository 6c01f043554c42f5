package main

import (
	"context"
	"slices"
	"time"
)

// snap is one instant of a scenario: CPU and RSS of the provider, the proxy and the load tool,
// Stormgate's metrics, and the load tool's latest progress line.
type snap struct {
	prov, px, load Usage
	m              metrics
	pr             progress
}

// snapshot samples everything it can; a process that has gone reads as zero.
func (s *Suite) snapshot(ctx context.Context, prov *provider, px *proxy, h *loadHandle) snap {
	var sn snap
	if prov != nil {
		sn.prov, _ = sampleUsage(prov.proc.PID)
	}
	if px != nil {
		sn.px, _ = sampleUsage(px.pids()...)
		if px.metrics != "" {
			sn.m, _ = scrape(ctx, px.metrics)
		}
	}
	if h != nil {
		sn.load, _ = sampleUsage(h.proc.PID)
		sn.pr = h.latest()
	}
	return sn
}

// window is what happened between two snapshots.
type window struct {
	a, b    snap
	elapsed time.Duration
}

func between(a, b snap) window { return window{a: a, b: b, elapsed: b.prov.At.Sub(a.prov.At)} }

// cores converts CPU time over the window into cores (1.0 = one core busy).
func (w window) cores(a, b Usage) float64 {
	el := b.At.Sub(a.At)
	if el <= 0 {
		return 0
	}
	return float64(b.CPU-a.CPU) / float64(el)
}

func (w window) provCores() float64  { return w.cores(w.a.prov, w.b.prov) }
func (w window) proxyCores() float64 { return w.cores(w.a.px, w.b.px) }
func (w window) loadCores() float64  { return w.cores(w.a.load, w.b.load) }

// perOp is CPU microseconds per operation: cpu time over the window / ops.
func perOp(a, b Usage, ops float64) float64 {
	if ops <= 0 {
		return 0
	}
	return float64(b.CPU-a.CPU) / 1e3 / ops
}

// sleepCtx sleeps for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func mib(kib int64) float64 { return float64(kib) / 1024 }

// alternate is the order of targets in round r of a side-by-side measurement: as given in even
// rounds, reversed in odd ones, so that a drift in the machine's speed hits every target alike.
func alternate(targets []string, r int) []string {
	order := slices.Clone(targets)
	if r%2 == 1 {
		slices.Reverse(order)
	}
	return order
}
