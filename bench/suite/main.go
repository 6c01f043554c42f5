package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Options are the run's knobs; the defaults are the published run (it fits in the 15-minute
// budget of `make bench` on 2 cores). Every scenario size is a flag.
type Options struct {
	Scenarios []string `json:"scenarios"`

	IdleConns    int           `json:"idle_conns"`
	IdleWindow1s time.Duration `json:"idle_window_1s_ns"`  // sampled window at the 1 s period
	IdleWindow30 time.Duration `json:"idle_window_30s_ns"` // sampled window at the 30 s period
	IdleSettle   time.Duration `json:"idle_settle_ns"`

	// ConnectRate paces the connect phase of the idle and latency runs (connections per second).
	ConnectRate float64 `json:"connect_rate"`

	LatConns    int           `json:"lat_conns"`
	LatRate     float64       `json:"lat_rate"`
	LatDuration time.Duration `json:"lat_duration_ns"`

	TPConns  []int         `json:"tp_conns"`
	TPStart  float64       `json:"tp_start"`
	TPMax    float64       `json:"tp_max"`
	TPStep   time.Duration `json:"tp_step_ns"`
	TPWarmup time.Duration `json:"tp_warmup_ns"`
	TPRefine int           `json:"tp_refine"`
	TPMaxP99 time.Duration `json:"tp_max_p99_ns"`

	RestartConns    int           `json:"restart_conns"`
	RestartRate     float64       `json:"restart_rate"`
	RestartDuration time.Duration `json:"restart_duration_ns"`
	RestartKill     time.Duration `json:"restart_kill_after_ns"`
	RestartDown     time.Duration `json:"restart_down_ns"`
	RestartTimeout  time.Duration `json:"restart_timeout_ns"`

	StormConns       int           `json:"storm_conns"`
	StormSomaxconn   int           `json:"storm_somaxconn"`
	StormBacklog     int           `json:"storm_baseline_backlog"`
	StormAcceptDelay time.Duration `json:"storm_accept_delay_ns"`

	MicroBenchtime string `json:"micro_benchtime"`

	QuietWindow  time.Duration `json:"quiet_window_ns"`  // quiet: sampled window with no consumer
	QuietSettle  time.Duration `json:"quiet_settle_ns"`  // quiet: wait after start before sampling
	QuietProfile time.Duration `json:"quiet_profile_ns"` // quiet: the profiled window after it

	HBConns  int           `json:"hb_conns"`     // heartbeat: consumers of each target
	HBWindow time.Duration `json:"hb_window_ns"` // heartbeat: one sampled window
	HBSettle time.Duration `json:"hb_settle_ns"` // heartbeat: after resuming a load tool
	HBPairs  int           `json:"hb_pairs"`     // heartbeat: unprofiled window pairs (median)

	FwdLoads   []FwdLoad     `json:"fwd_loads"`
	FwdLead    time.Duration `json:"fwd_lead_ns"`
	FwdWindow  time.Duration `json:"fwd_window_ns"`
	FwdWindows int           `json:"fwd_windows"`
	// FwdPairWindows: windows of the side-by-side measurement of the labels' cost (0: not run).
	FwdPairWindows int           `json:"fwd_pair_windows"`
	FwdProfWindow  time.Duration `json:"fwd_prof_window_ns"`
	FwdTargets     []string      `json:"fwd_targets,omitempty"` // forward: a subset of the targets (empty: all)

	IdleProfile time.Duration `json:"idle_profile_ns"` // idle: the proxies' profiled window at the 30 s period
	TPProfile   bool          `json:"tp_profile"`      // throughput: one profiled step at Stormgate's maximum

	GiveUpWorkers  int             `json:"giveup_workers"`     // give-up: dgconsumer workers
	GiveUpInterval time.Duration   `json:"giveup_interval_ns"` // give-up: pause between a worker's calls
	GiveUpDuration time.Duration   `json:"giveup_duration_ns"` // give-up: the consumer's run
	GiveUpKillAt   time.Duration   `json:"giveup_kill_at_ns"`  // give-up: SIGKILL of the provider, from the consumer's start
	GiveUpDown     time.Duration   `json:"giveup_down_ns"`     // give-up: the provider is started again this long after
	GiveUpTimeouts []time.Duration `json:"giveup_timeouts_ns"` // give-up: the consumers' per-call timeouts

	GreedyConns      int           `json:"greedy_conns"`      // greedy: well-behaved consumers
	GreedyRate       float64       `json:"greedy_rate"`       // greedy: their requests per second
	GreedyNeighbours int           `json:"greedy_neighbours"` // greedy: greedy consumers
	GreedySize       int           `json:"greedy_size"`       // greedy: their request bodies, bytes
	GreedyDuration   time.Duration `json:"greedy_duration_ns"`

	FleetNodes         int `json:"fleet_nodes"`
	FleetFailoverNodes int `json:"fleet_failover_nodes"`
	FleetChanges       int `json:"fleet_changes"`
}

