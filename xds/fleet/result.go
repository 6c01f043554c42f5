package fleet

import "fmt"

// Result is what one `stormbench xds-fleet` run measured (its --json).
type Result struct {
	Nodes         int       `json:"nodes"`
	Workers       int       `json:"workers"`
	Replicas      int       `json:"replicas"`
	Namespaces    int       `json:"namespaces"`
	Apps          int       `json:"apps"`
	ConnectS      float64   `json:"connect_s"` // first client started -> last node applied its first settings
	RSSBeforeMiB  float64   `json:"cp_rss_before_mib"`
	RSSAfterMiB   float64   `json:"cp_rss_after_mib"`
	RSSPerNodeKiB float64   `json:"cp_rss_per_node_kib"`
	HeapPerNodeKB float64   `json:"cp_heap_per_node_kib"`
	IdleCPU       float64   `json:"cp_idle_cpu"` // cores, every node connected
	Versions      float64   `json:"cp_settings_versions"`
	Changes       []Change  `json:"changes"`
	Failover      *Failover `json:"failover,omitempty"`
	Failures      []string  `json:"failures,omitempty"`
}

// Change is one change written to the control-plane file.
type Change struct {
	Name        string  `json:"name"`
	Affected    int     `json:"affected"`
	Acked       int     `json:"acked"`
	P50ms       float64 `json:"p50_ms"`
	P99ms       float64 `json:"p99_ms"`
	MaxMs       float64 `json:"max_ms"`
	CPP99ms     float64 `json:"cp_publish_to_ack_p99_ms"` // from the control plane's histogram (bucket bound)
	Pushes      float64 `json:"cp_pushes"`
	CPUs        float64 `json:"cp_cpu_s"`
	CPUPerNode  float64 `json:"cp_cpu_us_per_node"`
	Unaffected  int     `json:"unaffected"`
	UnaffApply  int     `json:"unaffected_applied"` // must be 0
	NACKs       int     `json:"nacks"`
	TimedOut    bool    `json:"timed_out"`
	WrittenAtNs int64   `json:"written_at_unix_ns"`
}

// Failover is the replica kill.
type Failover struct {
	Killed          string  `json:"killed"`
	NodesOnKilled   int     `json:"nodes_on_killed"`
	P50ms           float64 `json:"reconnect_p50_ms"`
	P99ms           float64 `json:"reconnect_p99_ms"`
	MaxMs           float64 `json:"reconnect_max_ms"` // kill -> the last of its nodes connected elsewhere
	AllConnected    bool    `json:"all_connected"`
	SettingsChanged int     `json:"settings_changed"` // nodes that applied anything between the kill and the next change
	After           Change  `json:"after"`
}

// Failures lists what went wrong with the change: affected nodes that did
// not ACK in time, NACKs, and pushes that reached nodes it does not affect.
func (c Change) Failures() []string {
	var out []string
	if c.TimedOut {
		out = append(out, fmt.Sprintf("%s: %d of %d affected nodes ACKed in time", c.Name, c.Acked, c.Affected))
	}
	if c.NACKs > 0 {
		out = append(out, fmt.Sprintf("%s: %d NACKs", c.Name, c.NACKs))
	}
	if c.UnaffApply > 0 {
		out = append(out, fmt.Sprintf("%s: %d nodes it does not affect applied settings", c.Name, c.UnaffApply))
	}
	return out
}
