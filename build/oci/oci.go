// Package oci writes single-layer container images as OCI image-layout archives (what `podman load`,
// `skopeo copy oci-archive:...` and `buildah pull oci-archive:...` read), from files on disk, with the
// standard library only: no Docker daemon, no registry, no base image. Stormgate's image is one static
// binary and a non-root user, which is all a scratch image needs.
//
// Archives are reproducible: every timestamp is Image.Created, every file belongs to root:root, tar
// entries come in a fixed order and gzip writes no name or time, so the same inputs give the same
// digests on any machine (what lets an operator check that an image was built from a given commit).
//
// Concurrency: Image is a plain value; Write may run concurrently on different writers.
package oci

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"time"
)

// Media types from the OCI image spec (v1.1).
const (
	MediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	MediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	MediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	MediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"

	// AnnotationRefName names the image in index.json; podman load tags the image with it.
	AnnotationRefName = "org.opencontainers.image.ref.name"
)

// File is one regular file in the image.
type File struct {
	Path    string // absolute path in the image, e.g. "/sidecar"
	Mode    int64  // permission bits, e.g. 0o755
	Content []byte
}

// Config is the runtime part of the image configuration (the OCI "config" object).
type Config struct {
	User         string              `json:"User,omitempty"`
	Entrypoint   []string            `json:"Entrypoint,omitempty"`
	Cmd          []string            `json:"Cmd,omitempty"`
	Env          []string            `json:"Env,omitempty"`
	ExposedPorts map[string]struct{} `json:"ExposedPorts,omitempty"`
	Labels       map[string]string   `json:"Labels,omitempty"`
	WorkingDir   string              `json:"WorkingDir,omitempty"`
}

// Image is a single-layer image built from nothing ("FROM scratch").
type Image struct {
	// Name is the reference podman tags the loaded image with, e.g. "localhost/stormgate/sidecar:1.0".
	Name string
	// OS and Architecture in Go's spelling (linux, amd64, arm64).
	OS, Architecture string
	Config           Config
	Files            []File
	// Created stamps the configuration, the history and every file; the zero time means the Unix epoch.
	Created time.Time
	// CreatedBy describes how the layer was made (the image history shows it).
	CreatedBy string
}

// Descriptor points at a blob.
type Descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *Platform         `json:"platform,omitempty"`
}

// Platform is the os/architecture of a manifest in an index.
type Platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

// Manifest is an OCI image manifest.
type Manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        Descriptor   `json:"config"`
	Layers        []Descriptor `json:"layers"`
}

// Index is an OCI image index (index.json).
type Index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []Descriptor `json:"manifests"`
}

// ImageConfig is the OCI image configuration blob.
type ImageConfig struct {
	Created      time.Time `json:"created"`
	Architecture string    `json:"architecture"`
	OS           string    `json:"os"`
	Config       Config    `json:"config"`
	RootFS       struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
	History []History `json:"history,omitempty"`
}

// History is one entry of an image's history.
type History struct {
	Created   time.Time `json:"created"`
	CreatedBy string    `json:"created_by,omitempty"`
}

// Result says what Write wrote.
type Result struct {
	Manifest Descriptor // the manifest's digest is the image's identity in registries
	ConfigID string     // the config's digest: what `podman images --no-trunc` shows as the image ID
}

func (im Image) validate() error {
	var errs []error
	if im.Name == "" {
		errs = append(errs, errors.New("image name is empty"))
	}
	if im.OS == "" || im.Architecture == "" {
		errs = append(errs, errors.New("image OS and architecture must be set"))
	}
	if len(im.Files) == 0 {
		errs = append(errs, errors.New("image has no files"))
	}
	seen := map[string]bool{}
	for _, f := range im.Files {
		clean := path.Clean(f.Path)
		if !path.IsAbs(f.Path) || clean != f.Path || clean == "/" {
			errs = append(errs, fmt.Errorf("file path %q: must be absolute and clean, e.g. /sidecar", f.Path))
		}
		if seen[clean] {
			errs = append(errs, fmt.Errorf("file path %q appears twice", f.Path))
		}
		seen[clean] = true
		if f.Mode&^0o7777 != 0 {
			errs = append(errs, fmt.Errorf("file %s: mode %o has more than permission bits", f.Path, f.Mode))
		}
	}
	return errors.Join(errs...)
}

