package controlplane

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"

	"github.com/stormgate/stormgate/settings"

	"github.com/stormgate/stormgate/xds"
)

// observedCP serves a ControlPlane whose logs the test reads.
type observedCP struct {
	*runningCP
	logs *observer.ObservedLogs
	reg  *prometheus.Registry
}

func startObservedCP(t *testing.T, addr, config string, opts ...grpc.ServerOption) *observedCP {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	reg := prometheus.NewRegistry()
	return &observedCP{runningCP: startCPWith(t, addr, config, zap.New(core), reg, opts...), logs: logs, reg: reg}
}

func (o *observedCP) logged(msg, nodeID string) []observer.LoggedEntry {
	return o.logs.FilterMessage(msg).FilterField(zap.String("node_id", nodeID)).All()
}

func (o *observedCP) metric(name string, labels ...string) float64 {
	mfs, err := o.reg.Gather()
	if err != nil {
		panic(err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				ok := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						ok = true
					}
				}
				if !ok {
					continue next
				}
			}
			switch {
			case m.GetGauge() != nil:
				total += m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				total += m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				total += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return total
}

// A small fleet: 200 nodes in 4 apps over 2 namespaces. A change to one
// selector reaches exactly the nodes it selects (one push each); the rest get
// nothing. Nodes resolving alike share one snapshot.
func TestControlPlaneSelectorChangeReachesOnlyItsNodes(t *testing.T) {
	const nodes = 200
	file := func(paymentRate int) string {
		return fmt.Sprintf(`default:
  keepalive: { upstream_interval: 30s }
namespaces:
  ns-1:
    hold: { timeout: 2s }
selectors:
  - name: payment
    match: { labels: { app: app-0 } }
    settings:
      admission: { accept_rate: %d }
  - name: orders-1
    match: { namespace: ns-1, labels: { app: app-1 } }
    settings:
      upstream: { connections: 6 }
`, paymentRate)
	}
	path := filepath.Join(t.TempDir(), "cp.yaml")
	writeFile(t, path, file(3000))
	cp := startObservedCP(t, "127.0.0.1:0", path)
	clients := make([]*runningClient, nodes)
	for i := range clients {
		info := xds.NodeInfo{ID: fmt.Sprintf("pod-%d.ns-%d", i, i%2), Namespace: fmt.Sprintf("ns-%d", i%2),
			Labels: map[string]string{"app": fmt.Sprintf("app-%d", i%4), "pod-template-hash": "abc"}}
		clients[i] = startClient(t, cp.addr, info.ID, func(c *xds.ClientConfig) { c.Node = info })
	}
	waitFor(t, 30*time.Second, "every node applied", func() bool {
		for _, c := range clients {
			if c.version() == "" {
				return false
			}
		}
		return true
	})
	// Node i is in ns-(i%2) with app-(i%4): four classes, each its own settings
	// (app-0: payment; app-2: default; app-1: ns-1 + orders-1; app-3: ns-1).
	if v := cp.metric("stormgate_control_plane_settings_versions"); v != 4 {
		t.Errorf("%v settings versions in use, want 4 (one shared snapshot per distinct settings)", v)
	}
	if got := cp.metric("stormgate_control_plane_nodes", "settings_from", "selector"); got != 100 {
		t.Errorf("%v nodes resolved by a selector, want 100 (app-0 everywhere, app-1 in ns-1)", got)
	}
	if got := cp.metric("stormgate_control_plane_nodes", "settings_from", "namespace"); got != 50 {
		t.Errorf("%v nodes resolved by their namespace, want 50", got)
	}
	for i, c := range clients {
		s, _, _ := c.get()
		wantRate, wantConns := 5000.0, int32(4)
		if i%4 == 0 {
			wantRate = 3000
		}
		if i%4 == 1 && i%2 == 1 {
			wantConns = 6
		}
		if s.GetAdmission().GetAcceptRate() != wantRate || s.GetUpstream().GetConnections() != wantConns {
			t.Fatalf("node %d: accept_rate %v connections %d, want %v and %d", i, s.GetAdmission().GetAcceptRate(),
				s.GetUpstream().GetConnections(), wantRate, wantConns)
		}
	}
	pushesBefore := cp.metric("stormgate_control_plane_pushes_total")
	applies := make([]int, nodes)
	for i, c := range clients {
		_, _, applies[i] = c.get()
	}

	writeFile(t, path, file(4000))
	waitFor(t, 10*time.Second, "the payment nodes applied the change", func() bool {
		for i := 0; i < nodes; i += 4 {
			if s, _, _ := clients[i].get(); s.GetAdmission().GetAcceptRate() != 4000 {
				return false
			}
		}
		return true
	})
	waitFor(t, 5*time.Second, "the config-published log line", func() bool {
		return len(cp.logs.FilterMessage("config published").All()) == 1
	})
	if pushed := cp.metric("stormgate_control_plane_pushes_total") - pushesBefore; pushed != nodes/4 {
		t.Errorf("%v pushes for a change to one selector, want %d (its nodes only)", pushed, nodes/4)
	}
	for i, c := range clients {
		_, _, calls := c.get()
		want := applies[i]
		if i%4 == 0 {
			want++
		}
		if calls != want {
			t.Errorf("node %d applied %d times, want %d", i, calls, want)
		}
	}
	pub := cp.logs.FilterMessage("config published").All()[0].ContextMap()
	if pub["nodes_changed"] != int64(nodes/4) || pub["nodes_connected"] != int64(nodes) {
		t.Errorf("config published log: %v", pub)
	}
	// The ACKs reach the control plane just after the clients applied.
	waitFor(t, 5*time.Second, "an ACK duration per push", func() bool {
		return cp.metric("stormgate_control_plane_ack_duration_seconds") == nodes+nodes/4
	})

	// Nodes leave: the control plane forgets them.
	for _, c := range clients[:100] {
		c.stop()
	}
	waitFor(t, 10*time.Second, "100 nodes forgotten", func() bool {
		return len(cp.cp.Nodes()) == 100 && len(cp.logs.FilterMessage("node disconnected").All()) == 100
	})
	if got := len(cp.cp.cache.GetStatusKeys()); got != 100 {
		t.Errorf("the snapshot cache still holds %d nodes, want 100", got)
	}
}

