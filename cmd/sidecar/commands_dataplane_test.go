//go:build dataplane

package main

import (
	"strings"
	"testing"
)

// TestDataplaneBuildPointsToControlImage: in the data-plane build (the stormgate/sidecar
// image) the control commands fail with directions, and version says which build it is.
// make test runs this package with -tags dataplane too.
func TestDataplaneBuildPointsToControlImage(t *testing.T) {
	for _, name := range []string{"control-plane", "inject", "inject-webhook"} {
		root := newRootCmd()
		root.SetArgs([]string{name, "--config", "x.yaml"})
		err := root.Execute()
		if err == nil || !strings.Contains(err.Error(), "stormgate/control image") || !strings.Contains(err.Error(), "sidecar "+name+" is not in this build") {
			t.Errorf("%s in the data-plane build: %v", name, err)
		}
	}
	if !strings.Contains(versionLine(), "data-plane build") {
		t.Errorf("version line %q does not name the data-plane build", versionLine())
	}
}