// Bins are the executables the suite drives.
type Bins struct {
	sidecar, stormbench, dgprovider, dgconsumer, haproxy, self string
	sidecarBase                                                string // "" unless bench/run.sh built BENCH_BASE_REF
	baseRef                                                    string // what sidecarBase was built from
	hbfloor, fwdfloor, npfloor, npfwd                          string // bench/floor programs
}

// Suite runs scenarios and owns every process it starts.
type Suite struct {
	opt  Options
	bins Bins
	out  string // output directory: logs, per-run JSON, configs, results.json
	root string // repository root (micro-benchmarks run there)
	log  io.Writer

	perf bool // perf can sample and count here

	mu       sync.Mutex
	seq      int
	procs    []*Proc
	profiles []Profile
}

// addProfile records a captured profile; takeProfiles hands them to the results.
func (s *Suite) addProfile(p Profile) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.profiles = append(s.profiles, p)
}

func (s *Suite) takeProfiles() []Profile {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.profiles
	s.profiles = nil
	return out
}

func (s *Suite) logf(format string, args ...any) {
	fmt.Fprintf(s.log, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "run":
		err = cmdRun(os.Args[2:])
	case "render":
		err = cmdRender(os.Args[2:])
	case "baseline":
		err = cmdBaseline(os.Args[2:])
	case "storm-client":
		err = cmdStormClient(os.Args[2:])
	case "soak":
		err = cmdSoak(os.Args[2:])
	case "-h", "--help", "help":
		usage()
		return
	default:
		usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "suite:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprint(os.Stderr, `usage: suite run|render|soak|baseline|storm-client [flags]   (see bench/run.sh, bench/soak.sh; -h on each for flags)
  run       run the benchmark scenarios and regenerate the doc and plots
  soak      the long integrity run (make soak): provider restarts, checked bodies, leak check
  render    regenerate the doc and plots from a results.json
  baseline  the accept-storm baseline listener (backlog 50, slow accept)
  storm-client  open connections at once and time their first answers (accept storm)
`)
}

type docFlags struct{ doc, img, results string }

func (d *docFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&d.doc, "doc", "docs/benchmarks.md", "markdown file to write")
	fs.StringVar(&d.img, "img", "docs/img", "directory for the SVG plots")
	fs.StringVar(&d.results, "results", "", "results.json path (default OUT/results.json)")
}

func cmdRender(args []string) error {
	fs := flag.NewFlagSet("render", flag.ExitOnError)
	var d docFlags
	d.register(fs)
	out := fs.String("out", "bench/out", "output directory of the run")
	updateSection := fs.Bool("update-section", false, "rewrite only the sections of the scenarios in the results (fleet, restart, triple-*) in the existing doc, as run --update-section does")
	_ = fs.Parse(args)
	if d.results == "" {
		d.results = filepath.Join(*out, "results.json")
	}
	r, err := loadResults(d.results)
	if err != nil {
		return err
	}
	if *updateSection {
		return updateSections(r, d.doc, d.img)
	}
	return writeReport(r, d.doc, d.img)
}

func cmdRun(args []string) error {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	var d docFlags
	d.register(fs)
	var o Options
	var scen, tpConns, fwdLoads string
	bin := fs.String("bin", "bench/out/bin", "directory holding sidecar, stormbench and dgprovider")
	out := fs.String("out", "bench/out", "output directory: logs, per-run JSON, results.json")
	command := fs.String("command", "make bench", "the command line the doc says produced it")
	quick := fs.Bool("quick", false, "development: every scenario at about a tenth of its size")
	fs.StringVar(&scen, "scenarios", strings.Join(allScenarios, ","), "comma-separated subset of "+strings.Join(allScenarios, ","))
	fs.IntVar(&o.IdleConns, "idle-conns", 10000, "idle: consumer connections")
	fs.DurationVar(&o.IdleWindow1s, "idle-window", 10*time.Second, "idle: sampled window at the 1 s heartbeat period")
	fs.DurationVar(&o.IdleWindow30, "idle-window-30s", 20*time.Second, "idle: sampled window at the 30 s heartbeat period")
	fs.DurationVar(&o.IdleSettle, "idle-settle", 3*time.Second, "idle: wait after the connect phase before sampling")
	fs.Float64Var(&o.ConnectRate, "connect-rate", 2000, "idle and latency: connections opened per second")
	fs.IntVar(&o.LatConns, "lat-conns", 10000, "latency: consumer connections")
	fs.Float64Var(&o.LatRate, "lat-rate", 5000, "latency: requests per second")
	fs.DurationVar(&o.LatDuration, "lat-duration", 10*time.Second, "latency: request phase per method and target")
	fs.StringVar(&tpConns, "tp-conns", "1000,10000", "throughput: connection counts")
	fs.Float64Var(&o.TPStart, "tp-start", 5000, "throughput: first rate of the doubling ladder")
	fs.Float64Var(&o.TPMax, "tp-max", 320000, "throughput: highest rate tried")
	fs.DurationVar(&o.TPStep, "tp-step", 6*time.Second, "throughput: request phase of each step")
	fs.DurationVar(&o.TPWarmup, "tp-warmup", 2500*time.Millisecond, "throughput: start of each step not judged or sampled")
	fs.IntVar(&o.TPRefine, "tp-refine", 2, "throughput: bisection steps after the ladder's first failure")
	fs.DurationVar(&o.TPMaxP99, "tp-max-p99", 50*time.Millisecond, "throughput: a step fails when p99 exceeds this")
	fs.IntVar(&o.RestartConns, "restart-conns", 2000, "restart: consumer connections")
	fs.Float64Var(&o.RestartRate, "restart-rate", 2000, "restart: requests per second")
	fs.DurationVar(&o.RestartDuration, "restart-duration", 12*time.Second, "restart: request phase")
	fs.DurationVar(&o.RestartKill, "restart-kill-after", 3*time.Second, "restart: SIGKILL the provider this long into the request phase")
	fs.DurationVar(&o.RestartDown, "restart-down", time.Second, "restart: start the provider again this long after the kill")
	fs.DurationVar(&o.RestartTimeout, "restart-timeout", 3*time.Second, "restart: consumers' request timeout")
	fs.IntVar(&o.GiveUpWorkers, "giveup-workers", 8, "give-up: dgconsumer workers, each calling in a loop")
	fs.DurationVar(&o.GiveUpInterval, "giveup-interval", 10*time.Millisecond, "give-up: pause between a worker's calls")
	fs.DurationVar(&o.GiveUpDuration, "giveup-duration", 20*time.Second, "give-up: how long the consumer calls")
	fs.DurationVar(&o.GiveUpKillAt, "giveup-kill-at", 4*time.Second, "give-up: SIGKILL the provider this long after the consumer starts")
	fs.DurationVar(&o.GiveUpDown, "giveup-down", 8*time.Second, "give-up: start the provider again this long after the kill")
	giveUpTimeouts := fs.String("giveup-timeouts", "1s,10s", "give-up: the consumers' per-call timeouts, one run each")
	fs.IntVar(&o.GreedyConns, "greedy-conns", 200, "greedy: well-behaved consumer connections")
	fs.Float64Var(&o.GreedyRate, "greedy-rate", 1000, "greedy: well-behaved requests per second (1 KiB bodies)")
	fs.IntVar(&o.GreedyNeighbours, "greedy-neighbours", 20, "greedy: greedy consumers beside them")
	fs.IntVar(&o.GreedySize, "greedy-size", 256<<10, "greedy: the greedy consumers' request bodies, bytes")
	fs.DurationVar(&o.GreedyDuration, "greedy-duration", 10*time.Second, "greedy: the well-behaved load's request phase")
	fs.IntVar(&o.StormConns, "storm-conns", 10000, "storm: connections opened at once")
	fs.IntVar(&o.StormSomaxconn, "storm-somaxconn", 4096, "storm: net.core.somaxconn inside the namespace")
	fs.IntVar(&o.StormBacklog, "storm-baseline-backlog", 50, "storm: the baseline listener's backlog")
	fs.DurationVar(&o.StormAcceptDelay, "storm-accept-delay", time.Millisecond, "storm: the baseline listener's pause after each accept")
	fs.StringVar(&o.MicroBenchtime, "micro-benchtime", "300ms", "micro: go test -benchtime")
	fs.DurationVar(&o.QuietWindow, "quiet-window", 30*time.Second, "quiet: sampled window with no consumer connected")
	fs.DurationVar(&o.QuietSettle, "quiet-settle", 5*time.Second, "quiet: wait after the targets start before sampling")
	fs.DurationVar(&o.QuietProfile, "quiet-profile", 10*time.Second, "quiet: the profiled window after the sampled one (0: none)")
	fs.IntVar(&o.HBConns, "hb-conns", 10000, "heartbeat: consumers beating every second, per target")
	fs.DurationVar(&o.HBWindow, "hb-window", 6*time.Second, "heartbeat: one sampled window")
	fs.DurationVar(&o.HBSettle, "hb-settle", 2*time.Second, "heartbeat: wait after resuming a target's load tool")
	fs.IntVar(&o.HBPairs, "hb-pairs", 3, "heartbeat: alternating window pairs (the figure is their median)")
	fs.StringVar(&fwdLoads, "fwd-loads", "2000:4000,10000:5000", "forward: conns:req/s loads")
	fs.DurationVar(&o.FwdLead, "fwd-lead", 2*time.Second, "forward: start of each run of the load tool not sampled")
	fs.DurationVar(&o.FwdWindow, "fwd-window", 4*time.Second, "forward: one sampled window")
	fs.IntVar(&o.FwdWindows, "fwd-windows", 3, "forward: alternating rounds per load, one window of each target per round (the figure is their median)")
	fs.IntVar(&o.FwdPairWindows, "fwd-pair-windows", 20, "forward: windows of Stormgate with and without per-method metrics run side by side, same load at the same time (issue 25's figure is the median of their ratios; 0: not run)")
	fs.DurationVar(&o.FwdProfWindow, "fwd-profile", 4*time.Second, "forward: the profiled window of each target after the rounds")
	fwdOnly := fs.String("fwd-targets", "", "forward: run only these targets, comma-separated (e.g. stormgate,stormgate-base with BENCH_BASE_REF and more --fwd-windows, to compare two builds closely); the report then misses the others")
	fs.DurationVar(&o.IdleProfile, "idle-profile", 15*time.Second, "idle: the proxies' profiled window at the 30 s period (0: none)")
	fs.BoolVar(&o.TPProfile, "tp-profile", true, "throughput: one more step at Stormgate's maximum, profiled, at the largest connection count")
	fs.IntVar(&o.FleetNodes, "fleet-nodes", 5000, "fleet: xDS nodes against one control plane")
	fs.IntVar(&o.FleetFailoverNodes, "fleet-failover-nodes", 2000, "fleet: xDS nodes against two replicas, one killed")
	fs.IntVar(&o.FleetChanges, "fleet-changes", 3, "fleet: all-node changes timed")
	updateSection := fs.Bool("update-section", false, "rewrite only the sections of the scenarios run (fleet, restart, triple-*) in the existing doc, and keep the rest (make fleet)")
	_ = fs.Parse(args)

	o.Scenarios = strings.Split(scen, ",")
	run, err := selectScenarios(o.Scenarios)
	if err != nil {
		return err
	}
	for f := range strings.SplitSeq(tpConns, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("--tp-conns: bad count %q", f)
		}
		o.TPConns = append(o.TPConns, n)
	}
	for f := range strings.SplitSeq(fwdLoads, ",") {
		c, r, ok := strings.Cut(strings.TrimSpace(f), ":")
		n, err1 := strconv.Atoi(c)
		rate, err2 := strconv.ParseFloat(r, 64)
		if !ok || err1 != nil || err2 != nil || n < 1 || rate <= 0 {
			return fmt.Errorf("--fwd-loads: want conns:rate, got %q", f)
		}
		o.FwdLoads = append(o.FwdLoads, FwdLoad{Conns: n, Rate: rate})
	}
	if *fwdOnly != "" {
		known := append(slices.Clone(fwdTargets), stormgateBase)
		for f := range strings.SplitSeq(*fwdOnly, ",") {
			if tg := strings.TrimSpace(f); slices.Contains(known, tg) {
				o.FwdTargets = append(o.FwdTargets, tg)
			} else {
				return fmt.Errorf("--fwd-targets: %q is not one of %s", tg, strings.Join(known, ", "))
			}
		}
	}
	for f := range strings.SplitSeq(*giveUpTimeouts, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil || d <= 0 {
			return fmt.Errorf("--giveup-timeouts: bad duration %q", f)
		}
		o.GiveUpTimeouts = append(o.GiveUpTimeouts, d)
	}
	if *quick {
		o = quickOptions(o)
	}
	if d.results == "" {
		d.results = filepath.Join(*out, "results.json")
	}

	root, err := os.Getwd()
	if err != nil {
		return err
	}
	s := &Suite{opt: o, out: *out, root: root, log: os.Stderr}
	// This run's logs, per-run JSON and configs only (bin/ stays).
	for _, d := range []string{"logs", "runs"} {
		if err := os.RemoveAll(filepath.Join(s.out, d)); err != nil {
			return err
		}
	}
	if old, _ := filepath.Glob(filepath.Join(s.out, "haproxy-*.cfg")); len(old) > 0 {
		for _, f := range old {
			_ = os.Remove(f)
		}
	}
	if err := os.MkdirAll(filepath.Join(s.out, "logs"), 0o755); err != nil {
		return err
	}
	s.bins = Bins{
		sidecar:    filepath.Join(*bin, "sidecar"),
		stormbench: filepath.Join(*bin, "stormbench"),
		dgprovider: filepath.Join(*bin, "dgprovider"),
		dgconsumer: filepath.Join(*bin, "dgconsumer"),
		hbfloor:    filepath.Join(*bin, "hbfloor"),
		fwdfloor:   filepath.Join(*bin, "fwdfloor"),
		npfloor:    filepath.Join(*bin, "npfloor"),
		npfwd:      filepath.Join(*bin, "npfwd"),
	}
	if _, err := os.Stat(filepath.Join(*bin, "sidecar-base")); err == nil {
		s.bins.sidecarBase = filepath.Join(*bin, "sidecar-base")
		ref, _ := os.ReadFile(filepath.Join(*bin, "sidecar-base.ref"))
		s.bins.baseRef = strings.TrimSpace(string(ref))
	}
	if s.bins.self, err = os.Executable(); err != nil {
		return err
	}
	s.bins.haproxy, _ = exec.LookPath("haproxy") // "" when missing; the doc names its version when found
	need := []string{s.bins.sidecar, s.bins.stormbench}
	for _, sc := range run {
		if sc.haproxy && s.bins.haproxy == "" {
			return errors.New("haproxy not found (bench/run.sh installs it with apt-get)")
		}
		if sc.dubboGo {
			need = append(need, s.bins.dgprovider, s.bins.dgconsumer)
		}
		if sc.floor {
			need = append(need, s.bins.hbfloor, s.bins.fwdfloor, s.bins.npfloor, s.bins.npfwd)
		}
	}
	slices.Sort(need)
	if err := requireBins("bench/run.sh", slices.Compact(need)...); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	defer s.cleanup()

	res := &Results{Started: time.Now(), Command: *command, Options: o, Machine: machineInfo(ctx, s)}
	s.perf = perfWorks(ctx)
	res.Machine.Perf = s.perf
	if !s.perf {
		s.logf("perf cannot sample here (perf stat -e task-clock,raw_syscalls:sys_enter failed): profiles from Go's profiler only")
	}
	start := time.Now()
	for _, sc := range run {
		if ctx.Err() != nil {
			break
		}
		t0, m0 := time.Now(), sampleMachine()
		s.logf("== %s", sc.name)
		err := sc.run(s, ctx, res)
		busy, steal := sampleMachine().cores(m0)
		res.Scenarios = append(res.Scenarios, ScenarioCPU{Name: sc.name, Wall: time.Since(t0), Busy: busy, Steal: steal})
		s.cleanup()
		res.Profiles = append(res.Profiles, s.takeProfiles()...)
		if err != nil {
			s.logf("!! %s: %v", sc.name, err)
			res.Failures = append(res.Failures, fmt.Sprintf("%s: %v", sc.name, err))
		}
		s.logf("== %s done in %v (machine %.2f cores busy, %.2f stolen by the hypervisor)", sc.name, time.Since(t0).Round(time.Second), busy, steal)
		// A partial results.json after every scenario: a killed run still leaves what it measured.
		res.Wall = time.Since(start)
		res.Machine.LoadAvgPost = loadAvg()
		if err := res.save(d.results); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return fmt.Errorf("interrupted; partial results in %s", d.results)
	}
	res.Wall = time.Since(start)
	if err := res.save(d.results); err != nil {
		return err
	}
	if *updateSection {
		if err := updateSections(res, d.doc, d.img); err != nil {
			return err
		}
		s.logf("updated the %v section(s) of %s; results in %s", o.Scenarios, d.doc, d.results)
		return nil
	}
	if err := writeReport(res, d.doc, d.img); err != nil {
		return err
	}
	s.logf("wrote %s, %s/*.svg and %s in %v", d.doc, d.img, d.results, res.Wall.Round(time.Second))
	return nil
}

// requireBins fails when a binary is missing, naming the script that builds it.
func requireBins(script string, paths ...string) error {
	for _, b := range paths {
		if _, err := os.Stat(b); err != nil {
			return fmt.Errorf("missing binary: %w (%s builds them)", err, script)
		}
	}
	return nil
}

// quickOptions shrinks every scenario for development runs.
func quickOptions(o Options) Options {
	o.IdleConns, o.IdleWindow1s, o.IdleWindow30, o.IdleSettle = 1000, 3*time.Second, 3*time.Second, time.Second
	o.LatConns, o.LatRate, o.LatDuration = 1000, 1000, 3*time.Second
	o.TPConns, o.TPStart, o.TPMax, o.TPStep, o.TPWarmup, o.TPRefine = []int{100, 1000}, 2000, 16000, 3*time.Second, time.Second, 1
	o.RestartConns, o.RestartRate, o.RestartDuration = 200, 500, 8*time.Second
	o.StormConns = 2000
	o.GiveUpWorkers, o.GiveUpDuration, o.GiveUpKillAt, o.GiveUpDown = 4, 12*time.Second, 3*time.Second, 4*time.Second
	o.GreedyConns, o.GreedyRate, o.GreedyNeighbours, o.GreedyDuration = 50, 250, 5, 4*time.Second
	o.MicroBenchtime = "50ms"
	o.FleetNodes, o.FleetFailoverNodes, o.FleetChanges = 500, 200, 1
	o.QuietWindow, o.QuietSettle, o.QuietProfile = 5*time.Second, 2*time.Second, 3*time.Second
	o.HBConns, o.HBWindow, o.HBSettle, o.HBPairs = 1000, 3*time.Second, 1500*time.Millisecond, 2
	o.FwdLoads, o.FwdWindow, o.FwdWindows, o.FwdProfWindow = []FwdLoad{{200, 400}, {1000, 1000}}, 2*time.Second, 2, 2*time.Second
	o.FwdPairWindows = 2
	o.IdleProfile = 3 * time.Second
	return o
}
