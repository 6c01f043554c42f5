package build

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stormgate/stormgate/build/image"
	"github.com/stormgate/stormgate/inject"
)

// releaseVersion is the VERSION file: the semantic version of the last release.
func releaseVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	v := strings.TrimSpace(string(b))
	if !regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`).MatchString(v) {
		t.Fatalf("VERSION holds %q, not a semantic version", v)
	}
	return v
}

// gitRepo is a scratch repository holding build/version.sh and a VERSION file.
type gitRepo struct {
	t   *testing.T
	dir string
}

func newGitRepo(t *testing.T) gitRepo {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	r := gitRepo{t, t.TempDir()}
	script, err := os.ReadFile("version.sh")
	if err != nil {
		t.Fatal(err)
	}
	r.write("build/version.sh", string(script))
	if err := os.Chmod(filepath.Join(r.dir, "build", "version.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	r.git("init", "-q")
	return r
}

func (r gitRepo) write(name, content string) {
	r.t.Helper()
	p := filepath.Join(r.dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		r.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		r.t.Fatal(err)
	}
}

func (r gitRepo) git(args ...string) string {
	r.t.Helper()
	return r.run(r.dir, "git", args...)
}

func (r gitRepo) run(dir, name string, args ...string) string {
	r.t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		r.t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func (r gitRepo) commit(msg string) string {
	r.t.Helper()
	r.git("add", "-A")
	r.git("commit", "-q", "-m", msg)
	return r.git("rev-parse", "--short=7", "HEAD")
}

func (r gitRepo) version(dir string) string {
	r.t.Helper()
	return r.run(dir, filepath.Join(dir, "build", "version.sh"))
}

// TestVersionScript: the version every build and image carries is the VERSION file's at the commit
// that set it, git describe's X.Y.Z-N-gHASH after it, with or without the vX.Y.Z tag (CI's clone
// may have none), and never a release version for a tree with uncommitted changes or a shallow
// clone that cannot count.
func TestVersionScript(t *testing.T) {
	r := newGitRepo(t)
	r.write("VERSION", "0.3.0\n")
	r.write("a.go", "package a\n")
	r.commit("release 0.3.0")
	if v := r.version(r.dir); v != "0.3.0" {
		t.Errorf("at the release commit, no tag: %q", v)
	}
	r.write("a.go", "package a // edited\n")
	if v := r.version(r.dir); v != "0.3.0-dirty" {
		t.Errorf("release commit with an uncommitted change: %q", v)
	}
	h1 := r.commit("one")
	r.write("b.go", "package a\n")
	h2 := r.commit("two")
	if v := r.version(r.dir); v != "0.3.0-2-g"+h2 {
		t.Errorf("two commits after the release, no tag: %q, want 0.3.0-2-g%s", v, h2)
	}
	r.git("tag", "v0.3.0", "HEAD~2")
	if v := r.version(r.dir); v != "0.3.0-2-g"+h2 {
		t.Errorf("two commits after the release, tagged: %q (git describe), want the same as untagged", v)
	}
	r.git("checkout", "-q", "v0.3.0")
	if v := r.version(r.dir); v != "0.3.0" {
		t.Errorf("at the tag: %q", v)
	}
	r.git("checkout", "-q", "-")

	// A shallow clone of one commit cannot count: it says so rather than claim a release.
	clone := filepath.Join(t.TempDir(), "shallow")
	r.run(r.dir, "git", "clone", "-q", "--no-local", "--depth", "1", "file://"+r.dir, clone)
	if v := r.version(clone); v != "0.3.0-g"+h2 {
		t.Errorf("shallow clone: %q, want 0.3.0-g%s", v, h2)
	}
	// A full clone without tags says what the tagged repository says.
	full := filepath.Join(t.TempDir(), "full")
	r.run(r.dir, "git", "clone", "-q", "--no-tags", "file://"+r.dir, full)
	if v := r.version(full); v != "0.3.0-2-g"+h2 {
		t.Errorf("clone without tags: %q", v)
	}
	_ = h1

	// The next release.
	r.write("VERSION", "0.4.0\n")
	r.commit("release 0.4.0")
	if v := r.version(r.dir); v != "0.4.0" {
		t.Errorf("at the next release commit: %q", v)
	}
	r.write("VERSION", "0.4\n")
	cmd := exec.Command(filepath.Join(r.dir, "build", "version.sh"))
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "not a semantic version") {
		t.Errorf("VERSION 0.4: %v %s", err, out)
	}
}

// imageRef finds references to Stormgate's images with a tag.
var imageRef = regexp.MustCompile(`\bstormgate/(sidecar|control):([0-9][0-9A-Za-z.+-]*[0-9A-Za-z])`)

// TestImagesAreTheRelease: what `make image` builds, `sidecar inject` writes and the deploy/
// manifests and docs pull are one name: stormgate/sidecar and stormgate/control tagged with the
// version (at a release, the VERSION file's), so the manifests as shipped pull the release's images.
func TestImagesAreTheRelease(t *testing.T) {
	v := releaseVersion(t)
	if image.Repository != inject.DefaultRepository || inject.DefaultImage(v) != image.Repository+":"+v {
		t.Errorf("image.Repository %q, inject.DefaultImage %q", image.Repository, inject.DefaultImage(v))
	}
	// make image and make release tag exactly $(IMAGE):$(VERSION) and $(CONTROL_IMAGE):$(VERSION).
	if _, err := exec.LookPath("make"); err == nil {
		for _, target := range []string{"image", "release"} {
			cmd := exec.Command("make", "-n", target, "VERSION=9.8.7")
			cmd.Dir = ".."
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("make -n %s: %v\n%s", target, err, out)
			}
			for _, want := range []string{"--name " + image.Repository + ":9.8.7", "--name stormgate/control:9.8.7", "main.version=9.8.7"} {
				if !strings.Contains(string(out), want) {
					t.Errorf("make %s does not run %q:\n%s", target, want, out)
				}
			}
		}
	}
	// The Helm chart, which deploy/ is rendered from (k8s/cmd/render-deploy), ships this release.
	chart, err := os.ReadFile("../charts/stormgate/Chart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"\nversion: " + v + "\n", "\nappVersion: \"" + v + "\"\n"} {
		if !strings.Contains(string(chart), want) {
			t.Errorf("charts/stormgate/Chart.yaml lacks %q: the chart ships the release in VERSION (%s); "+
				"change both, then make deploy-manifests", strings.TrimSpace(want), v)
		}
	}
	var files []string
	for _, glob := range []string{"deploy/*.yaml", "deploy/*/*.yaml", "docs/*.md", "README.md", "Dockerfile"} {
		m, _ := filepath.Glob(filepath.Join("..", glob))
		files = append(files, m...)
	}
	refs := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range imageRef.FindAllStringSubmatch(line, -1) {
				refs++
				if m[2] != v {
					t.Errorf("%s:%d: %s, but this release is %s (VERSION): what make image builds is stormgate/%s:%s", f, i+1, m[0], v, m[1], v)
				}
			}
		}
	}
	if refs < 4 {
		t.Errorf("found %d tagged Stormgate image references in deploy/ and docs: the pattern is wrong", refs)
	}
}

// TestChangelog: CHANGELOG.md has an Unreleased section first, then the release in VERSION
// (make release publishes that section).
func TestChangelog(t *testing.T) {
	v := releaseVersion(t)
	b, err := os.ReadFile(filepath.Join("..", "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	var heads []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "## [") {
			heads = append(heads, line)
		}
	}
	if len(heads) < 2 || heads[0] != "## [Unreleased]" || !strings.HasPrefix(heads[1], "## ["+v+"] - ") {
		t.Errorf("CHANGELOG.md sections %q: want ## [Unreleased], then ## [%s] - DATE", heads, v)
	}
}

// TestReleaseCheck: make release refuses what would publish a wrong version (a dirty tree, a tag
// that is not VERSION's or not on the commit that set it, a release without its changelog section)
// and builds a snapshot elsewhere, with the Unreleased notes.
func TestReleaseCheck(t *testing.T) {
	r := newGitRepo(t)
	script, err := os.ReadFile("release.sh")
	if err != nil {
		t.Fatal(err)
	}
	r.write("build/release.sh", string(script))
	if err := os.Chmod(filepath.Join(r.dir, "build", "release.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	check := func(args ...string) (string, error) {
		cmd := exec.Command(filepath.Join(r.dir, "build", "release.sh"), args...)
		cmd.Dir = r.dir
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	r.write("VERSION", "1.2.0\n")
	r.write("CHANGELOG.md", "# Changelog\n\n## [Unreleased]\n\n- next thing\n\n## [1.2.0] - 2026-12-02\n\n- a thing\n\n## [1.1.0] - 2026-11-01\n\n- old\n")
	r.commit("release 1.2.0")
	if out, err := check("check", r.version(r.dir)); err != nil || !strings.Contains(out, "release: 1.2.0") {
		t.Errorf("release commit: %v %s", err, out)
	}
	if out, err := check("notes", "1.2.0"); err != nil || out != "# Stormgate 1.2.0\n\n- a thing\n\n" {
		t.Errorf("notes: %v %q", err, out)
	}
	r.git("tag", "v1.3.0")
	if out, err := check("check", "1.2.0"); err == nil || !strings.Contains(out, "HEAD is tagged v1.3.0 but VERSION says 1.2.0") {
		t.Errorf("other tag on HEAD: %v %s", err, out)
	}
	r.git("tag", "-d", "v1.3.0")
	r.write("a.go", "package a\n")
	r.commit("after")
	r.git("tag", "v1.2.0")
	if out, err := check("check", r.version(r.dir)); err == nil || !strings.Contains(out, "tag v1.2.0 is on") {
		t.Errorf("tag away from the commit that set VERSION: %v %s", err, out)
	}
	r.git("tag", "-d", "v1.2.0")
	v := r.version(r.dir)
	if out, err := check("check", v); err != nil || !strings.Contains(out, "building a snapshot") {
		t.Errorf("snapshot %s: %v %s", v, err, out)
	}
	if out, err := check("notes", v); err != nil || !strings.HasPrefix(out, "# Stormgate "+v+" (snapshot: changes since 1.2.0)\n\n- next thing") {
		t.Errorf("snapshot notes: %v %q", err, out)
	}
	r.write("a.go", "package a // edited\n")
	if out, err := check("check", r.version(r.dir)); err == nil || !strings.Contains(out, "uncommitted changes") {
		t.Errorf("dirty: %v %s", err, out)
	}
	r.write("VERSION", "1.4.0\n")
	r.commit("release 1.4.0 without notes")
	if out, err := check("check", "1.4.0"); err == nil || !strings.Contains(out, `no "## [1.4.0]" section`) {
		t.Errorf("no changelog section: %v %s", err, out)
	}
}
