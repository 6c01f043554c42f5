package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/stormgate/stormgate/xds/fleet"
)

// FleetResult is scenario 6: the control plane at fleet scale, two runs of
// `stormbench xds-fleet` (real `sidecar control-plane` replicas, real xds.Client nodes).
type FleetResult struct {
	Scale    *FleetRun `json:"scale"`    // one replica, FleetNodes nodes
	Failover *FleetRun `json:"failover"` // two replicas, FleetFailoverNodes nodes, one killed
	// Publish is BenchmarkPublish (xds): a change's publish work with shared
	// snapshots and with one snapshot per node.
	Publish        []MicroRow `json:"publish"`
	PublishCommand string     `json:"publish_command"`
}

// FleetRun is one `stormbench xds-fleet` result with its command.
type FleetRun struct {
	fleet.Result
	Command string `json:"command"`
	Error   string `json:"error,omitempty"`
}

func (s *Suite) runFleet(ctx context.Context) (*FleetResult, error) {
	o := s.opt
	res := &FleetResult{}
	args := []string{"test", "-run=NONE", "-bench=Publish", "-benchmem", "-benchtime=1s", "./xds/controlplane/"}
	res.PublishCommand = "go " + strings.Join(args, " ")
	bctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	cmd := exec.CommandContext(bctx, "go", args...)
	cmd.Dir = s.root
	out, berr := cmd.CombinedOutput()
	cancel()
	res.Publish = parseBench(string(out))
	if berr != nil {
		s.logf("  fleet: %s: %v", res.PublishCommand, berr)
	}
	var err error
	res.Scale, err = s.fleetRun(ctx, "fleet-scale", "--nodes", strconv.Itoa(o.FleetNodes), "--spawn", "1",
		"--changes", strconv.Itoa(o.FleetChanges))
	if err != nil {
		return res, err
	}
	res.Failover, err = s.fleetRun(ctx, "fleet-failover", "--nodes", strconv.Itoa(o.FleetFailoverNodes), "--spawn", "2",
		"--failover", "--changes", "1")
	return res, err
}

// fleetRun runs one `stormbench xds-fleet` and reads its JSON result. A run
// whose checks failed still has a result: its failures are shown.
func (s *Suite) fleetRun(ctx context.Context, name string, args ...string) (*FleetRun, error) {
	out := filepath.Join(s.out, "runs", name+".json")
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return nil, err
	}
	argv := append([]string{s.bins.stormbench, "xds-fleet", "--sidecar", s.bins.sidecar, "--json", out}, args...)
	p, err := s.start(ctx, procSpec{name: name, argv: argv, bound: 10 * time.Minute})
	if err != nil {
		return nil, err
	}
	waitErr := p.Wait()
	run := &FleetRun{}
	b, err := os.ReadFile(out)
	if err != nil {
		return nil, fmt.Errorf("%s: no result (%v; exit: %v); see %s", name, err, waitErr, p.LogPath)
	}
	if err := json.Unmarshal(b, run); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	run.Command = "stormbench xds-fleet " + strings.Join(args, " ") + " --sidecar bin/sidecar"
	if waitErr != nil {
		run.Error = fmt.Sprintf("exit: %v; see %s", waitErr, p.LogPath)
	}
	s.logf("  %s: %d nodes, %d replica(s), %d changes, failures %v", name, run.Nodes, run.Replicas, len(run.Changes), run.Failures)
	return run, nil
}
