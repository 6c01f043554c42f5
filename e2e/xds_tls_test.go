package e2e

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stormgate/stormgate/e2e/testcerts"
)

// Issue 13, acceptance 4 (processes; the pod test does the same in containers): the control plane
// serves mutual TLS from files (`sidecar control-plane --cert --key --client-ca`) and a sidecar with
// the right CA and a client certificate gets its settings and turns ready. A sidecar trusting another
// CA, or one without a client certificate, fails with a log line that names the TLS problem and stays
// unready (/readyz 503): it never falls back to plaintext and never runs settings it did not get.
func TestXDSOverMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, dir, "cp-ca")
	other := testcerts.NewCA(t, dir, "other-ca")
	srvCert, srvKey := ca.Server(t, dir, "control-plane", "127.0.0.1")
	cliCert, cliKey := ca.Client(t, dir, "sidecar")
	cfg := filepath.Join(dir, "cp.yaml")
	if err := os.WriteFile(cfg, []byte("default:\n  upstream: {connections: 2}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cp := startXDSControlPlane(t, "", cfg, "--cert", srvCert, "--key", srvKey, "--client-ca", ca.Path)
	if len(cp.jsonLines("control plane TLS")) != 1 {
		t.Errorf("control plane did not log that it serves TLS")
	}
	p := startProvider(t, "")

	wrong := startXDSSidecar(t, p.addr, cp.addr, "wrong-ca.default", 0, "--xds-ca", other.Path, "--xds-cert", cliCert, "--xds-key", cliKey)
	noCert := startXDSSidecar(t, p.addr, cp.addr, "no-cert.default", 0, "--xds-ca", ca.Path)
	good := startXDSSidecar(t, p.addr, cp.addr, "good.default", 0, "--xds-ca", ca.Path, "--xds-cert", cliCert, "--xds-key", cliKey)

	// The good one: settings from the control plane (2 upstream connections, not the default 4), ready.
	good.waitMetric(t, 20*time.Second, "stormgate_upstream_connections", func(v float64) bool { return v == 2 })
	if !poll(10*time.Second, func() bool { return good.readyz(context.Background()) == http.StatusOK }) {
		t.Fatalf("sidecar with the right CA and certificate: /readyz never 200")
	}
	if v := good.metric(t, "stormgate_xds_connected"); v != 1 {
		t.Errorf("stormgate_xds_connected = %v, want 1", v)
	}

	for _, c := range []struct {
		name string
		s    *sidecar
		log  string
	}{
		{"wrong CA", wrong, "certificate signed by unknown authority"},
		{"no client certificate", noCert, "certificate"},
	} {
		var line string
		if !poll(20*time.Second, func() bool { line = logLine(c.s, "xds control plane unreachable", c.log); return line != "" }) {
			t.Errorf("%s: no xds log line naming %q; log:\n%s", c.name, c.log, strings.Join(c.s.logLines(), "\n"))
			continue
		}
		code, body := readyzBody(t, c.s)
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "no settings from the control plane") {
			t.Errorf("%s: /readyz %d %q, want 503 saying why", c.name, code, body)
		}
		if v := c.s.metric(t, "stormgate_xds_updates_total", `result="ack"`); v != 0 {
			t.Errorf("%s: %v settings applied", c.name, v)
		}
		if v := c.s.metric(t, "stormgate_xds_connected"); v != 0 {
			t.Errorf("%s: stormgate_xds_connected = %v", c.name, v)
		}
		// Still serving consumers on its own settings: 4 upstream connections, not the pushed 2.
		c.s.waitMetric(t, 20*time.Second, "stormgate_upstream_connections", func(v float64) bool { return v == 4 })
		t.Logf("%s: /readyz %d %q; log: %s", c.name, code, strings.TrimSpace(body), line)
	}
}

// logLine returns the sidecar's first log line that contains all of parts ("" if none).
func logLine(s *sidecar, parts ...string) string {
	for _, l := range s.logLines() {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(l, p)
		}
		if ok {
			return l
		}
	}
	return ""
}

func readyzBody(t *testing.T, s *sidecar) (int, string) {
	t.Helper()
	resp, err := s.http.Get("http://" + s.metrics + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
