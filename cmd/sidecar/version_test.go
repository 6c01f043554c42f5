package main

import (
	"runtime/debug"
	"testing"
)

// An unstamped binary reports "dev" unless Go recorded a release as its module version (go install
// ...@vX.Y.Z); a stamped one reports the stamp.
func TestModuleVersion(t *testing.T) {
	for _, c := range []struct{ stamped, module, want string }{
		{"0.1.0-3-gabc1234", "v9.9.9", "0.1.0-3-gabc1234"},
		{"dev", "v0.2.0", "0.2.0"},
		{"dev", "v0.2.0-rc.1", "0.2.0-rc.1"},
		{"dev", "(devel)", "dev"},
		{"dev", "", "dev"},
		{"dev", "v0.0.0-20261202091200-7cea8b2abcde", "dev"},
		{"dev", "v0.0.0-20261202091200-7cea8b2abcde+dirty", "dev"},
		{"dev", "v0.2.1-0.20261202091200-7cea8b2abcde", "dev"},
	} {
		got := moduleVersion(c.stamped, func() (*debug.BuildInfo, bool) {
			return &debug.BuildInfo{Main: debug.Module{Version: c.module}}, true
		})
		if got != c.want {
			t.Errorf("stamped %q, module %q: %q, want %q", c.stamped, c.module, got, c.want)
		}
	}
}