// What an operator sees for each node: connect (with what it reported and
// which entries apply), ACK, NACK, disconnect; a node that matches nothing
// specific is called out; /nodes shows the same.
func TestControlPlaneNodeLogs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cp.yaml")
	writeFile(t, path, `default:
  keepalive: { upstream_interval: 30s }
selectors:
  - name: payment
    match: { namespace: shop, labels: { app: payment } }
    settings:
      hold: { timeout: 2s }
nodes:
  payment-0.shop:
    upstream: { backoff_max: 500ms }
`)
	cp := startObservedCP(t, "127.0.0.1:0", path)
	pay := xds.NodeInfo{ID: "payment-1.shop", Namespace: "shop", Labels: map[string]string{"app": "payment"}}
	a := startClient(t, cp.addr, pay.ID, func(c *xds.ClientConfig) { c.Node = pay })
	typo := startClient(t, cp.addr, "paymnet-0.shop", nil)
	// This node's own settings make the file's backoff_max invalid: it NACKs.
	base := settings.Merge(settings.Defaults(), interval(10*time.Second))
	base.Upstream.BackoffBase = dur(time.Second)
	nack := startSidecar(t, cp.addr, "payment-0.shop", base, func(c *xds.ClientConfig) {
		c.Node = xds.NodeInfo{ID: "payment-0.shop", Namespace: "shop", Labels: map[string]string{"app": "payment"}}
	})
	waitFor(t, 5*time.Second, "two nodes applied, one NACK", func() bool {
		return a.version() != "" && typo.version() != "" && nack.count("nack") == 1
	})
	// The client counts its NACK when it sends it; the control plane logs it when it
	// reads it: wait for the control plane's side too.
	waitFor(t, 5*time.Second, "ACK and NACK logs", func() bool {
		return len(cp.logged("node applied settings (ACK)", pay.ID)) == 1 &&
			len(cp.logged("node applied settings (ACK)", "paymnet-0.shop")) == 1 &&
			len(cp.logged("node rejected settings (NACK)", "payment-0.shop")) >= 1
	})

	conn := cp.logged("node connected", pay.ID)
	if len(conn) != 1 {
		t.Fatalf("node connected logged %d times", len(conn))
	}
	m := conn[0].ContextMap()
	if m["settings_from"] != "default < selectors.payment" || m["namespace"] != "shop" || m["labels"] != "app=payment" ||
		m["note"] != nil || !strings.HasPrefix(fmt.Sprint(m["peer"]), "127.0.0.1:") {
		t.Errorf("node connected: %v", m)
	}
	m = cp.logged("node connected", "paymnet-0.shop")[0].ContextMap()
	if m["settings_from"] != "default" || !strings.Contains(fmt.Sprint(m["note"]), "gets the default") {
		t.Errorf("a node matching nothing specific must be called out: %v", m)
	}
	m = cp.logged("node applied settings (ACK)", pay.ID)[0].ContextMap()
	if m["settings_from"] != "default < selectors.payment" || m["version"] != a.version() {
		t.Errorf("ACK: %v", m)
	}
	nl := cp.logged("node rejected settings (NACK)", "payment-0.shop")
	if len(nl) != 1 {
		t.Fatalf("NACK logged %d times", len(nl))
	}
	m = nl[0].ContextMap()
	if m["settings_from"] != "default < selectors.payment < nodes.payment-0.shop" ||
		!strings.Contains(fmt.Sprint(m["error"]), "upstream.backoff_max: 500ms is below upstream.backoff_base (1s)") {
		t.Errorf("NACK: %v", m)
	}
	if got := cp.metric("stormgate_control_plane_nodes_rejecting"); got != 1 {
		t.Errorf("nodes_rejecting %v, want 1", got)
	}

	// /nodes
	rec := httptest.NewRecorder()
	cp.cp.NodesHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/nodes?from=selectors.payment", nil))
	var list []NodeStatus
	if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].NodeID != "payment-0.shop" || list[0].Rejected == "" || list[1].NodeID != pay.ID ||
		list[1].Acked != a.version() {
		t.Errorf("/nodes?from=selectors.payment: %s", rec.Body)
	}

	a.stop()
	waitFor(t, 5*time.Second, "disconnect logged", func() bool { return len(cp.logged("node disconnected", pay.ID)) == 1 })
}

