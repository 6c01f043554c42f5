package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// What `run` reports to the control plane: flags win over the environment;
// the downward-API labels file adds to --xds-labels.
func TestXDSNodeInfoFlagsAndEnv(t *testing.T) {
	dir := t.TempDir()
	labels := filepath.Join(dir, "labels")
	if err := os.WriteFile(labels, []byte("app=\"payment\"\ntrack=\"canary\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{envNamespace: "shop", envCluster: "east", envLabelsFile: labels}
	getenv := func(k string) string { return env[k] }

	n, err := xdsNodeFlags{}.nodeInfo("p-0.shop", getenv)
	if err != nil {
		t.Fatal(err)
	}
	if n.Namespace != "shop" || n.Cluster != "east" || !reflect.DeepEqual(n.Labels, map[string]string{"app": "payment", "track": "canary"}) {
		t.Errorf("from the environment: %+v", n)
	}

	n, err = xdsNodeFlags{namespace: "bank", cluster: "west", labels: "tier=gold,app=ledger"}.nodeInfo("p-0.bank", getenv)
	if err != nil {
		t.Fatal(err)
	}
	if n.Namespace != "bank" || n.Cluster != "west" ||
		!reflect.DeepEqual(n.Labels, map[string]string{"app": "payment", "track": "canary", "tier": "gold"}) {
		t.Errorf("flags over the environment, file over --xds-labels: %+v", n)
	}

	if _, err := (xdsNodeFlags{labelsFile: filepath.Join(dir, "missing")}).nodeInfo("x", getenv); err == nil ||
		!strings.Contains(err.Error(), "--xds-labels-file") {
		t.Errorf("missing labels file: %v", err)
	}
	if _, err := (xdsNodeFlags{labels: "novalue"}).nodeInfo("x", func(string) string { return "" }); err == nil ||
		!strings.Contains(err.Error(), "--xds-labels") {
		t.Errorf("bad --xds-labels: %v", err)
	}
	if got := splitAddresses(" a:1, b:2 ,,"); !reflect.DeepEqual(got, []string{"a:1", "b:2"}) {
		t.Errorf("splitAddresses: %v", got)
	}
}
