package controlplane

import (
	"encoding/json"
	"net/http"
	"slices"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// cpMetrics is the control plane's stormgate_control_plane_* set. Counters
// and the config gauges are updated as things happen; the node gauges are
// counted from the node table when scraped.
type cpMetrics struct {
	cp         *Server
	loads      *prometheus.CounterVec
	valid      prometheus.Gauge
	published  prometheus.Gauge
	pushes     prometheus.Counter
	acks       prometheus.Counter
	nacks      prometheus.Counter
	ackSeconds prometheus.Histogram

	nodesDesc, rejectingDesc, versionsDesc *prometheus.Desc
}

// ControlPlaneLevels are the values of the settings_from label of
// stormgate_control_plane_nodes: the most specific level that applied.
var Levels = []string{"default", "namespace", "selector", "node"}

func newCPMetrics(cp *Server) *cpMetrics {
	m := &cpMetrics{
		cp: cp,
		loads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stormgate_control_plane_loads_total",
			Help: "Config reads that found a change, by result: published, or invalid (not published; the previous config stays).",
		}, []string{"result"}),
		valid: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "stormgate_control_plane_config_valid",
			Help: "1 when the config files as they are now were valid and published; 0 while they are invalid and the previous config is served.",
		}),
		published: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "stormgate_control_plane_config_published_timestamp_seconds",
			Help: "Unix time the config being served was read and published.",
		}),
		pushes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stormgate_control_plane_pushes_total",
			Help: "Settings responses sent to sidecars.",
		}),
		acks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stormgate_control_plane_acks_total",
			Help: "Settings responses ACKed by sidecars.",
		}),
		nacks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stormgate_control_plane_nacks_total",
			Help: "Settings pushes NACKed by sidecars.",
		}),
		ackSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "stormgate_control_plane_ack_duration_seconds",
			Help:    "From setting a node's new settings (config published or node connected) to its ACK.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2, 5, 10, 30},
		}),
		nodesDesc: prometheus.NewDesc("stormgate_control_plane_nodes",
			"Connected nodes by the most specific level of the config that applies to them (default: nothing more specific matched).",
			[]string{"settings_from"}, nil),
		rejectingDesc: prometheus.NewDesc("stormgate_control_plane_nodes_rejecting",
			"Connected nodes that NACKed the settings currently served to them (they run older settings).", nil, nil),
		versionsDesc: prometheus.NewDesc("stormgate_control_plane_settings_versions",
			"Distinct settings versions served to connected nodes (one shared snapshot each).", nil, nil),
	}
	for _, r := range []string{"published", "invalid"} {
		m.loads.WithLabelValues(r)
	}
	return m
}

func (m *cpMetrics) register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.loads, m.valid, m.published, m.pushes, m.acks, m.nacks, m.ackSeconds, m} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

func (m *cpMetrics) loaded(ok bool) {
	if ok {
		m.loads.WithLabelValues("published").Inc()
		m.valid.Set(1)
		m.published.Set(float64(time.Now().UnixNano()) / 1e9)
		return
	}
	m.loads.WithLabelValues("invalid").Inc()
	m.valid.Set(0)
}

// Describe and Collect make the node gauges.
func (m *cpMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.nodesDesc
	ch <- m.rejectingDesc
	ch <- m.versionsDesc
}

func (m *cpMetrics) Collect(ch chan<- prometheus.Metric) {
	byLevel := map[string]int{}
	rejecting := 0
	m.cp.mu.Lock()
	for _, n := range m.cp.nodes {
		byLevel[n.res.Level()]++
		if n.isRejecting() {
			rejecting++
		}
	}
	versions := len(m.cp.shared)
	m.cp.mu.Unlock()
	for _, l := range Levels {
		ch <- prometheus.MustNewConstMetric(m.nodesDesc, prometheus.GaugeValue, float64(byLevel[l]), l)
	}
	ch <- prometheus.MustNewConstMetric(m.rejectingDesc, prometheus.GaugeValue, float64(rejecting))
	ch <- prometheus.MustNewConstMetric(m.versionsDesc, prometheus.GaugeValue, float64(versions))
}

func (n *cpNode) isRejecting() bool { return n.rejected == n.version && n.acked != n.version }

// NodeStatus is one connected node as GET /nodes shows it.
type NodeStatus struct {
	NodeID       string            `json:"node_id"`
	Cluster      string            `json:"cluster,omitempty"`
	Namespace    string            `json:"namespace,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	Ports        []int32           `json:"provider_ports,omitempty"`
	SettingsFrom []string          `json:"settings_from"`
	Version      string            `json:"version"`
	Acked        string            `json:"acked_version"`
	Rejected     string            `json:"rejected_version,omitempty"`
	RejectError  string            `json:"reject_error,omitempty"`
	Streams      int               `json:"streams"`
	Connected    time.Time         `json:"connected"`
}

// Nodes lists the connected nodes, sorted by id.
func (cp *Server) Nodes() []NodeStatus {
	cp.mu.Lock()
	out := make([]NodeStatus, 0, len(cp.nodes))
	for _, n := range cp.nodes {
		ns := NodeStatus{NodeID: n.info.ID, Cluster: n.info.Cluster, Namespace: n.info.Namespace, Labels: n.info.Labels,
			Ports: n.info.Ports, SettingsFrom: n.res.From, Version: n.version, Acked: n.acked,
			Streams: n.streams, Connected: n.connected}
		if n.isRejecting() {
			ns.Rejected, ns.RejectError = n.rejected, n.rejectErr
		}
		out = append(out, ns)
	}
	cp.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].NodeID < out[j].NodeID })
	return out
}

// NodesHandler serves GET /nodes: the connected nodes as JSON, with what
// they report, the config entries that apply to them (settings_from), the
// version served and the version they ACKed. ?from=selectors.NAME (or any
// entry) keeps the nodes that entry applies to; ?rejecting=1 keeps the nodes
// rejecting their settings.
func (cp *Server) NodesHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			http.Error(w, "use GET /nodes", http.StatusMethodNotAllowed)
			return
		}
		from, rejecting := r.URL.Query().Get("from"), r.URL.Query().Get("rejecting") != ""
		var out []NodeStatus
		for _, n := range cp.Nodes() {
			if from != "" && !slices.Contains(n.SettingsFrom, from) {
				continue
			}
			if rejecting && n.Rejected == "" {
				continue
			}
			out = append(out, n)
		}
		if out == nil {
			out = []NodeStatus{}
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(out)
	})
}
