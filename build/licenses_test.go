package build

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stormgate/stormgate/build/licenses"
)

var updateLicenses = flag.Bool("update", false, "rewrite docs/licenses.md and NOTICE from the module cache")

// TestLicenses is the dependency license check of `make test`: every module linked into the
// data-plane build and the full build has a license file that says Apache-2.0 or a license
// compatible with it, Stormgate's own LICENSE is Apache-2.0, and docs/licenses.md and NOTICE are
// what the module cache says (regenerate with -update).
func TestLicenses(t *testing.T) {
	inv, err := licenses.Take("..")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range inv.Problems() {
		t.Errorf("cannot ship: %s", p)
	}
	var dataplane, main int
	for _, m := range inv.Modules {
		if m.Main {
			main++
			if strings.Join(m.Licenses, ",") != "Apache-2.0" || m.Notice == "" {
				t.Errorf("Stormgate's own LICENSE says %v (want Apache-2.0) and NOTICE %d bytes", m.Licenses, len(m.Notice))
			}
		}
		for _, b := range inv.In[m.Path] {
			if b == licenses.Shipped[0].Name {
				dataplane++
			}
		}
	}
	if main != 1 || dataplane < 10 {
		t.Fatalf("found %d main modules and %d in the data-plane build: the listing is wrong", main, dataplane)
	}
	for _, f := range []struct{ path, want string }{
		{filepath.Join("..", "docs", "licenses.md"), inv.Markdown()},
		{filepath.Join("..", "NOTICE"), inv.Notice()},
	} {
		if *updateLicenses {
			if err := os.WriteFile(f.path, []byte(f.want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(f.path)
		if err != nil || string(got) != f.want {
			t.Errorf("%s is not what the module cache says (err %v): run go test ./build -run TestLicenses -update and review the diff", f.path, err)
		}
	}
	t.Logf("%d modules in the shipped builds, %d in the data-plane build, all under %v", len(inv.Modules), dataplane, licenses.Allowed)
}
