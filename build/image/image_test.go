package image

import (
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestRefusesDynamicBinaries: a dynamically linked binary in an empty image fails at start with "no
// such file or directory" (its ELF interpreter is missing); the image builder refuses it up front.
func TestRefusesDynamicBinaries(t *testing.T) {
	for _, p := range []string{"/bin/ls", "/usr/bin/env"} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if err := CheckStatic(b); err == nil || !strings.Contains(err.Error(), "CGO_ENABLED=0") {
			t.Errorf("%s: CheckStatic = %v, want a dynamically-linked error naming the fix", p, err)
		}
		if _, err := Sidecar(b, "x:1", "1", "amd64", time.Time{}).Image(); err == nil {
			t.Errorf("%s: an image was built from a dynamic binary", p)
		}
		return
	}
	t.Skip("no dynamically linked system binary found")
}

func TestNotAnExecutable(t *testing.T) {
	if err := CheckStatic([]byte("#!/bin/sh\necho hi\n")); err == nil || !strings.Contains(err.Error(), "not an ELF") {
		t.Fatalf("script: %v", err)
	}
	if _, err := GoArch([]byte("nope")); err == nil {
		t.Fatal("GoArch of garbage")
	}
}

// TestSpecOfTheTestBinary: this test binary is an ELF for this machine; the spec of the sidecar image
// puts it at /sidecar with user 1337:1337 and the version label.
func TestSpecOfTheTestBinary(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	arch, err := GoArch(b)
	if err != nil || arch != runtime.GOARCH {
		t.Fatalf("GoArch = %q, %v; want %s", arch, err, runtime.GOARCH)
	}
	s := Sidecar(b, "stormgate/sidecar:9", "9", arch, time.Time{})
	if s.BinaryPath != "/sidecar" || s.User != "1337:1337" || s.Labels["org.opencontainers.image.version"] != "9" {
		t.Fatalf("spec %+v", s)
	}
}
