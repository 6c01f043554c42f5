package main

import (
	"encoding/json"
	"math"
	"os"
	"time"
)

// Results is everything one `suite run` measured; results.json holds it and `suite render`
// rebuilds the doc from it. Scenario fields are nil when the scenario was not run.
type Results struct {
	Machine  Machine       `json:"machine"`
	Started  time.Time     `json:"started"`
	Wall     time.Duration `json:"wall_ns"`
	Command  string        `json:"command"`
	Options  Options       `json:"options"`
	Failures []string      `json:"failures,omitempty"` // scenario errors, shown in the doc
	// Scenarios is what each scenario cost the machine, in run order.
	Scenarios []ScenarioCPU `json:"scenarios,omitempty"`

	Micro      *MicroResult      `json:"micro,omitempty"`
	Idle       *IdleResult       `json:"idle,omitempty"`
	Latency    *LatencyResult    `json:"latency,omitempty"`
	Throughput *ThroughputResult `json:"throughput,omitempty"`
	Restart    *RestartResult    `json:"restart,omitempty"`
	GiveUp     *GiveUpResult     `json:"giveup,omitempty"`
	Greedy     *GreedyResult     `json:"greedy,omitempty"`
	Storm      *StormResult      `json:"storm,omitempty"`
	Fleet      *FleetResult      `json:"fleet,omitempty"`
	Quiet      *QuietResult      `json:"quiet,omitempty"`
	Heartbeat  *HeartbeatResult  `json:"heartbeat,omitempty"`
	Forward    *ForwardResult    `json:"forward,omitempty"`

	// The Triple rows (scen_triple.go): the same result types as their Dubbo scenarios'.
	TripleIdle    *IdleResult      `json:"triple_idle,omitempty"`
	TriplePing    *HeartbeatResult `json:"triple_ping,omitempty"`
	TripleForward *ForwardResult   `json:"triple_forward,omitempty"`
	TripleRestart *RestartResult   `json:"triple_restart,omitempty"`
	TripleStorm   *StormResult     `json:"triple_storm,omitempty"`

	// Profiles are the CPU profiles taken during the run (quiet, heartbeat, idle, forward,
	// throughput), each with its scenario key and target.
	Profiles []Profile `json:"profiles,omitempty"`
}

// ScenarioCPU is the machine's CPU over one scenario: busy (every process of this guest, the
// run's own included) and stolen by the hypervisor. Steal is CPU this guest wanted and did not
// get: while it is high, every figure of the scenario is slower than the machine is.
type ScenarioCPU struct {
	Name  string        `json:"name"`
	Wall  time.Duration `json:"wall_ns"`
	Busy  float64       `json:"busy_cores"`
	Steal float64       `json:"steal_cores"`
}

// Machine describes where the run happened.
type Machine struct {
	Cores       int    `json:"cores"`
	CPUModel    string `json:"cpu_model"`
	MemGiB      int    `json:"mem_gib"`
	Kernel      string `json:"kernel"`
	GoVersion   string `json:"go_version"`
	HAProxy     string `json:"haproxy"`
	DubboGo     string `json:"dubbo_go"`
	Stormgate   string `json:"stormgate"` // git describe of the tree
	Somaxconn   string `json:"somaxconn"`
	NoFile      string `json:"nofile"`
	LoadAvgPre  string `json:"loadavg_pre"`  // /proc/loadavg when the run started
	LoadAvgPost string `json:"loadavg_post"` // and when it ended
	Perf        bool   `json:"perf"`         // perf sampled and counted (else Go's profiler only)
	PerfVersion string `json:"perf_version"`
	GCC         string `json:"gcc"` // builds the floor programs
}

// MicroResult is the hot-path micro-benchmarks.
type MicroResult struct {
	Command string     `json:"command"`
	Rows    []MicroRow `json:"rows"`
	Error   string     `json:"error,omitempty"`
}

// MicroRow is one benchmark line.
type MicroRow struct {
	Package  string  `json:"package"`
	Name     string  `json:"name"`
	NsOp     float64 `json:"ns_op"`
	BytesOp  float64 `json:"b_op"`
	AllocsOp float64 `json:"allocs_op"`
}

// IdleResult is scenario 1.
type IdleResult struct {
	Provider string        `json:"provider"`
	Conns    int           `json:"conns"`
	Settle   time.Duration `json:"settle_ns"`
	Rows     []IdleRow     `json:"rows"`
}

