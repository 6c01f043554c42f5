package pod

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stormgate/stormgate/build/image"
	"github.com/stormgate/stormgate/internal/promscrape"
)

// Host facts for podman 4.3 on this kind of machine (see the package doc). The test's own
// containers.conf holds them, so nothing outside the test's temporary directory is changed.
const containersConf = `[containers]
# Above the host's hard limits, podman's defaults make both runtimes fail with
# "setrlimit ... operation not permitted".
default_ulimits = ["nofile=20000:20000", "nproc=1000:1000"]
log_driver = "k8s-file"

[engine]
# crun refuses pods on hosts that mount cgroups in hybrid mode.
runtime = "runc"
events_logger = "file"
cgroup_manager = "cgroupfs"
# No registry is reachable: never pull (podman builds its own pause image locally).
pull_policy = "never"
`

// podman runs podman commands with the test's containers.conf.
type podman struct {
	t    *testing.T
	env  []string
	dir  string // the test's working directory for podman (kube play looks for Containerfiles in it)
	logs []string
}

func requirePodman(t *testing.T) *podman {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("skipped: the pod test runs containers with podman on Linux")
	}
	if os.Geteuid() != 0 {
		t.Skip("skipped: the pod test runs rootful podman: run as root (CI does)")
	}
	for _, tool := range []string{"podman", "runc", "nsenter", "ss"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("skipped: %s not installed; the pod test needs podman and runc (Debian: apt-get install -y podman buildah runc; .ci/run installs them)", tool)
		}
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "containers.conf")
	if err := os.WriteFile(conf, []byte(containersConf), 0o644); err != nil {
		t.Fatal(err)
	}
	return &podman{t: t, env: []string{"CONTAINERS_CONF=" + conf}, dir: dir}
}

// run runs podman args and returns its standard output; a failure fails the test.
func (p *podman) run(args ...string) string {
	p.t.Helper()
	out, err := p.try(args...)
	if err != nil {
		p.t.Fatal(err)
	}
	return out
}

// try runs podman args and returns its standard output, or an error with its standard error.
func (p *podman) try(args ...string) (string, error) { return p.tryIn(nil, args...) }

// runIn runs podman args with stdin as its standard input (podman exec -i); a failure fails the test.
func (p *podman) runIn(stdin io.Reader, args ...string) string {
	p.t.Helper()
	out, err := p.tryIn(stdin, args...)
	if err != nil {
		p.t.Fatal(err)
	}
	return out
}

func (p *podman) tryIn(stdin io.Reader, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "podman", args...)
	cmd.Stdin = stdin
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Dir = p.dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	p.logs = append(p.logs, fmt.Sprintf("podman %s (%v)", strings.Join(args, " "), time.Since(start).Round(time.Millisecond)))
	if err != nil {
		return stdout.String(), fmt.Errorf("podman %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// images lists the repository:tag of every image in the store.
func (p *podman) images() []string {
	p.t.Helper()
	return p.lines("images", "--format", "{{.Repository}}:{{.Tag}}")
}

// networks lists the names of podman's networks.
func (p *podman) networks() []string {
	p.t.Helper()
	return p.lines("network", "ls", "--format", "{{.Name}}")
}

// lines runs podman args and returns its non-empty output lines.
func (p *podman) lines(args ...string) []string {
	p.t.Helper()
	var out []string
	for line := range strings.Lines(p.run(args...)) {
		if s := strings.TrimSpace(line); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// inspect returns the Go template's value for a container.
func (p *podman) inspect(ctr, format string) string {
	p.t.Helper()
	return strings.TrimSpace(p.run("inspect", "--type", "container", "--format", format, ctr))
}

// buildImage writes spec as an OCI archive and loads it into podman; the image is removed at cleanup.
func (p *podman) buildImage(spec image.Spec) {
	p.t.Helper()
	img, err := spec.Image()
	if err != nil {
		p.t.Fatal(err)
	}
	archive := filepath.Join(p.t.TempDir(), "image.oci.tar")
	f, err := os.Create(archive)
	if err != nil {
		p.t.Fatal(err)
	}
	if _, err := img.Write(f); err != nil {
		p.t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		p.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	loaded, err := image.Load(ctx, archive, p.env...)
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(func() {
		if _, err := p.try("rmi", "--force", loaded); err != nil {
			p.t.Errorf("cleanup: %v", err)
		}
	})
	if want := "localhost/" + spec.Name; loaded != want {
		p.t.Fatalf("podman loaded %q, want %q", loaded, want)
	}
}

// buildStatic builds a package as `make build` does (static, stamped with version, with the given
// build tags) into dir.
func buildStatic(t *testing.T, dir, pkg, version string, tags ...string) []byte {
	t.Helper()
	out := filepath.Join(dir, filepath.Base(pkg))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	args := []string{"build", "-trimpath", "-ldflags", "-s -w -X main.version=" + version}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	cmd := exec.CommandContext(ctx, "go", append(args, "-o", out, pkg)...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Dir = moduleRoot(t)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// freePort returns a TCP port free on 127.0.0.1 right now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func randomID() string { return fmt.Sprintf("%08x", rand.Uint32()) }

// metrics scrapes http://addr/metrics.
func metrics(t *testing.T, addr string) promscrape.Samples {
	t.Helper()
	ms, err := promscrape.Get(context.Background(), nil, addr)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// httpGet returns the status and body of a GET, or 0 when the request failed.
func httpGet(url string) (int, string) {
	c := http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(b)
}

// poll calls cond every 50 ms until it holds or d passes.
func poll(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var counterRE = regexp.MustCompile(`counter packets \d+ bytes \d+`)

// hostRules is the host's packet filter as nft lists it, counters blanked (they move on their own).
func hostRules(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("nft", "list", "ruleset").Output()
	if err != nil {
		t.Fatalf("nft list ruleset: %v", err)
	}
	return counterRE.ReplaceAllString(string(out), "counter")
}

// procStatus returns fields of /proc/PID/status (Uid, CapEff, ...).
func procStatus(t *testing.T, pid string) map[string]string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(line, ":")
		if ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

func jsonField(t *testing.T, s string, into any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), into); err != nil {
		t.Fatalf("%v: %s", err, s)
	}
}
