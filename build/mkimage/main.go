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
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/stormgate/stormgate/build/image"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
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
	fmt.Printf("wrote %s: %s (%s/%s, %.1f MiB), manifest %s, image id %s\n", *out, *name, "linux", arch,
		float64(st.Size())/(1<<20), res.Manifest.Digest, res.ConfigID)
	if !*load {
		return nil
	}
	if _, err := exec.LookPath("podman"); err != nil {
		fmt.Println("podman not installed: not loaded (load it elsewhere with: podman load -i " + *out + ")")
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	loaded, err := image.Load(ctx, *out)
	if err != nil {
		return err
	}
	fmt.Printf("loaded into podman: %s (podman run --rm %s version)\n", loaded, loaded)
	return nil
}