// IdleRow is one target at one heartbeat period.
type IdleRow struct {
	Target  string        `json:"target"`
	Period  time.Duration `json:"period_ns"`
	Window  time.Duration `json:"window_ns"`
	Conns   int           `json:"conns"` // open during the window
	Command string        `json:"command"`

	ProviderCPU      float64 `json:"provider_cpu"`      // cores (1.0 = one core busy)
	ProviderIdleCPU  float64 `json:"provider_idle_cpu"` // before any consumer connected
	ProxyIdleCPU     float64 `json:"proxy_idle_cpu"`
	ProviderRSSMiB   float64 `json:"provider_rss_mib"`
	ProxyCPU         float64 `json:"proxy_cpu"`
	ProxyRSSMiB      float64 `json:"proxy_rss_mib"`
	ProxyKiBPerConn  float64 `json:"proxy_kib_per_conn"`
	ProvKiBPerConn   float64 `json:"provider_kib_per_conn"`
	HBPerSec         float64 `json:"hb_per_sec"`          // consumer heartbeats answered per second
	ProviderHBPerSec float64 `json:"provider_hb_per_sec"` // heartbeat frames reaching the provider per second; notCounted when unknown
	ProxyUsPerHB     float64 `json:"proxy_us_per_hb"`     // proxy CPU ÷ consumer heartbeats
	ProviderUsPerHB  float64 `json:"provider_us_per_hb"`  // provider CPU ÷ consumer heartbeats (answered by anyone)
	LoadCPU          float64 `json:"load_cpu"`
	HBFailed         uint64  `json:"hb_failed"` // timed out or lost, whole run
	ConnectFailures  uint64  `json:"connect_failures"`
	Error            string  `json:"error,omitempty"`
}

// notCounted marks a figure the run could not count (JSON has no NaN).
const notCounted = -1

// LatencyResult is scenario 2.
type LatencyResult struct {
	Provider string       `json:"provider"`
	Conns    int          `json:"conns"`
	Rate     float64      `json:"rate"`
	Rows     []LatencyRow `json:"rows"`
}

// Quantiles plotted for latency curves.
var curveQuantiles = []float64{0.5, 0.75, 0.9, 0.95, 0.99, 0.995, 0.999, 0.9999}

// LatencyRow is one target and one method.
type LatencyRow struct {
	Target  string  `json:"target"`
	Method  string  `json:"method"` // "echo" or "sleep 100ms"
	Command string  `json:"command"`
	Conns   int     `json:"conns"`
	Rate    float64 `json:"rate"`

	Sent, OK, Failed            uint64 // Failed: errors, exceptions, timeouts, lost, unsent
	P50ms, P99ms, P999ms, MaxMs float64
	Curve                       []float64 `json:"curve_ms"` // latency at curveQuantiles
	// MedianP99ms is the median of the load tool's one-second p99s after the first 2 s (the
	// steady state, less at the mercy of one stall than the whole phase's p99), over P99Seconds.
	MedianP99ms float64 `json:"median_p99_ms"`
	P99Seconds  int     `json:"p99_seconds"`

	ProxyCPU      float64 `json:"proxy_cpu"`
	ProxyUsPerReq float64 `json:"proxy_us_per_req"`
	ProviderCPU   float64 `json:"provider_cpu"`
	LoadUsPerReq  float64 `json:"load_us_per_req"`
	LoadCPU       float64 `json:"load_cpu"`
	BatchFrames   float64 `json:"batch_frames"` // Stormgate: frames per upstream write
	Error         string  `json:"error,omitempty"`
}

// ThroughputResult is scenario 3.
type ThroughputResult struct {
	Provider string        `json:"provider"`
	StepTime time.Duration `json:"step_ns"`
	Warmup   time.Duration `json:"warmup_ns"`
	MaxP99ms float64       `json:"max_p99_ms"`
	Series   []TPSeries    `json:"series"`
}

// TPSeries is one target at one connection count.
type TPSeries struct {
	Target  string   `json:"target"`
	Conns   int      `json:"conns"`
	Command string   `json:"command"` // of the last passing step
	Steps   []TPStep `json:"steps"`
	Max     float64  `json:"max"` // highest passing rate; 0 if none passed
	Error   string   `json:"error,omitempty"`
}

// TPStep is one rate tried.
type TPStep struct {
	Rate          float64 `json:"rate"`
	Pass          bool    `json:"pass"`
	Sent          uint64  `json:"sent"`
	OK            uint64  `json:"ok"`
	Failed        uint64  `json:"failed"`
	P99ms         float64 `json:"p99_ms"`        // whole request phase
	SteadyP99ms   float64 `json:"steady_p99_ms"` // worst one-second p99 after the warm-up
	ProxyCPU      float64 `json:"proxy_cpu"`
	ProxyUsPerReq float64 `json:"proxy_us_per_req"`
	ProviderCPU   float64 `json:"provider_cpu"`
	LoadUsPerReq  float64 `json:"load_us_per_req"`
	LoadCPU       float64 `json:"load_cpu"`
	BatchFrames   float64 `json:"batch_frames"`
	Repeat        bool    `json:"repeat,omitempty"` // run again after a narrow failure at the same rate
}

