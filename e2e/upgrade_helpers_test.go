package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stormgate/stormgate/peer"
)

// Versions of the sidecar builds the upgrade tests switch between: TestMain's build
// (bins.sidecar, "dev"), a "next" one, a faulty one (-X main.faultInjection=restore:
// passes its preflight, then refuses every handed-over state) and a slow one
// (faultInjection=slow: each side of a handover waits 500 ms, to aim signals at it).
const (
	versionFirst = "dev"
	versionNext  = "e2e-next"
	versionFault = "e2e-fault"
	versionSlow  = "e2e-slow"
)

// sidecarBuilds are the extra builds, made once per test binary.
type sidecarBuilds struct{ next, fault, slow string }

var upgradeBins struct {
	once sync.Once
	b    sidecarBuilds
	err  error
}

// upgradeBinaries builds the next, the faulty and the slow sidecar once per test binary.
func upgradeBinaries(t *testing.T) sidecarBuilds {
	t.Helper()
	upgradeBins.once.Do(func() {
		root, err := moduleRoot()
		if err != nil {
			upgradeBins.err = err
			return
		}
		dir := filepath.Dir(bins.sidecar)
		build := func(name, ldflags string) string {
			out := filepath.Join(dir, name)
			if upgradeBins.err != nil {
				return out
			}
			args := []string{"build", "-o", out, "-ldflags", ldflags}
			if os.Getenv("STORMGATE_E2E_RACE") == "1" {
				args = append(args, "-race")
			}
			cmd := exec.Command("go", append(args, "./cmd/sidecar")...)
			cmd.Dir = root
			if b, err := cmd.CombinedOutput(); err != nil {
				upgradeBins.err = fmt.Errorf("go build %s: %v\n%s", out, err, b)
			}
			return out
		}
		upgradeBins.b = sidecarBuilds{
			next:  build("sidecar-next", "-X main.version="+versionNext),
			fault: build("sidecar-fault", "-X main.version="+versionFault+" -X main.faultInjection=restore"),
			slow:  build("sidecar-slow", "-X main.version="+versionSlow+" -X main.faultInjection=slow"),
		}
	})
	if upgradeBins.err != nil {
		t.Fatal(upgradeBins.err)
	}
	return upgradeBins.b
}

// upgrade runs `sidecar upgrade --binary binary --admin s.admin [extra]` (through prefix,
// e.g. `ip netns exec POD`) and returns its output and exit code.
func (s *sidecar) upgrade(t *testing.T, prefix []string, binary string, extra ...string) (string, int) {
	t.Helper()
	argv := append([]string{bins.sidecar, "upgrade", "--binary", binary, "--admin", s.admin, "--timeout", "30s"}, extra...)
	argv = append(append([]string(nil), prefix...), argv...)
	cmd := exec.Command(argv[0], argv[1:]...)
	out, err := cmd.CombinedOutput()
	code := 0
	if err != nil {
		code = -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
	}
	return strings.TrimSpace(string(out)), code
}

// runningVersion asks GET /version on the admin listener.
func (s *sidecar) runningVersion(t *testing.T) string {
	t.Helper()
	resp := s.adminGet(t, "/version")
	defer resp.Body.Close()
	var line string
	sc := bufio.NewScanner(resp.Body)
	if sc.Scan() {
		line = sc.Text()
	}
	f := strings.Fields(line) // stormgate VERSION (go...) pid N
	if len(f) < 2 {
		t.Fatalf("GET /version: %q", line)
	}
	return f[1]
}

// adminGet GETs path on the admin listener; the caller closes the body.
func (s *sidecar) adminGet(t *testing.T, path string) *http.Response {
	t.Helper()
	resp, err := s.http.Get("http://" + s.admin + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		t.Fatalf("GET %s: %s", path, resp.Status)
	}
	return resp
}

// procFootprint is what must not grow across upgrades.
type procFootprint struct {
	fds, goroutines int
	rssKiB          int64
	peakKiB         int64 // the most RSS the process ever had (VmHWM)
}

func (f procFootprint) String() string {
	return fmt.Sprintf("%d fds, %d goroutines, RSS %.1f MiB", f.fds, f.goroutines, float64(f.rssKiB)/1024)
}

// footprint reads the sidecar's open descriptors, RSS and peak RSS from /proc and its goroutines
// from /metrics.
func (s *sidecar) footprint(t *testing.T) procFootprint {
	t.Helper()
	pid := s.PID
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	var fp procFootprint
	fp.fds = len(ents)
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(status)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			fp.rssKiB, _ = strconv.ParseInt(strings.Fields(v)[0], 10, 64)
		}
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			fp.peakKiB, _ = strconv.ParseInt(strings.Fields(v)[0], 10, 64)
		}
	}
	fp.goroutines = int(s.metric(t, "go_goroutines"))
	return fp
}

// echoProvider is a `stormbench echo-provider` process reading normally: it echoes raw
// checked bodies and records as a violation anything a correct proxy never sends (a
// repeated upstream id on a connection, a body delivered twice, a bad frame).
type echoProvider struct {
	*proc
	addr string
}

// startEchoProvider runs `stormbench echo-provider --protocol protocol` (dubbo, triple or both: Dubbo
// and Triple on one port, the provider of upstream.protocol both), through prefix when given.
func startEchoProvider(t *testing.T, protocol string, prefix ...string) *echoProvider {
	t.Helper()
	argv := append(append([]string(nil), prefix...), bins.stormbench, "echo-provider", "--protocol", protocol, "--listen", "127.0.0.1:0",
		"--slow-chance", "0", "--stall-chance", "0", "--rcvbuf", "0", "--mss", "0", "--stats-every", "0")
	p := startProc(t, "echo-provider", argv[0], argv[1:]...)
	m := p.waitJSONLine(t, true, 20*time.Second, `{"event":"listening"}`, func(m map[string]any) bool {
		return m["event"] == "listening"
	})
	return &echoProvider{proc: p, addr: m["addr"].(string)}
}

// echoFinal is an echo provider's final line.
type echoFinal struct {
	Stats      *peer.EchoStats   `json:"stats"`  // the Dubbo provider's (both: its Dubbo half's)
	Triple     *peer.TripleStats `json:"triple"` // the Triple provider's (both: its Triple half's)
	Sniff      *peer.SniffStats  `json:"sniff"`  // both: the listener's
	Violations []peer.Violation  `json:"violations"`
}

// stop ends the provider (SIGINT) and returns its final counters and violations.
func (p *echoProvider) stop(t *testing.T) echoFinal {
	t.Helper()
	_ = p.Signal(syscall.SIGINT)
	p.wait(t, 10*time.Second)
	lines := p.stdoutLines()
	for i := len(lines) - 1; i >= 0; i-- {
		var e struct {
			Event string `json:"event"`
			echoFinal
		}
		if json.Unmarshal([]byte(lines[i]), &e) == nil && e.Event == "final" && (e.Stats != nil || e.Triple != nil) {
			return e.echoFinal
		}
	}
	t.Fatalf("echo provider printed no final line; stdout:\n%s", strings.Join(lines, "\n"))
	return echoFinal{}
}

// envInt reads an integer from the environment (the make upgrade-bench knobs), or def. It must be
// positive, or 0 where def is (a knob that is off by default).
func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	return envIntMin(t, name, def, 1)
}

// envIntMin is envInt for a variable that may be as low as min (0: a part of the test left out).
func envIntMin(t *testing.T, name string, def, min int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < min {
		t.Fatalf("%s=%q: want an integer of at least %d", name, v, min)
	}
	return n
}
