// Package image defines Stormgate's container image (one static binary on an empty base, user 1337)
// and builds it as an OCI archive with build/oci, and loads archives into podman. `make image` runs
// it through build/mkimage; the Dockerfile describes the same image for Docker users, and
// build/dockerfile_test.go keeps the two in step.
//
// Concurrency: everything here is a pure function of its arguments except Load, which runs podman.
package image

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/stormgate/stormgate/build/oci"
)

// The sidecar image's contents. The Dockerfile's final stage must say the same (a test checks).
const (
	// BinaryPath is where the sidecar binary sits in the image, and the entrypoint.
	BinaryPath = "/sidecar"
	// User is the image's default user and group: non-root, the UID `sidecar inject` runs Stormgate as.
	User = "1337:1337"
	// Repository is the default image name without a tag (`sidecar inject --image` default).
	Repository = "stormgate/sidecar"
)

// ExposedPorts are the sidecar's default ports: the transparent listener and the metrics listener.
var ExposedPorts = []string{"15006/tcp", "15090/tcp"}

// What `docker build` (BuildKit) puts in the configuration of every image built FROM scratch without
// being asked (dockerfile2llb's emptyImage): a working directory and the default PATH. The images
// carry them too, so that the Dockerfile's images and these have the same configuration, not only the
// same files. Nothing here reads them (the entrypoint is an absolute path and there is no shell).
const (
	WorkingDir = "/"
	DefaultEnv = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// Labels returns the OCI labels stamped on the image.
func Labels(version string) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       "stormgate",
		"org.opencontainers.image.description": "Stormgate: a transparent sidecar proxy for Apache Dubbo 2 providers",
		"org.opencontainers.image.version":     version,
	}
}

// Spec is what an image built from one static binary holds.
type Spec struct {
	Name       string   // reference, e.g. "stormgate/sidecar:1.0"
	Binary     []byte   // the static executable
	BinaryPath string   // where it goes, e.g. "/sidecar"
	Entrypoint []string // empty means {BinaryPath}
	User       string   // "uid:gid"
	Ports      []string // "15090/tcp"
	Labels     map[string]string
	Arch       string    // Go architecture: amd64, arm64
	Created    time.Time // zero means the Unix epoch (reproducible)
}

// Sidecar returns the spec of Stormgate's image for a static sidecar binary built for arch.
func Sidecar(binary []byte, name, version, arch string, created time.Time) Spec {
	return Spec{
		Name: name, Binary: binary, BinaryPath: BinaryPath, User: User, Ports: ExposedPorts,
		Labels: Labels(version), Arch: arch, Created: created,
	}
}

// Image checks that the binary is a static executable (a dynamically linked one would fail in an
// empty image with a baffling "no such file or directory") and returns the OCI image.
func (s Spec) Image() (oci.Image, error) {
	if err := CheckStatic(s.Binary); err != nil {
		return oci.Image{}, fmt.Errorf("%s: %w", s.BinaryPath, err)
	}
	entry := s.Entrypoint
	if len(entry) == 0 {
		entry = []string{s.BinaryPath}
	}
	ports := map[string]struct{}{}
	for _, p := range s.Ports {
		ports[p] = struct{}{}
	}
	return oci.Image{
		Name: s.Name, OS: "linux", Architecture: s.Arch, Created: s.Created,
		Config: oci.Config{User: s.User, Entrypoint: entry, ExposedPorts: ports, Labels: s.Labels,
			Env: []string{DefaultEnv}, WorkingDir: WorkingDir},
		Files: []oci.File{{Path: s.BinaryPath, Mode: 0o755, Content: s.Binary}},
		CreatedBy: fmt.Sprintf("stormgate build/image: COPY %s (static, %d bytes); USER %s; ENTRYPOINT %q",
			s.BinaryPath, len(s.Binary), s.User, entry),
	}, nil
}

// CheckStatic reports why b is not a statically linked ELF executable (nil when it is).
func CheckStatic(b []byte) error {
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("not an ELF executable: %w", err)
	}
	defer f.Close()
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return fmt.Errorf("ELF type %v is not an executable", f.Type)
	}
	for _, p := range f.Progs {
		switch p.Type {
		case elf.PT_INTERP:
			return errors.New("dynamically linked (has an ELF interpreter): build with CGO_ENABLED=0, as `make build` does")
		case elf.PT_DYNAMIC:
			return errors.New("has a dynamic section: build with CGO_ENABLED=0, as `make build` does")
		}
	}
	return nil
}

// GoArch maps an ELF machine to Go's architecture name (what the image's platform must say).
func GoArch(b []byte) (string, error) {
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return "", fmt.Errorf("not an ELF executable: %w", err)
	}
	defer f.Close()
	switch f.Machine {
	case elf.EM_X86_64:
		return "amd64", nil
	case elf.EM_AARCH64:
		return "arm64", nil
	case elf.EM_386:
		return "386", nil
	case elf.EM_ARM:
		return "arm", nil
	case elf.EM_PPC64:
		return "ppc64le", nil
	case elf.EM_S390:
		return "s390x", nil
	case elf.EM_RISCV:
		return "riscv64", nil
	}
	return "", fmt.Errorf("ELF machine %v: no Go architecture known for it", f.Machine)
}

// Load loads an OCI archive into podman's image store (podman load) and returns the image ID podman
// reports. Extra environment (e.g. CONTAINERS_CONF=...) is passed to podman.
func Load(ctx context.Context, archive string, env ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "podman", "load", "--quiet", "--input", archive)
	cmd.Env = append(cmd.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("podman load --input %s: %w: %s", archive, err, strings.TrimSpace(stderr.String()))
	}
	// "Loaded image: localhost/stormgate/sidecar:1.0" (or "Loaded image(s): ...").
	out := strings.TrimSpace(stdout.String())
	if _, name, ok := strings.Cut(out, ": "); ok {
		return strings.TrimSpace(name), nil
	}
	return out, nil
}