// RestartResult is scenario 4.
type RestartResult struct {
	Provider  string        `json:"provider"`
	Conns     int           `json:"conns"`
	Rate      float64       `json:"rate"`
	KillAfter time.Duration `json:"kill_after_ns"`
	Down      time.Duration `json:"down_ns"`
	Rows      []RestartRow  `json:"rows"`     // SIGKILL
	Graceful  []RestartRow  `json:"graceful"` // SIGTERM (READONLY, drain, exit), restart 1 s after the exit
}

// RestartRow is one target.
type RestartRow struct {
	Target  string `json:"target"`
	Command string `json:"command"`

	Sent, OK, Errors, Timeouts, Lost, Unsent uint64
	Resets, ClosedByPeer, ConnectFailures    uint64
	Reconnects                               uint64
	P99ms, MaxMs                             float64
	DownFor                                  time.Duration `json:"down_for_ns"`    // kill to provider ready again
	Recovery                                 time.Duration `json:"recovery_ns"`    // kill to full rate for good (1 s resolution)
	Held                                     float64       `json:"held"`           // Stormgate: requests answered after a hold
	Reheld                                   float64       `json:"reheld"`         // Stormgate: in flight at the end, proven unsent or unseen, sent again
	InsideAtKill                             int64         `json:"inside_at_kill"` // requests the provider had read and not answered when killed; -1 unknown
	StopTook                                 time.Duration `json:"stop_took_ns"`   // graceful: SIGTERM to exit
	LocalReplies                             float64       `json:"local_replies"`
	Points                                   []Point       `json:"points"` // OK/s vs seconds since the kill
	Error                                    string        `json:"error,omitempty"`
}

// Point is one plotted point.
type Point struct{ X, Y float64 }

// StormResult is scenario 5.
type StormResult struct {
	Conns       int           `json:"conns"`
	Somaxconn   int           `json:"somaxconn"`
	SynBacklog  string        `json:"tcp_max_syn_backlog"`
	Syncookies  string        `json:"syncookies"`
	AcceptDelay time.Duration `json:"accept_delay_ns"`
	BaseBacklog int           `json:"baseline_backlog"`
	HARate      int           `json:"haproxy_rate"`    // sessions/s, all processes
	HABacklog   int           `json:"haproxy_backlog"` // all processes
	SGRate      float64       `json:"stormgate_rate"`
	SGBurst     int           `json:"stormgate_burst"`
	Rows        []StormRow    `json:"rows"`
}

// StormRow is one target.
type StormRow struct {
	Target  string `json:"target"`
	Command string `json:"command"`

	Opened, ConnectFailures, HBAnswered, HBFailed uint64
	ListenOverflows, ListenDrops, SynRetrans      uint64
	ReqQFullDoCookies, ReqQFullDrop               uint64
	FirstP50ms, FirstP99ms, FirstMaxMs            float64
	ConnectP99ms                                  float64
	AnswerP99ms                                   float64        `json:"answer_p99_ms"` // from established to the answer
	OpeningMs                                     float64        `json:"opening_ms"`    // issuing every connect(2)
	Failures                                      map[string]int `json:"failures,omitempty"`
	Error                                         string         `json:"error,omitempty"`
}

func (r *Results) save(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// loadResults reads a results.json for `suite render`. The report reads each scenario's settings
// from Options alone; a scenario copies them into its result as it starts, and for a results.json
// written before it did (or before Options held a setting) the copy in the result is what the
// scenario ran with, so it is put back into Options here, once.
func loadResults(path string) (*Results, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Results
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, err
	}
	r.settingsFromResults()
	return &r, nil
}

// settingsFromResults puts the settings the scenarios' results recorded into Options.
func (r *Results) settingsFromResults() {
	o := &r.Options
	if x := r.Idle; x != nil {
		o.IdleConns = x.Conns
	}
	if x := r.Latency; x != nil {
		o.LatConns, o.LatRate = x.Conns, x.Rate
	}
	if x := r.Throughput; x != nil {
		o.TPStep, o.TPWarmup, o.TPMaxP99 = x.StepTime, x.Warmup, time.Duration(math.Round(x.MaxP99ms*float64(time.Millisecond)))
	}
	if x := r.Restart; x != nil {
		o.RestartConns, o.RestartRate = x.Conns, x.Rate
	}
	if x := r.Storm; x != nil {
		o.StormConns, o.StormBacklog, o.StormSomaxconn, o.StormAcceptDelay = x.Conns, x.BaseBacklog, x.Somaxconn, x.AcceptDelay
	}
	if x := r.Heartbeat; x != nil {
		o.HBConns, o.HBPairs, o.HBSettle = x.Conns, x.Pairs, x.Settle
	}
	if x := r.Quiet; x != nil {
		o.QuietWindow, o.QuietSettle, o.QuietProfile = x.Window, x.Settle, x.ProfWindow
	}
	if x := r.Forward; x != nil {
		o.FwdLoads, o.FwdLead, o.FwdWindow, o.FwdWindows, o.FwdProfWindow = x.Loads, x.Lead, x.Window, x.Windows, x.ProfWindow
		o.FwdPairWindows = x.PairWindows
	}
}
