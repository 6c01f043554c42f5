package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stormgate/stormgate/xds/fleet"
)

func fleetFixture() *FleetResult {
	change := func(name string, n int) fleet.Change {
		return fleet.Change{Name: name, Affected: n, Acked: n, P50ms: 500, P99ms: 900, MaxMs: 950, CPP99ms: 500,
			Pushes: float64(n), CPUs: 0.4, CPUPerNode: 80, Unaffected: 5000 - n}
	}
	return &FleetResult{
		Scale: &FleetRun{Command: "stormbench xds-fleet --nodes 5000 --spawn 1", Result: fleet.Result{Nodes: 5000, Workers: 2, Replicas: 1,
			ConnectS: 2.7, RSSBeforeMiB: 26, RSSAfterMiB: 264, RSSPerNodeKiB: 48.8, HeapPerNodeKB: 23, IdleCPU: 0.004, Versions: 20,
			Changes: []fleet.Change{change("all nodes #1", 5000), change("one selector (app-3)", 500)}}},
		Failover: &FleetRun{Command: "stormbench xds-fleet --nodes 2000 --spawn 2 --failover", Result: fleet.Result{Nodes: 2000, Replicas: 2,
			Failover: &fleet.Failover{NodesOnKilled: 1000, P50ms: 470, P99ms: 505, MaxMs: 514, AllConnected: true,
				After: change("all nodes after the failover", 2000)}}},
	}
}

// make fleet rewrites only its section; the rest of the doc stays byte for byte.
func TestFleetSectionUpdate(t *testing.T) {
	r := fixture(1)
	r.Fleet = fleetFixture()
	full := (&reporter{r: r, img: "img"}).markdown()
	for _, want := range []string{fleetBegin, "## 6. Control plane at fleet scale", "**48.8 KiB per connected node**",
		"| all nodes #1 (5,000 nodes, 1 replica) | 5,000 | 5,000 | 500 ms |", "max **514 ms**", fleetEnd + "\n\n## 7. Heartbeats against the kernel's floor"} {
		if !strings.Contains(full, want) {
			t.Errorf("doc lacks %q", want)
		}
	}

	path := filepath.Join(t.TempDir(), "benchmarks.md")
	old := fixture(1)
	old.Fleet = nil
	before := (&reporter{r: old, img: "img"}).markdown()
	if !strings.Contains(before, "Not measured in this run.") {
		t.Fatalf("a run without the fleet scenario must say so")
	}
	if err := os.WriteFile(path, []byte(before), 0o644); err != nil {
		t.Fatal(err)
	}
	fleetOnly := &Results{Command: "make fleet", Started: time.Date(2026, 2, 3, 4, 5, 0, 0, time.UTC), Fleet: fleetFixture()}
	for range 2 { // idempotent: the second update replaces the first
		if err := updateSections(fleetOnly, path, filepath.Join(filepath.Dir(path), "img")); err != nil {
			t.Fatal(err)
		}
	}
	got, _ := os.ReadFile(path)
	i, j := strings.Index(before, fleetBegin), strings.Index(before, fleetEnd)+len(fleetEnd)
	gi, gj := strings.Index(string(got), fleetBegin), strings.Index(string(got), fleetEnd)+len(fleetEnd)
	if before[:i] != string(got)[:gi] || before[j:] != string(got)[gj:] {
		t.Fatalf("the text around the section changed")
	}
	if !strings.Contains(string(got), "Measured by `make fleet`, started 2026-02-03 04:05 UTC") || strings.Count(string(got), fleetBegin) != 1 {
		t.Errorf("section:\n%s", string(got)[gi:gj])
	}
}
