package main

import (
	"bytes"
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
	if *updateGolden {
		return
	}
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
