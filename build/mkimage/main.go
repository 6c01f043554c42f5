// Command mkimage builds Stormgate's container image from a static sidecar binary, without a Docker
// daemon, a registry or a base image: an OCI archive (a tar of an OCI image layout) holding /sidecar,
// user 1337:1337, entrypoint /sidecar. With --load it also loads the archive into podman's local
// store when podman is installed. `make image` runs it; see docs/kubernetes.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/stormgate/stormgate/build/image"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("mkimage", flag.ContinueOnError)
	binary := fs.String("binary", "bin/sidecar", "static sidecar binary (make build)")
	version := fs.String("version", "", "version stamped in the image's labels and tag (required)")
	name := fs.String("name", "", "image reference; default "+image.Repository+":VERSION")
	out := fs.String("out", "", "archive to write; default bin/stormgate-sidecar-VERSION.oci.tar")
	created := fs.String("created", os.Getenv("SOURCE_DATE_EPOCH"), "image creation time, Unix seconds (default $SOURCE_DATE_EPOCH, else 0): same inputs, same digest")
	load := fs.Bool("load", false, "also load the archive into podman's local store when podman is installed")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: mkimage --binary bin/sidecar --version V [--name REF] [--out FILE] [--load]\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *version == "" {
		return errors.New("--version is required (make image passes the git version)")
	}
	if *name == "" {
		*name = image.Repository + ":" + *version
	}
	if *out == "" {
		*out = filepath.Join("bin", "stormgate-sidecar-"+*version+".oci.tar")
	}
	var when time.Time
	if *created != "" {
		secs, err := strconv.ParseInt(*created, 10, 64)
		if err != nil {
			return fmt.Errorf("--created %q: want Unix seconds", *created)
		}
		when = time.Unix(secs, 0)
	}
	bin, err := os.ReadFile(*binary)
	if err != nil {
		return fmt.Errorf("%w (run make build first)", err)
	}
	arch, err := image.GoArch(bin)
	if err != nil {
		return fmt.Errorf("%s: %w", *binary, err)
	}
	img, err := image.Sidecar(bin, *name, *version, arch, when).Image()
	if err != nil {
		return fmt.Errorf("%s: %w", *binary, err)
	}
	if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
		return err
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	res, err := img.Write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(*out)
		return err
	}
	st, _ := os.Stat(*out)
	fmt.Fprintf(stdout, "wrote %s: %s (%s/%s, %.1f MiB), manifest %s, image id %s\n", *out, *name, "linux", arch,
		float64(st.Size())/(1<<20), res.Manifest.Digest, res.ConfigID)
	if !*load {
		return nil
	}
	if _, err := exec.LookPath("podman"); err != nil {
		fmt.Fprintln(stdout, "podman not installed: not loaded (load it elsewhere with: podman load -i "+*out+")")
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	loaded, err := image.Load(ctx, *out)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, "loaded into podman: "+loaded)
	cmdline, err := smoke(ctx, loaded, stdout)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, "it runs: "+cmdline)
	return nil
}

// lowUlimits are limits within any host's hard limits: enough for `version`, `validate`, `iptables`.
var lowUlimits = []string{"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"}

// smoke runs `IMAGE version` in podman and returns the command line that worked. Where podman's
// default ulimits (nofile 1048576, nproc 4194304) are above the host's hard limits and podman
// cannot raise them (no CAP_SYS_RESOURCE: containers, some CI sandboxes), every container fails
// with "error setting rlimit"; the command is then tried with low limits, and the fix printed.
func smoke(ctx context.Context, ref string, stdout io.Writer) (string, error) {
	try := func(extra ...string) (string, error) {
		args := append(append([]string{"run", "--rm", "--network", "none"}, extra...), ref, "version")
		out, err := exec.CommandContext(ctx, "podman", args...).CombinedOutput()
		line := "podman " + strings.Join(args, " ")
		if err != nil {
			return line, fmt.Errorf("%s: %v: %s", line, err, strings.TrimSpace(string(out)))
		}
		return line, nil
	}
	line, err := try()
	if err == nil {
		return line, nil
	}
	if !strings.Contains(err.Error(), "rlimit") {
		return "", err
	}
	line, err2 := try(lowUlimits...)
	if err2 != nil {
		return "", fmt.Errorf("%w; with low ulimits too: %v", err, err2)
	}
	fmt.Fprintln(stdout, "note: podman's default ulimits are above this host's hard limits, and it cannot raise them: "+
		"every container needs --ulimit flags, or set them once in /etc/containers/containers.conf:\n"+
		"  [containers]\n  default_ulimits = [\"nofile=20000:20000\", \"nproc=1024:1024\"]   # within `ulimit -Hn` and `ulimit -Hu`\n"+
		"(docs/kubernetes.md, \"Images\")")
	return line, nil
}
