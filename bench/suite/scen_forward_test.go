package main

import (
	"testing"
	"time"
)

// TestFwdBoundCoversThePlan: the forward scenario's processes must outlive its plan. With a base build
// (BENCH_BASE_REF) the default plan ran 10m29s on 2026-12-05, past the suite's 10-minute default bound,
// and the profiled runs at 10,000 connections found both floors, their providers and Stormgate killed.
func TestFwdBoundCoversThePlan(t *testing.T) {
	o := Options{ConnectRate: 2000}
	res := &ForwardResult{Loads: []FwdLoad{{2000, 4000}, {10000, 5000}}, Lead: 2 * time.Second,
		Window: 4 * time.Second, Windows: 3, PairWindows: 20, ProfWindow: 4 * time.Second}
	targets := len(fwdTargets) + 1 // and the base build
	const measured = 10*time.Minute + 29*time.Second
	if plan := fwdBound(o, res, targets, len(fwdProfiled)) / 2; plan < measured {
		t.Fatalf("the plan's estimate %v is below the %v the run took", plan, measured)
	}
	if b := fwdBound(o, res, targets, len(fwdProfiled)); b <= defaultProcBound {
		t.Fatalf("bound %v, not above the suite's default %v", b, defaultProcBound)
	}
}
