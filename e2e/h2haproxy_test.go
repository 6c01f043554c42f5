package e2e

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stormgate/stormgate/peer"
)

// TestH2BehindHAProxy: HAProxy (Debian's, HTTP mode, h2 on both sides) in front of `sidecar run`
// (upstream.protocol triple) in front of the Triple echo provider, h2c consumers calling through all
// three. HAProxy 2.6 as an HTTP/2 client acknowledges Stormgate's SETTINGS_HEADER_TABLE_SIZE 0 but
// never sends the dynamic table size update RFC 7541 §4.2 asks for (its encoder uses no table):
// Stormgate used to end every such connection with COMPRESSION_ERROR, failing every call. Every call
// must be answered with its own bytes.
func TestH2BehindHAProxy(t *testing.T) {
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		t.Skip("haproxy is not installed (Debian package haproxy; .ci/run installs it)")
	}
	prov, err := peer.StartTripleEcho(peer.TripleConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = prov.Close() })
	sc := startSidecar(t, prov.Addr(), "upstream: { protocol: triple, connections: 2 }\n", 2)

	hp := startHAProxyH2(t, bin, sc.listen)
	load := startLoad(t, nil, "--protocol", "triple", "--target", hp, "--conns", "8",
		"--rate", "100", "--duration", "2s", "--body-min", "16", "--body-max", "65536")
	res := load.result(t, 60*time.Second)
	t.Logf("load: sent %d ok %d errors %v, p99 %v", res.Sent, res.OK, res.ErrorByStatus, res.Latency.P99)
	if res.Sent != 200 || res.OK != res.Sent || res.BodyMismatches != 0 {
		t.Errorf("sent %d ok %d mismatches %d errors %v; want 200 calls, each answered with its own bytes",
			res.Sent, res.OK, res.BodyMismatches, res.ErrorByStatus)
	}
	if n := sc.metric(t, "stormgate_http2_goaways_total", `peer="consumer"`, `direction="sent"`); n != 0 {
		t.Errorf("Stormgate sent %v GOAWAYs to HAProxy; want 0", n)
	}
	for _, v := range prov.Violations() {
		t.Errorf("provider: %s", v)
	}
}

// startHAProxyH2 starts one HAProxy process in HTTP mode speaking h2c to consumers and to backend, and
// returns the address it listens on once it accepts connections.
func startHAProxyH2(t *testing.T, bin, backend string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cfg := filepath.Join(t.TempDir(), "haproxy.cfg")
	conf := fmt.Sprintf(`global
    nbthread 1
defaults
    mode http
    timeout connect 1s
    timeout client 1m
    timeout server 1m
frontend consumers
    bind %s proto h2
    default_backend stormgate
backend stormgate
    server stormgate %s proto h2
`, addr, backend)
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startProc(t, "haproxy", bin, "-db", "-f", cfg)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return addr
		}
		if p.Exited() || time.Now().After(deadline) {
			t.Fatalf("haproxy does not accept on %s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
