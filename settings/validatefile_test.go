package settings

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Three independent mistakes in one file are all reported by one run: a
// misspelt field, a value of the wrong type and a value out of range (issue
// 16, acceptance 4). Before, the typo hid the other two.
func TestValidateFileReportsEveryProblemInOnePass(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stormgate.yaml")
	file := `admission:
  accept_rate: fast
upstream:
  connections: 0
hold:
  timout: 5s
`
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	err := ValidateFile(path)
	var ps Problems
	if !errors.As(err, &ps) {
		t.Fatalf("want Problems, got %v", err)
	}
	want := []string{
		`admission.accept_rate: "fast" is not a number (line 2)`,
		`upstream.connections: 0 is too small; must be between 1 and 64 (line 4)`,
		`hold.timout: unknown field; did you mean timeout? (line 6)`,
	}
	var got []string
	for _, p := range ps {
		got = append(got, p.Error())
	}
	if !slices.Equal(got, want) {
		t.Fatalf("problems:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

func TestValidateFileCapsProblems(t *testing.T) {
	var b strings.Builder
	b.WriteString("hold:\n")
	for i := range 200 {
		fmt.Fprintf(&b, "  bogus_%d: 1\n", i)
	}
	err := ValidateSettingsYAML([]byte(b.String()))
	var ps Problems
	if !errors.As(err, &ps) || len(ps) != MaxFileProblems {
		t.Fatalf("want %d problems, got %d: %v", MaxFileProblems, len(ps), err)
	}
	if last := ps[len(ps)-1].Message; last != "151 more problems not shown; fix these first" {
		t.Fatalf("last problem %q", last)
	}
}

// sidecar run --config names the file in every problem, with the line, and
// only for fields whose value comes from the file.
func TestReadSettingsFileNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	typo := filepath.Join(dir, "typo.yaml")
	if err := os.WriteFile(typo, []byte("hold:\n  timout: 5s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := ReadSettingsFile(typo)
	if err == nil || err.Error() != "hold.timout: unknown field; did you mean timeout? ("+typo+" line 2)" {
		t.Fatalf("typo: %v", err)
	}
	if _, err := ReadSettingsFile(filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Fatalf("missing file: %v", err)
	}

	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, []byte("upstream:\n  connections: 100\nhold:\n  timeout: 2h\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := ReadSettingsFile(big)
	if err != nil {
		t.Fatal(err)
	}
	l := MergeLayers(big, Layer{SourceDefaults, Defaults()}, Layer{SourceFile, f.Settings})
	l.Sources["upstream.connections"] = SourceFlag // as if --upstream-conns overrode it (with a bad value)
	err = f.Annotate(Validate(l.Settings), l.Sources)
	var ps Problems
	if !errors.As(err, &ps) || len(ps) != 2 {
		t.Fatalf("want 2 problems, got %v", err)
	}
	if ps[0].File != "" || ps[1].File != big || ps[1].Line != 4 {
		t.Fatalf("problems %+v: only the file's own field names the file", ps)
	}
}

func TestYAMLFiles(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"b.yml", "a.yaml", ".hidden.yaml", "notes.txt"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "sub.yaml"), 0o700); err != nil {
		t.Fatal(err)
	}
	got, err := YAMLFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yml")}; !slices.Equal(got, want) {
		t.Fatalf("files %v, want %v", got, want)
	}
}
