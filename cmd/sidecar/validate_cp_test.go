package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// `sidecar validate` checks a control-plane directory as the control plane reads it, naming both files of
// a cross-file conflict, and refuses a node entry that sets a field no sidecar can change live.
func TestValidateControlPlanePaths(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cps := filepath.Join(dir, "cp.d")
	if err := os.Mkdir(cps, 0o755); err != nil {
		t.Fatal(err)
	}
	write("cp.d/a.yaml", "nodes:\n  p-0.shop: {hold: {timeout: 1s}}\n")
	write("cp.d/b.yaml", "nodes:\n  p-0.shop: {hold: {timeout: 2s}}\n")
	if err := validatePath(cps); err == nil || err.Error() != "nodes.p-0.shop: defined in two files: also at a.yaml line 2; keep one (b.yaml line 2)" {
		t.Errorf("directory: %v", err)
	}
	// A file's own mistake does not hide the cross-file one: one run shows both.
	both := filepath.Join(dir, "both.d")
	if err := os.Mkdir(both, 0o755); err != nil {
		t.Fatal(err)
	}
	write("both.d/a.yaml", "nodes:\n  p-0.shop: {hold: {timeout: 1s}}\n")
	write("both.d/b.yaml", "nodes:\n  p-0.shop: {hold: {timeout: 2s}}\n  p-1.shop:\n    listener: {address: \"0.0.0.0:1\"}\n")
	if err := validatePath(both); err == nil || !strings.Contains(err.Error(), "nodes.p-1.shop.listener.address: cannot be served") ||
		!strings.Contains(err.Error(), "nodes.p-0.shop: defined in two files: also at a.yaml line 2; keep one (b.yaml line 2)") {
		t.Errorf("directory with a file's own problem and a cross-file one: %v", err)
	}
	fixed := write("fixed.yaml", "nodes:\n  p-0.shop:\n    listener: {address: \"0.0.0.0:1\"}\n")
	if err := validatePath(fixed); err == nil || !strings.Contains(err.Error(), "nodes.p-0.shop.listener.address: cannot be served by a control plane") {
		t.Errorf("fixed field: %v", err)
	}
	if err := validatePath(write("settings.yaml", "hold: {timeout: 1s}\n")); err != nil {
		t.Errorf("a settings file: %v", err)
	}
}
