package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMakeImageCommand runs what `make image` runs (without --load) on a small static binary: the
// archive is written where --out says, podman would tag it with --name, the same inputs give the same
// bytes, and --version is required.
func TestMakeImageCommand(t *testing.T) {
	dir := t.TempDir()
	bin := buildSmall(t, dir, "package main\nfunc main() {}\n")
	write := func(out string) []byte {
		t.Helper()
		if err := run([]string{"--binary", bin, "--version", "t1", "--name", "stormgate/sidecar:t1", "--out", out, "--created", "0"}, io.Discard); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	a, b := write(filepath.Join(dir, "a", "img.oci.tar")), write(filepath.Join(dir, "b.oci.tar"))
	if !bytes.Equal(a, b) {
		t.Error("two runs on the same inputs wrote different archives")
	}
	tr := tar.NewReader(bytes.NewReader(a))
	var index struct {
		Manifests []struct{ Annotations map[string]string }
	}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			t.Fatal("no index.json in the archive")
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == "index.json" {
			if err := json.NewDecoder(tr).Decode(&index); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	if len(index.Manifests) != 1 || index.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "stormgate/sidecar:t1" {
		t.Errorf("index.json manifests %+v, want one named stormgate/sidecar:t1", index.Manifests)
	}
	if err := run([]string{"--binary", bin}, io.Discard); err == nil || !strings.Contains(err.Error(), "--version") {
		t.Errorf("without --version: %v", err)
	}
}

// TestMakeImageLoadRuns: with --load, make image checks that the loaded image starts in podman and
// prints the command line that did (issue 24: the one it printed failed on hosts where podman's
// default ulimits are above the hard limits; then low ones are used and the fix is printed).
func TestMakeImageLoadRuns(t *testing.T) {
	if _, err := exec.LookPath("podman"); err != nil || os.Geteuid() != 0 {
		t.Skip("skipped: needs root and podman")
	}
	dir := t.TempDir()
	bin := buildSmall(t, dir, "package main\nimport \"fmt\"\nfunc main() { fmt.Println(\"stormgate t2\") }\n")
	name := "stormgate-mkimage-test/sidecar:t2"
	t.Cleanup(func() { _ = exec.Command("podman", "rmi", "--force", "localhost/"+name).Run() })
	var out strings.Builder
	if err := run([]string{"--binary", bin, "--version", "t2", "--name", name, "--out", filepath.Join(dir, "img.oci.tar"), "--load"}, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	line := ""
	for l := range strings.Lines(out.String()) {
		if rest, ok := strings.CutPrefix(l, "it runs: "); ok {
			line = strings.TrimSpace(rest)
		}
	}
	if !strings.HasPrefix(line, "podman run --rm ") || !strings.HasSuffix(line, "localhost/"+name+" version") {
		t.Fatalf("no working command printed:\n%s", out.String())
	}
	// The printed command works as printed.
	got, err := exec.Command("sh", "-c", line).CombinedOutput()
	if err != nil || strings.TrimSpace(string(got)) != "stormgate t2" {
		t.Fatalf("%s: %v %s", line, err, got)
	}
	t.Logf("%s", out.String())
}

// buildSmall builds a one-file program statically into dir and returns the binary's path.
func buildSmall(t *testing.T, dir, source string) string {
	t.Helper()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte(source), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "static")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, src)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GO111MODULE=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}
