package main

import (
	"math"
	"testing"
	"time"

	"github.com/stormgate/stormgate/settings"
	"github.com/stormgate/stormgate/xds/controlplane/cpfile"
)

// The file the tool writes is valid, and its two kinds of change affect what the tool says they do:
// the default every node, the app-3 selector one node in --apps.
func TestFleetChangesAffectWhatTheySay(t *testing.T) {
	const nodes, namespaces, apps = 1000, 5, 10
	versions := func(g fleetGen) []string {
		f, err := cpfile.Parse([]byte(g.yaml(namespaces, apps)))
		if err != nil {
			t.Fatalf("generated file invalid: %v\n%s", err, g.yaml(namespaces, apps))
		}
		out := make([]string, nodes)
		for i := range out {
			out[i] = settings.Version(f.Resolve(fleetNode(i, namespaces, apps)).Overlay)
		}
		return out
	}
	changed := func(a, b []string) (n int) {
		for i := range a {
			if a[i] != b[i] {
				n++
			}
		}
		return n
	}
	base := versions(fleetGen{})
	if n := changed(base, versions(fleetGen{def: 1})); n != nodes {
		t.Errorf("default change affects %d nodes, want %d", n, nodes)
	}
	if n := changed(base, versions(fleetGen{sel: 1})); n != nodes/apps {
		t.Errorf("selector change affects %d nodes, want %d", n, nodes/apps)
	}
	classes := map[string]bool{}
	for i := range nodes {
		n := fleetNode(i, namespaces, apps)
		classes[n.Namespace+"/"+n.Labels["app"]] = true
	}
	if len(classes) != namespaces*apps {
		t.Errorf("%d distinct (namespace, app) pairs, want %d", len(classes), namespaces*apps)
	}
}

func TestFleetQuantiles(t *testing.T) {
	ds := []time.Duration{}
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	if quantileMs(ds, 0.5) != 50 || quantileMs(ds, 0.99) != 99 || quantileMs(ds, 1) != 100 || quantileMs(nil, 0.5) != 0 {
		t.Errorf("quantiles: %v %v %v", quantileMs(ds, 0.5), quantileMs(ds, 0.99), quantileMs(ds, 1))
	}
	inf := math.Inf(1)
	before := map[float64]float64{0.1: 10, 0.5: 10, 1: 10, inf: 10}
	after := map[float64]float64{0.1: 60, 0.5: 105, 1: 110, inf: 110}
	if q := histogramQuantile(0.99, before, after); q != 1 {
		t.Errorf("p99 bucket %v, want 1 (99 of 100 new observations are at or below 1 s)", q)
	}
	if q := histogramQuantile(0.5, before, after); q != 0.1 {
		t.Errorf("p50 bucket %v, want 0.1", q)
	}
	if q := histogramQuantile(0.99, before, before); q != 0 {
		t.Errorf("nothing observed: %v", q)
	}
}
