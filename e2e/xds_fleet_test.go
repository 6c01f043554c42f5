package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	xdsfleet "github.com/stormgate/stormgate/xds/fleet"
)

// Issue 15, acceptance 2 (and a small version of acceptance 1): two real
// control-plane replicas reading one file, 2,000 real xDS clients (the xds
// package's client, in worker processes of `stormbench xds-fleet`). A change
// to every node and a change to one selector; then the replica holding the
// most nodes is SIGKILLed: each of its nodes is connected to the other
// within 10 s, no node applies anything in between, and a change made
// afterwards is ACKed by all.
func TestXDSFleetFailover(t *testing.T) {
	const nodes = 2000
	out := filepath.Join(t.TempDir(), "fleet.json")
	p := startProc(t, "xds-fleet", bins.stormbench, "xds-fleet", "--nodes", "2000", "--spawn", "2", "--failover",
		"--changes", "1", "--idle-window", "0", "--sidecar", bins.sidecar, "--json", out, "--phase-timeout", "60s")
	code := p.wait(t, 4*time.Minute)
	for _, l := range p.stdoutLines() {
		t.Log(l)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		p.dumpLogs(t, 40)
		t.Fatalf("no result (exit %d): %v", code, err)
	}
	var r xdsfleet.Result
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if code != 0 || len(r.Failures) > 0 {
		t.Errorf("xds-fleet exit %d, failures: %v", code, r.Failures)
	}
	if len(r.Changes) != 2 || r.Failover == nil {
		t.Fatalf("result lacks phases: %s", b)
	}
	all, sel := r.Changes[0], r.Changes[1]
	if all.Affected != nodes || all.Acked != nodes || all.NACKs != 0 || all.Pushes != nodes {
		t.Errorf("all-node change: %+v", all)
	}
	// One app of ten: 200 nodes get it (one push each), the other 1,800 nothing.
	if sel.Affected != nodes/10 || sel.Acked != sel.Affected || sel.Pushes != float64(sel.Affected) || sel.UnaffApply != 0 {
		t.Errorf("one-selector change: %+v", sel)
	}
	f := r.Failover
	if !f.AllConnected || f.NodesOnKilled < nodes/4 || f.MaxMs > 10_000 {
		t.Errorf("failover: %d nodes on the killed replica, all connected elsewhere %v, last one after %.0f ms (want <= 10 s)",
			f.NodesOnKilled, f.AllConnected, f.MaxMs)
	}
	if f.SettingsChanged != 0 {
		t.Errorf("%d nodes changed settings during the failover", f.SettingsChanged)
	}
	if f.After.Acked != nodes || f.After.NACKs != 0 {
		t.Errorf("change after the failover: %+v", f.After)
	}
}