// Layer returns the image's one layer, uncompressed (a tar stream): parent directories first, then the
// files, sorted by path.
func (im Image) Layer() ([]byte, error) {
	if err := im.validate(); err != nil {
		return nil, err
	}
	mtime := im.created()
	files := slices.Clone(im.Files)
	slices.SortFunc(files, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for _, f := range files {
		rel := strings.TrimPrefix(f.Path, "/")
		// Parent directories, so the layer unpacks the same under any tool.
		parts := strings.Split(rel, "/")
		for i := 1; i < len(parts); i++ {
			d := strings.Join(parts[:i], "/") + "/"
			if dirs[d] {
				continue
			}
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: mtime, Format: tar.FormatPAX}); err != nil {
				return nil, err
			}
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: rel, Mode: f.Mode, Size: int64(len(f.Content)), ModTime: mtime, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.Content); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func (im Image) created() time.Time {
	if im.Created.IsZero() {
		return time.Unix(0, 0).UTC()
	}
	return im.Created.UTC()
}

// Write writes the image as an OCI image-layout tar archive to w.
func (im Image) Write(w io.Writer) (Result, error) {
	layer, err := im.Layer()
	if err != nil {
		return Result{}, err
	}
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	if err != nil {
		return Result{}, err
	}
	if _, err := zw.Write(layer); err != nil {
		return Result{}, err
	}
	if err := zw.Close(); err != nil {
		return Result{}, err
	}

	cfg := ImageConfig{Created: im.created(), Architecture: im.Architecture, OS: im.OS, Config: im.Config}
	cfg.RootFS.Type = "layers"
	cfg.RootFS.DiffIDs = []string{digest(layer)}
	cfg.History = []History{{Created: im.created(), CreatedBy: im.CreatedBy}}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return Result{}, err
	}
	man := Manifest{
		SchemaVersion: 2, MediaType: MediaTypeManifest,
		Config: descriptor(MediaTypeConfig, cfgJSON),
		Layers: []Descriptor{descriptor(MediaTypeLayer, gz.Bytes())},
	}
	manJSON, err := json.Marshal(man)
	if err != nil {
		return Result{}, err
	}
	manDesc := descriptor(MediaTypeManifest, manJSON)
	manDesc.Annotations = map[string]string{AnnotationRefName: im.Name}
	manDesc.Platform = &Platform{Architecture: im.Architecture, OS: im.OS}
	idxJSON, err := json.Marshal(Index{SchemaVersion: 2, MediaType: MediaTypeIndex, Manifests: []Descriptor{manDesc}})
	if err != nil {
		return Result{}, err
	}

	tw := tar.NewWriter(w)
	mtime := im.created()
	entry := func(name string, b []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(b)), ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(b)
		return err
	}
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return Result{}, err
		}
	}
	for _, e := range []struct {
		name string
		b    []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", idxJSON},
		{blobPath(man.Config.Digest), cfgJSON},
		{blobPath(man.Layers[0].Digest), gz.Bytes()},
		{blobPath(manDesc.Digest), manJSON},
	} {
		if err := entry(e.name, e.b); err != nil {
			return Result{}, err
		}
	}
	if err := tw.Close(); err != nil {
		return Result{}, err
	}
	return Result{Manifest: manDesc, ConfigID: man.Config.Digest}, nil
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func descriptor(mediaType string, b []byte) Descriptor {
	return Descriptor{MediaType: mediaType, Digest: digest(b), Size: int64(len(b))}
}

func blobPath(d string) string { return "blobs/sha256/" + strings.TrimPrefix(d, "sha256:") }
