package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// elfLike is enough of an executable for receiveBinary: the ELF magic and unique bytes.
func elfLike(tag string) []byte { return append([]byte("\x7fELF\x02\x01\x01"), []byte(tag)...) }

// Issue 24: `sidecar upgrade --binary -` takes the new binary on standard input (kubectl exec -i:
// the image has no shell or tar for kubectl cp), writes it whole into the upgrade volume, checks it,
// and hands the sidecar that path; anything wrong changes nothing.
func TestUpgradeBinaryFromStdin(t *testing.T) {
	dir := t.TempDir()
	bin := elfLike("v2")
	sum := sha256.Sum256(bin)
	hexSum := hex.EncodeToString(sum[:])

	var gotBinary string
	posted := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPost:
			posted, gotBinary = true, r.URL.Query().Get("binary")
			w.WriteHeader(http.StatusAccepted)
			_ = json.NewEncoder(w).Encode(upgradeOutcome{ID: "u1", From: "v1", To: "v2", Binary: gotBinary})
		case !posted:
			_ = json.NewEncoder(w).Encode(upgradeStatus{Version: "v1", PID: 100})
		default:
			_ = json.NewEncoder(w).Encode(upgradeStatus{Version: "v2", PID: 100, Last: &upgradeOutcome{ID: "u1", Result: resultSuccess, From: "v1"}})
		}
	}))
	defer srv.Close()
	admin := strings.TrimPrefix(srv.URL, "http://")

	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetIn(bytes.NewReader(bin))
	root.SetArgs([]string{"upgrade", "--binary", "-", "--into", dir, "--sha256", strings.ToUpper(hexSum), "--admin", admin})
	if err := root.Execute(); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	path := filepath.Join(dir, "sidecar")
	if gotBinary != path || !strings.Contains(out.String(), "received 9 bytes (sha256 "+hexSum+") into "+path) ||
		!strings.Contains(out.String(), "upgraded: v1 -> v2") {
		t.Errorf("sidecar asked to upgrade to %q; output:\n%s", gotBinary, out.String())
	}
	if b, err := os.ReadFile(path); err != nil || !bytes.Equal(b, bin) {
		t.Errorf("%s: %q %v", path, b, err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("%s mode %v %v", path, st.Mode(), err)
	}

	// Each failure names its cause and leaves the binary in place and no temporary file.
	for _, tc := range []struct {
		in       []byte
		into     string
		sum, err string
	}{
		{nil, dir, "", "nothing on standard input: pipe the binary in (kubectl exec -i, not -t"},
		{[]byte("#!/bin/sh\necho hi\n"), dir, "", `is not a Linux executable`},
		{elfLike("v3")[:8], dir, hexSum, "the 8 bytes received have sha256"},
		{elfLike("v3"), filepath.Join(dir, "missing"), "", "not a directory"},
	} {
		_, _, _, err := receiveBinary(bytes.NewReader(tc.in), tc.into, tc.sum)
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%q into %s: %v, want %q", tc.in, tc.into, err, tc.err)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("left behind: %v", entries)
	}
	if b, _ := os.ReadFile(path); !bytes.Equal(b, bin) {
		t.Errorf("a failed upload changed %s", path)
	}
	if _, _, err := execute(t, "upgrade", "--binary", "/x", "--sha256", hexSum, "--admin", admin); err == nil || !strings.Contains(err.Error(), "use it with --binary -") {
		t.Errorf("--sha256 without --binary -: %v", err)
	}
}
