package oci

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"
)

func testImage() Image {
	return Image{
		Name: "localhost/stormgate/sidecar:test", OS: "linux", Architecture: "amd64",
		Created:   time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		CreatedBy: "test",
		Config: Config{User: "1337:1337", Entrypoint: []string{"/sidecar"},
			ExposedPorts: map[string]struct{}{"15090/tcp": {}}, Labels: map[string]string{"a": "b"}},
		Files: []File{{Path: "/sidecar", Mode: 0o755, Content: []byte("\x7fELF not really")}, {Path: "/etc/x/y", Mode: 0o644, Content: []byte("y")}},
	}
}

func untar(t *testing.T, r io.Reader) (map[string][]byte, []*tar.Header) {
	t.Helper()
	files := map[string][]byte{}
	var hdrs []*tar.Header
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files, hdrs
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name], hdrs = b, append(hdrs, h)
	}
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

func blob(t *testing.T, files map[string][]byte, d Descriptor) []byte {
	t.Helper()
	b, ok := files["blobs/sha256/"+strings.TrimPrefix(d.Digest, "sha256:")]
	if !ok {
		t.Fatalf("blob %s missing", d.Digest)
	}
	if sha(b) != d.Digest || int64(len(b)) != d.Size {
		t.Fatalf("blob %s: digest %s size %d, descriptor says size %d", d.Digest, sha(b), len(b), d.Size)
	}
	return b
}

// TestArchiveIsAValidImageLayout follows the archive as a reader would (index -> manifest -> config
// and layer), checking every digest and size, and the layer's contents and ownership.
func TestArchiveIsAValidImageLayout(t *testing.T) {
	var buf bytes.Buffer
	res, err := testImage().Write(&buf)
	if err != nil {
		t.Fatal(err)
	}
	files, _ := untar(t, &buf)
	if string(files["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Fatalf("oci-layout %q", files["oci-layout"])
	}
	var idx Index
	if err := json.Unmarshal(files["index.json"], &idx); err != nil || len(idx.Manifests) != 1 || idx.MediaType != MediaTypeIndex {
		t.Fatalf("index.json %s: %v", files["index.json"], err)
	}
	md := idx.Manifests[0]
	if md.Annotations[AnnotationRefName] != "localhost/stormgate/sidecar:test" || md.Digest != res.Manifest.Digest {
		t.Fatalf("index entry %+v", md)
	}
	var man Manifest
	if err := json.Unmarshal(blob(t, files, md), &man); err != nil || len(man.Layers) != 1 || man.Config.Digest != res.ConfigID {
		t.Fatalf("manifest %+v: %v", man, err)
	}
	var cfg ImageConfig
	if err := json.Unmarshal(blob(t, files, man.Config), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Config.User != "1337:1337" || cfg.Config.Entrypoint[0] != "/sidecar" || cfg.OS != "linux" || cfg.Architecture != "amd64" ||
		!cfg.Created.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Errorf("config %+v", cfg)
	}
	zr, err := gzip.NewReader(bytes.NewReader(blob(t, files, man.Layers[0])))
	if err != nil {
		t.Fatal(err)
	}
	layer, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.RootFS.DiffIDs) != 1 || cfg.RootFS.DiffIDs[0] != sha(layer) {
		t.Errorf("diff_ids %v, uncompressed layer %s", cfg.RootFS.DiffIDs, sha(layer))
	}
	lf, hdrs := untar(t, bytes.NewReader(layer))
	var names []string
	for _, h := range hdrs {
		names = append(names, h.Name)
		if h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(cfg.Created) {
			t.Errorf("%s: uid %d gid %d mtime %v", h.Name, h.Uid, h.Gid, h.ModTime)
		}
	}
	if got := strings.Join(names, " "); got != "etc/ etc/x/ etc/x/y sidecar" {
		t.Errorf("layer entries %q", got)
	}
	if string(lf["sidecar"]) != "\x7fELF not really" || hdrs[3].Mode != 0o755 {
		t.Errorf("sidecar entry: %q mode %o", lf["sidecar"], hdrs[3].Mode)
	}
}

func TestArchiveIsReproducible(t *testing.T) {
	var a, b bytes.Buffer
	if _, err := testImage().Write(&a); err != nil {
		t.Fatal(err)
	}
	im := testImage()
	im.Files[0], im.Files[1] = im.Files[1], im.Files[0] // order of the input does not matter
	if _, err := im.Write(&b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("the same image written twice differs")
	}
}

func TestImageValidation(t *testing.T) {
	for _, tc := range []struct {
		mod  func(*Image)
		want string
	}{
		{func(im *Image) { im.Name = "" }, "name is empty"},
		{func(im *Image) { im.Files = nil }, "no files"},
		{func(im *Image) { im.Files[0].Path = "sidecar" }, "absolute and clean"},
		{func(im *Image) { im.Files[0].Path = "/a/../sidecar" }, "absolute and clean"},
		{func(im *Image) { im.Files[1].Path = "/sidecar" }, "appears twice"},
		{func(im *Image) { im.Files[0].Mode = 0o4755 | 1<<20 }, "permission bits"},
		{func(im *Image) { im.Architecture = "" }, "architecture"},
	} {
		im := testImage()
		tc.mod(&im)
		if _, err := im.Write(io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("err %v, want %q", err, tc.want)
		}
	}
}