// The config gauges an alert uses for "control plane stuck on an invalid
// file".
func TestControlPlaneConfigValidGauge(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cp.yaml")
	writeFile(t, path, "default:\n  keepalive: {upstream_interval: 10s}\n")
	cp := startObservedCP(t, "127.0.0.1:0", path)
	if cp.metric("stormgate_control_plane_config_valid") != 1 || cp.metric("stormgate_control_plane_loads_total", "result", "invalid") != 0 {
		t.Fatalf("at start: valid %v", cp.metric("stormgate_control_plane_config_valid"))
	}
	published := cp.metric("stormgate_control_plane_config_published_timestamp_seconds")
	writeFile(t, path, "default:\n  keepalive: {upstream_interval: 10s}\nnodes:\n  a: {listener: {address: 0.0.0.0:1}}\n")
	waitFor(t, 5*time.Second, "invalid file seen", func() bool { return cp.metric("stormgate_control_plane_config_valid") == 0 })
	if cp.metric("stormgate_control_plane_loads_total", "result", "invalid") != 1 ||
		cp.metric("stormgate_control_plane_config_published_timestamp_seconds") != published {
		t.Errorf("invalid load: loads %v, published timestamp moved", cp.metric("stormgate_control_plane_loads_total", "result", "invalid"))
	}
	e := cp.logs.FilterMessage("config invalid, not published; still serving the previous config").All()
	// Issue 24: "file" named nothing ("") when --config is one file.
	if len(e) != 1 || e[0].ContextMap()["field"] != "nodes.a.listener.address" || e[0].ContextMap()["line"] != int64(4) ||
		e[0].ContextMap()["file"] != "cp.yaml" {
		t.Errorf("invalid config log: %v", e)
	}
	time.Sleep(10 * time.Millisecond) // the published timestamp has µs resolution
	writeFile(t, path, "default:\n  keepalive: {upstream_interval: 11s}\n")
	waitFor(t, 5*time.Second, "valid again", func() bool { return cp.metric("stormgate_control_plane_config_valid") == 1 })
	if cp.metric("stormgate_control_plane_config_published_timestamp_seconds") <= published {
		t.Errorf("published timestamp did not move")
	}
}
