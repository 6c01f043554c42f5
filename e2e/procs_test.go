package e2e

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stormgate/stormgate/internal/promscrape"
)

// provider is a `stormbench provider` process.
type provider struct {
	*proc
	addr string
}

// startProvider runs `stormbench provider --listen addr` (addr "" = 127.0.0.1:0) and
// waits for its {"addr": ...} line.
func startProvider(t *testing.T, addr string, extra ...string) *provider {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	args := append([]string{"provider", "--listen", addr, "--log-level", "warn"}, extra...)
	p := startProc(t, "provider", bins.stormbench, args...)
	m := p.waitJSONLine(t, true, 20*time.Second, `its {"addr": ...} line`, func(m map[string]any) bool {
		_, ok := m["addr"].(string)
		return ok
	})
	return &provider{proc: p, addr: m["addr"].(string)}
}

// sidecar is a `sidecar run` process with its three listeners on ephemeral ports.
type sidecar struct {
	*proc
	listen, metrics, admin string
	configPath             string
	http                   *http.Client
}

// startSidecar writes configYAML (if any) to a file, checks it with `sidecar
// validate`, runs `sidecar run` in front of upstream, and waits until it has connected
// all of its upstream connections (upstream.connections, default 4).
func startSidecar(t *testing.T, upstream, configYAML string, wantUpstream int) *sidecar {
	t.Helper()
	args := []string{"run", "--listen", "127.0.0.1:0", "--upstream", upstream,
		"--metrics", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--log-level", "info"}
	var cfgPath string
	if configYAML != "" {
		cfgPath = filepath.Join(t.TempDir(), "stormgate.yaml")
		if err := os.WriteFile(cfgPath, []byte(configYAML), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(bins.sidecar, "validate", cfgPath).CombinedOutput()
		if err != nil || !strings.Contains(string(out), ": ok") {
			t.Fatalf("sidecar validate %s: %v\n%s\n--- file:\n%s", cfgPath, err, out, configYAML)
		}
		args = append(args, "--config", cfgPath)
	}
	p := startProc(t, "sidecar", bins.sidecar, args...)
	s := attachSidecar(t, p, wantUpstream)
	s.configPath = cfgPath
	return s
}

// attachSidecar learns a started sidecar's listen, metrics and admin addresses
// from its log (they are port 0 in tests) and waits for wantUpstream upstream
// connections (0 = do not wait).
func attachSidecar(t *testing.T, p *proc, wantUpstream int) *sidecar {
	t.Helper()
	s := &sidecar{proc: p, http: &http.Client{Timeout: 5 * time.Second}}
	m := p.waitJSONLine(t, false, 20*time.Second, `"stormgate started"`, func(m map[string]any) bool {
		return m["msg"] == "stormgate started"
	})
	s.listen, _ = m["listen"].(string)
	for _, name := range []string{"metrics", "admin"} {
		m := p.waitJSONLine(t, false, 10*time.Second, name+` "http listener started"`, func(m map[string]any) bool {
			return m["msg"] == "http listener started" && m["listener"] == name
		})
		addr, _ := m["address"].(string)
		if name == "metrics" {
			s.metrics = addr
		} else {
			s.admin = addr
		}
	}
	if s.listen == "" || s.metrics == "" || s.admin == "" {
		t.Fatalf("sidecar addresses not found in its log: listen=%q metrics=%q admin=%q", s.listen, s.metrics, s.admin)
	}
	if wantUpstream > 0 {
		s.waitMetric(t, 20*time.Second, "stormgate_upstream_connections", func(v float64) bool { return v == float64(wantUpstream) })
	}
	return s
}

// scrape fetches /metrics: every sample by its series as exposed.
func (s *sidecar) scrape() (promscrape.Samples, error) {
	return promscrape.Get(context.Background(), s.http, s.metrics)
}

// metric returns the sum of the matching series, failing the test if /metrics is down.
func (s *sidecar) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	ms, err := s.scrape()
	if err != nil {
		t.Fatalf("scrape %s: %v", s.metrics, err)
	}
	return ms.Sum(name, labels...)
}

// waitMetric polls /metrics until cond holds for the metric (summed over matching
// series) and returns the time it first did.
func (s *sidecar) waitMetric(t *testing.T, d time.Duration, name string, cond func(float64) bool, labels ...string) time.Time {
	t.Helper()
	var last float64
	var lastErr error
	deadline := time.Now().Add(d)
	for {
		ms, err := s.scrape()
		if err == nil {
			last = ms.Sum(name, labels...)
			if cond(last) {
				return time.Now()
			}
		}
		lastErr = err
		if s.Exited() {
			t.Fatalf("sidecar exited (%v) while waiting for %s%v (last value %v)", s.Err(), name, labels, last)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s%v did not reach the expected value within %v: last value %v, last scrape error %v",
				name, labels, d, last, lastErr)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// readyz returns the HTTP status of /readyz (0 if the request failed).
func (s *sidecar) readyz(ctx context.Context) int {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.metrics+"/readyz", nil)
	resp, err := s.http.Do(req)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}
