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
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte("package main\nfunc main() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "static")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, src)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GO111MODULE=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	write := func(out string) []byte {
		t.Helper()
		if err := run([]string{"--binary", bin, "--version", "t1", "--name", "stormgate/sidecar:t1", "--out", out, "--created", "0"}); err != nil {
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
	if err := run([]string{"--binary", bin}); err == nil || !strings.Contains(err.Error(), "--version") {
		t.Errorf("without --version: %v", err)
	}
}
