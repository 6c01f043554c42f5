//go:build !dataplane

package main

import (
	"strings"
	"testing"
)

func TestControlPlaneLogsLikeRun(t *testing.T) {
	run := newRunCmd().Flags().Lookup("log-format").DefValue
	cp := newControlPlaneCmd().Flags().Lookup("log-format").DefValue
	if run != "json" || cp != run {
		t.Fatalf("default log format: run %q, control-plane %q; want both json", run, cp)
	}
}

// TestFullBuildHasControlCommands: the release binary (and the stormgate/control image)
// carries the control commands; commands_dataplane_test.go checks the other build.
func TestFullBuildHasControlCommands(t *testing.T) {
	root := newRootCmd()
	for _, name := range []string{"control-plane", "inject", "inject-webhook"} {
		c, _, err := root.Find([]string{name})
		if err != nil || c.Name() != name || strings.HasPrefix(c.Short, "not in this build") {
			t.Errorf("%s: %v, %q", name, err, c.Short)
		}
	}
	if dataplaneOnly || strings.Contains(versionLine(), "data-plane") {
		t.Errorf("full build reports itself as the data-plane build: %s", versionLine())
	}
}