// Issue 15, acceptance 4, with replicas: a real sidecar with traffic, given
// both replicas (--xds A,B). The replica it is connected to is SIGKILLed: it
// moves to the other, keeps its settings and its consumers (every request
// answered, no connection closed), and says so on /readyz and in its
// metrics. The killed replica comes back, the file changes, and the
// sidecar applies the new version from the replica it is on.
func TestXDSSidecarFailsOverUnderTraffic(t *testing.T) {
	const (
		node  = "e2e-failover.shop"
		conns = 100
		rate  = 200.0
	)
	cfgPath := filepath.Join(t.TempDir(), "cp.yaml")
	v1Text := "default:\n  keepalive: { upstream_interval: 20s }\n" +
		"selectors:\n  - name: checkout\n    match: { labels: { app: checkout } }\n    settings:\n      hold: { timeout: 2s }\n"
	writeFileAtomic(t, cfgPath, v1Text)
	prov := startXDSProvider(t)
	cpA := startXDSControlPlane(t, "", cfgPath)
	cpB := startXDSControlPlane(t, "", cfgPath)
	sc := startXDSSidecar(t, prov.Addr(), cpA.addr+","+cpB.addr, node, 4, "--xds-namespace", "shop", "--xds-labels", "app=checkout")
	cd1, _ := sc.waitConfigDump(t, 10*time.Second, "settings from the control plane", func(cd configDump) bool {
		return cd.Source == "xds" && cd.field("hold.timeout") == "2s"
	})
	on, other := cpA, cpB
	if sc.metric(t, "stormgate_xds_control_plane", `address="`+cpB.addr+`"`) == 1 {
		on, other = cpB, cpA
	}
	if sc.metric(t, "stormgate_xds_control_plane", `address="`+on.addr+`"`) != 1 {
		t.Fatalf("stormgate_xds_control_plane does not show the replica in use")
	}
	// The control plane logs which selector matched.
	m := on.waitJSONLine(t, false, 5*time.Second, `"node connected"`, func(m map[string]any) bool {
		return m["msg"] == "node connected" && m["node_id"] == node
	})
	if m["settings_from"] != "default < selectors.checkout" || m["namespace"] != "shop" {
		t.Errorf("node connected log: %v", m)
	}

	f := dialFleet(t, sc.listen, conns, false)
	st := f.startStream(streamConfig{rate: rate, duration: 5 * time.Second, method: "echo", arg: "hello"})
	time.Sleep(time.Until(st.start.Add(500 * time.Millisecond)))

	killAt := time.Now()
	on.Kill()
	upAt := sc.waitMetric(t, 10*time.Second, "stormgate_xds_control_plane", func(v float64) bool { return v == 1 },
		`address="`+other.addr+`"`)
	t.Logf("sidecar on the other replica %v after the kill", upAt.Sub(killAt).Round(time.Millisecond))
	if n := sc.metric(t, "stormgate_xds_failovers_total"); n != 1 {
		t.Errorf("stormgate_xds_failovers_total = %v, want 1", n)
	}
	if cd := sc.mustConfigDump(t); cd.Version != cd1.Version || !cd.Applied.Equal(cd1.Applied) {
		t.Errorf("settings changed across the failover: version %s applied %v, was %s %v", cd.Version, cd.Applied, cd1.Version, cd1.Applied)
	}
	body := sc.readyzBody(t)
	if !strings.HasPrefix(body, "ready\nxds: connected to "+other.addr) || !strings.Contains(body, "running settings version "+cd1.Version) {
		t.Errorf("/readyz body:\n%s", body)
	}

	restarted := startXDSControlPlane(t, on.addr, cfgPath)
	_ = restarted
	v2Text := strings.Replace(v1Text, "timeout: 2s", "timeout: 2500ms", 1)
	writeFileAtomic(t, cfgPath, v2Text)
	cd, _ := sc.waitConfigDump(t, 5*time.Second, "the next push", func(cd configDump) bool {
		return cd.Source == "xds" && cd.field("hold.timeout") == "2.500s"
	})
	if cd.Version == cd1.Version {
		t.Errorf("version did not change")
	}

	tl := count(st.wait(t, 30*time.Second))
	t.Logf("requests across the failover: %v", tl)
	if tl.ok != tl.sent || tl.sent < int(rate*4) {
		t.Errorf("requests: %v, want all OK and at least %d (first connection error %v)", tl, int(rate*4), tl.firstConnErr)
	}
	if n, first := f.closedConns(); n != 0 {
		t.Errorf("%d consumer connections closed (first: %v)", n, first)
	}
	if n := sc.metric(t, "stormgate_xds_updates_total", `result="nack"`); n != 0 {
		t.Errorf("%v NACKs, want 0", n)
	}
}

// readyzBody returns the body of a 200 /readyz.
func (s *sidecar) readyzBody(t *testing.T) string {
	t.Helper()
	resp, err := s.http.Get("http://" + s.metrics + "/readyz")
	if err != nil {
		t.Fatalf("/readyz: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz: %s: %s", resp.Status, b)
	}
	return string(b)
}
