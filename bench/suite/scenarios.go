package main

import (
	"context"
	"fmt"
	"slices"
)

// scenario is one entry of `suite run`: the name --scenarios takes, how it runs, what it needs
// and, for the scenarios whose doc section a run of them alone may rewrite, how.
type scenario struct {
	name string
	// run measures and stores the scenario's result in r (its options are copied into the
	// result as it starts); an error is the scenario's failure, shown in the doc.
	run func(s *Suite, ctx context.Context, r *Results) error
	// haproxy, floor, dubboGo: it needs HAProxy, the bench/floor programs, dgprovider and dgconsumer.
	haproxy, floor, dubboGo bool
	// update, when set, rewrites the scenario's own section of doc (and its plots in imgDir)
	// with p: `suite run --update-section`.
	update func(p *reporter, doc, imgDir string) (string, error)
}

// scenarios in the order a full run takes them.
var scenarios = []scenario{
	{name: "micro", run: func(s *Suite, ctx context.Context, r *Results) error { r.Micro = s.runMicro(ctx); return nil }},
	{name: "quiet", haproxy: true, floor: true, run: into((*Suite).runQuiet, func(r *Results) **QuietResult { return &r.Quiet })},
	{name: "idle", haproxy: true, run: into((*Suite).runIdle, func(r *Results) **IdleResult { return &r.Idle })},
	{name: "heartbeat", haproxy: true, floor: true, run: into((*Suite).runHeartbeat, func(r *Results) **HeartbeatResult { return &r.Heartbeat })},
	{name: "latency", haproxy: true, run: into((*Suite).runLatency, func(r *Results) **LatencyResult { return &r.Latency })},
	{name: "forward", haproxy: true, floor: true, run: into((*Suite).runForward, func(r *Results) **ForwardResult { return &r.Forward })},
	{name: "throughput", haproxy: true, run: into((*Suite).runThroughput, func(r *Results) **ThroughputResult { return &r.Throughput })},
	{name: "restart", haproxy: true, update: updateRestartSection, run: into((*Suite).runRestart, func(r *Results) **RestartResult { return &r.Restart })},
	{name: "giveup", haproxy: true, dubboGo: true, run: into((*Suite).runGiveUp, func(r *Results) **GiveUpResult { return &r.GiveUp })},
	{name: "greedy", haproxy: true, run: into((*Suite).runGreedy, func(r *Results) **GreedyResult { return &r.Greedy })},
	{name: "storm", haproxy: true, run: into((*Suite).runStorm, func(r *Results) **StormResult { return &r.Storm })},
	{name: "triple-idle", update: updateTripleSection, haproxy: true, dubboGo: true, run: into((*Suite).runTripleIdle, func(r *Results) **IdleResult { return &r.TripleIdle })},
	{name: "triple-ping", update: updateTripleSection, dubboGo: true, run: into((*Suite).runTriplePing, func(r *Results) **HeartbeatResult { return &r.TriplePing })},
	{name: "triple-forward", update: updateTripleSection, haproxy: true, dubboGo: true, run: into((*Suite).runTripleForward, func(r *Results) **ForwardResult { return &r.TripleForward })},
	{name: "triple-restart", update: updateTripleSection, haproxy: true, dubboGo: true, run: into((*Suite).runTripleRestart, func(r *Results) **RestartResult { return &r.TripleRestart })},
	{name: "triple-storm", update: updateTripleSection, haproxy: true, dubboGo: true, run: into((*Suite).runTripleStorm, func(r *Results) **StormResult { return &r.TripleStorm })},
	{name: "fleet", update: updateFleetSection, run: into((*Suite).runFleet, func(r *Results) **FleetResult { return &r.Fleet })},
}

// into adapts a scenario's run method to the table: its result goes to the field of Results
// that field names.
func into[T any](run func(*Suite, context.Context) (*T, error), field func(*Results) **T) func(*Suite, context.Context, *Results) error {
	return func(s *Suite, ctx context.Context, r *Results) (err error) {
		*field(r), err = run(s, ctx)
		return err
	}
}

// allScenarios are the scenarios' names in run order: the default of --scenarios.
var allScenarios = scenarioNames(scenarios)

func scenarioNames(sc []scenario) []string {
	var names []string
	for _, x := range sc {
		names = append(names, x.name)
	}
	return names
}

// selectScenarios looks names up in the table, keeping their order.
func selectScenarios(names []string) ([]scenario, error) {
	var out []scenario
	for _, n := range names {
		i := slices.IndexFunc(scenarios, func(x scenario) bool { return x.name == n })
		if i < 0 {
			return nil, fmt.Errorf("unknown scenario %q", n)
		}
		out = append(out, scenarios[i])
	}
	return out, nil
}
