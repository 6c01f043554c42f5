package build

import (
	"bufio"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The data plane builds on third_party/netpoll (go.mod replaces github.com/cloudwego/netpoll with it):
// netpoll v0.7.2 plus the patches third_party/netpoll/PATCHES.md lists, each kept as a diff in
// third_party/netpoll/patches. These tests make an upgrade of netpoll, or an edit to the copy, a
// deliberate act: the tree must hash to the last patch level's checksum, and undoing every patch must
// give back the published v0.7.2 byte for byte.

const (
	netpollDir = "../third_party/netpoll"
	// netpollRelease is the checksum the Go checksum database publishes for netpoll v0.7.2's module
	// (go.sum's "github.com/cloudwego/netpoll v0.7.2 h1:" line before the replace).
	netpollRelease = "h1:4qDBGQ6CG2SvEXhZSDxMdtqt/NLDxjAVk0PC/biKiJo="
	netpollModule  = "github.com/cloudwego/netpoll@v0.7.2"
)

// netpollTreeHash is the Go module checksum (golang.org/x/mod/sumdb/dirhash.Hash1, the h1: of go.sum)
// of dir as the module netpollModule, leaving out what Stormgate adds beside the source: PATCHES.md
// and patches/. At patch level 0 it is netpollRelease.
func netpollTreeHash(t *testing.T, dir string) string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		rel = filepath.ToSlash(rel)
		if rel == "patches" || rel == "PATCHES.md" {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Type().IsRegular() {
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(files)
	summary := sha256.New()
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(summary, "%x  %s\n", sha256.Sum256(b), netpollModule+"/"+f)
	}
	return "h1:" + base64.StdEncoding.EncodeToString(summary.Sum(nil))
}

// patchLevel is one row of PATCHES.md's table of levels.
type patchLevel struct {
	name string // "0000" (the release) or the patch's number
	file string // patches/NNNN-*.patch; empty for the release
	hash string // the tree's h1: with this patch and every one before it applied
}

// patchLevels reads the table in PATCHES.md: rows "| NNNN | `patches/NNNN-x.patch` | `h1:...` |".
func patchLevels(t *testing.T) []patchLevel {
	t.Helper()
	f, err := os.Open(filepath.Join(netpollDir, "PATCHES.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	row := regexp.MustCompile("^\\| *([0-9]{4}) *\\| *(?:`(patches/[^`]+)`|release) *\\| *`(h1:[A-Za-z0-9+/=]+)` *\\|")
	var out []patchLevel
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m := row.FindStringSubmatch(sc.Text()); m != nil {
			out = append(out, patchLevel{m[1], m[2], m[3]})
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 || out[0].name != "0000" || out[0].file != "" || out[0].hash != netpollRelease {
		t.Fatalf("PATCHES.md's level table must start with | 0000 | release | `%s` |; got %+v", netpollRelease, out)
	}
	for i, l := range out[1:] {
		if want := fmt.Sprintf("%04d", i+1); l.name != want || l.file == "" {
			t.Fatalf("PATCHES.md level %d is %+v: want patch %s with its file", i+1, l, want)
		}
	}
	return out
}

// TestNetpollCopyIsPatchLevel: third_party/netpoll is exactly the last level PATCHES.md lists. After a
// deliberate change (a new patch, an upgrade), the failure prints the checksum to record; recompute it
// with `go test ./build -run TestNetpollCopyIsPatchLevel`.
func TestNetpollCopyIsPatchLevel(t *testing.T) {
	levels := patchLevels(t)
	last := levels[len(levels)-1]
	if got := netpollTreeHash(t, netpollDir); got != last.hash {
		t.Fatalf("third_party/netpoll hashes to %s, but PATCHES.md's last level (%s) says %s: the copy drifted "+
			"from v0.7.2 plus the listed patches. Record a deliberate change as a patch (PATCHES.md says how).",
			got, last.name, last.hash)
	}
	mod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^replace github\.com/cloudwego/netpoll => \./third_party/netpoll$`).Match(mod) {
		t.Fatal("go.mod does not replace github.com/cloudwego/netpoll with ./third_party/netpoll")
	}
}

// TestNetpollPatchesReplay: undoing the listed patches (newest first) gives back the published v0.7.2,
// and applying them again one by one passes through every level's checksum, so each patch file is
// exactly the change its row says.
func TestNetpollPatchesReplay(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not found: cannot replay the patches (apt-get install git)")
	}
	levels := patchLevels(t)
	dir := filepath.Join(t.TempDir(), "netpoll")
	if err := os.CopyFS(dir, os.DirFS(netpollDir)); err != nil {
		t.Fatal(err)
	}
	apply := func(l patchLevel, args ...string) {
		t.Helper()
		p, err := filepath.Abs(filepath.Join(netpollDir, l.file))
		if err != nil {
			t.Fatal(err)
		}
		// git apply outside a repository works like patch(1), with exact context.
		cmd := exec.Command("git", append(append([]string{"apply"}, args...), p)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_CEILING_DIRECTORIES="+filepath.Dir(dir))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git apply %s %s: %v\n%s", strings.Join(args, " "), l.file, err, out)
		}
	}
	for i := len(levels) - 1; i > 0; i-- {
		apply(levels[i], "-R")
	}
	if got := netpollTreeHash(t, dir); got != netpollRelease {
		t.Fatalf("with every patch undone the tree hashes to %s, not netpoll v0.7.2's %s", got, netpollRelease)
	}
	for _, l := range levels[1:] {
		apply(l)
		if got := netpollTreeHash(t, dir); got != l.hash {
			t.Fatalf("v0.7.2 plus patches up to %s hashes to %s; PATCHES.md says %s", l.name, got, l.hash)
		}
	}
}
