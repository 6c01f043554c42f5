package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/render's golden doc and plots from its results.json")

// TestRenderMatchesGolden renders testdata/render/results.json, a real `make bench` run's
// results written before the scenarios copied their options in, and compares the doc and every
// plot byte for byte with the golden copies beside it. A change to the report's code that changes
// what make bench writes fails here; if the change is meant, rerun with -update and review the
// diff of testdata/render.
func TestRenderMatchesGolden(t *testing.T) {
	const dir = "testdata/render"
	r, err := loadResults(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	if *updateGolden {
		out = dir
		if err := os.RemoveAll(filepath.Join(dir, "img")); err != nil {
			t.Fatal(err)
		}
	}
	if err := writeReport(r, filepath.Join(out, "benchmarks.md"), filepath.Join(out, "img")); err != nil {
		t.Fatal(err)
	}
	if !*updateGolden {
		sameAsGolden(t, dir, out)
	}
}

// TestRenderOldResults: a results.json whose Options lack the scenarios' settings (as one
// written before Options held them) renders as the golden copy, from the settings its
// scenarios' results recorded.
func TestRenderOldResults(t *testing.T) {
	const dir = "testdata/render"
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	opts := raw["options"].(map[string]any)
	for _, k := range []string{"idle_conns", "lat_conns", "lat_rate", "restart_conns", "restart_rate", "storm_conns",
		"storm_baseline_backlog", "hb_conns", "hb_pairs", "hb_settle_ns", "quiet_window_ns", "quiet_settle_ns",
		"quiet_profile_ns", "fwd_loads", "fwd_windows", "storm_somaxconn", "storm_accept_delay_ns", "fwd_lead_ns", "fwd_window_ns",
		"fwd_prof_window_ns", "tp_step_ns", "tp_warmup_ns", "tp_max_p99_ns"} {
		if _, ok := opts[k]; !ok {
			t.Fatalf("options.%s: no such setting in results.json", k)
		}
		delete(opts, k)
	}
	out := t.TempDir()
	old := filepath.Join(out, "results.json")
	if b, err = json.Marshal(raw); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(old, b, 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := loadResults(old)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeReport(r, filepath.Join(out, "benchmarks.md"), filepath.Join(out, "img")); err != nil {
		t.Fatal(err)
	}
	sameAsGolden(t, dir, out)
}

// sameAsGolden compares the doc and plots rendered into out with the golden copies in dir.
func sameAsGolden(t *testing.T, dir, out string) {
	t.Helper()
	want, got := renderedFiles(t, dir), renderedFiles(t, out)
	if !slices.Equal(want, got) {
		t.Fatalf("rendered files %v, golden %v", got, want)
	}
	for _, f := range want {
		w, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		g, err := os.ReadFile(filepath.Join(out, f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(w, g) {
			t.Errorf("%s differs from its golden copy at byte %d (to see how: go test -run TestRenderMatchesGolden -update, then git diff %s)", f, firstDiff(w, g), dir)
		}
	}
}

// renderedFiles lists the doc and the plots under dir, relative to it.
func renderedFiles(t *testing.T, dir string) []string {
	t.Helper()
	plots, err := filepath.Glob(filepath.Join(dir, "img", "*.svg"))
	if err != nil {
		t.Fatal(err)
	}
	files := []string{"benchmarks.md"}
	for _, p := range plots {
		files = append(files, filepath.Join("img", filepath.Base(p)))
	}
	return files
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestSoakSectionMatchesGolden renders the soak section from testdata/render/soak.json (a real
// `make soak` run's soak.json without its per-sample series and load details, which the section
// does not show) and compares it with the golden copy: the section docs/benchmarks.md had, with
// the local replies in name order.
func TestSoakSectionMatchesGolden(t *testing.T) {
	b, err := os.ReadFile("testdata/render/soak.json")
	if err != nil {
		t.Fatal(err)
	}
	var r SoakResult
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("testdata/render/soak.md")
	if err != nil {
		t.Fatal(err)
	}
	for range 5 { // map order differs from one range to the next
		got, err := r.markdown()
		if err != nil {
			t.Fatal(err)
		}
		if got != string(want) {
			t.Fatalf("soak section differs from testdata/render/soak.md at byte %d:\n%s", firstDiff([]byte(got), want), got)
		}
	}
}
