package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/stormgate/stormgate/settings"
	"github.com/stormgate/stormgate/xds/controlplane/cpfile"
	"github.com/stormgate/stormgate/xds/fleet"
)

type fleetOptions struct {
	nodes, workers    int
	controlPlanes     string
	config            string
	metrics           string
	spawn             int
	sidecar           string
	logDir            string
	failover          bool
	changes           int
	namespaces, apps  int
	connectRate       float64
	phaseTimeout      time.Duration
	idleWindow        time.Duration
	jsonPath          string
	quiet             bool
	backoffBase, bMax time.Duration
}

func newXDSFleetCmd() *cobra.Command {
	var o fleetOptions
	cmd := &cobra.Command{
		Use:   "xds-fleet --nodes N (--spawn K | --control-plane ADDR[,ADDR] --config FILE)",
		Short: "Run N real Stormgate xDS clients against the control plane and measure push convergence",
		Long: `xds-fleet measures the control plane at fleet scale. It runs N Stormgate xDS clients (the
xds package's own ADS client, as 'sidecar run --xds' uses it, each with its own gRPC connection),
spread over worker processes (one process holds up to 2,500 here, far below the 20,000-descriptor
limit), and writes changes to the control-plane file to time them.

Node i reports labels app=app-<i mod apps>, pod-template-hash=5d8f7c9b4, namespace
ns-<(i div apps) mod namespaces> and id fleet-<i>.<namespace>: namespaces x apps distinct classes. The tool owns the control-plane file: it writes a
default, one namespace entry and one selector per app (match: {labels: {app: app-K}}), and then:

  connect    start every client (--connect-rate per second) and wait until each has applied the
             settings the file resolves to for it
  idle       sample the control plane's CPU for --idle-window with every node connected
  change     --changes times: change the default (affects every node); time from the file write
             until each node applied and ACKed the new version (p50/p99/max; this includes the
             control plane's 500 ms file poll); the control plane's pushes, CPU and NACKs
  selector   change the settings of one selector (app-3): the same figures, and every other
             node must receive nothing
  failover   (--failover, two or more spawned replicas) SIGKILL the replica the most nodes are on;
             time until each of its nodes is connected to another replica; no node may apply
             anything meanwhile; then one more change, ACKed by all

Control planes: --spawn K starts K 'sidecar control-plane' replicas (--sidecar PATH) on loopback,
reading one file in a temporary directory, and reads their CPU and RSS from their /metrics.
Or point it at running ones: --control-plane ADDR[,ADDR] --config FILE (the file they read: the
tool overwrites it) and optionally --metrics ADDR[,ADDR] (their --metrics, for CPU, RSS, pushes).

Exit status 1 when a phase times out (--phase-timeout), any client NACKs, a node the change does
not affect receives a push, or a node's settings change during the failover.`,
		Example: `  # 5,000 nodes against one control plane started by the tool
  stormbench xds-fleet --nodes 5000 --spawn 1 --sidecar bin/sidecar

  # two replicas, 2,000 nodes, one replica killed
  stormbench xds-fleet --nodes 2000 --spawn 2 --sidecar bin/sidecar --failover --json fleet.json

  # against a control plane you run (the tool rewrites cp.yaml)
  sidecar control-plane --listen 127.0.0.1:18000 --config /tmp/cp.yaml --metrics 127.0.0.1:18001 &
  stormbench xds-fleet --nodes 1000 --control-plane 127.0.0.1:18000 --config /tmp/cp.yaml --metrics 127.0.0.1:18001`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runXDSFleet(cmd.Context(), o, cmd.ErrOrStderr(), cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.nodes, "nodes", 1000, "xDS clients (nodes)")
	f.IntVar(&o.workers, "workers", 0, "worker processes; 0 = one per 2,500 nodes")
	f.StringVar(&o.controlPlanes, "control-plane", "", "addresses of running control planes, comma-separated (every client gets all of them, as --xds does)")
	f.StringVar(&o.config, "config", "", "with --control-plane: the control-plane file they read (overwritten)")
	f.StringVar(&o.metrics, "metrics", "", "with --control-plane: their --metrics addresses, comma-separated")
	f.IntVar(&o.spawn, "spawn", 0, "start this many control-plane replicas (needs --sidecar)")
	f.StringVar(&o.sidecar, "sidecar", "", "sidecar binary for --spawn (default: 'sidecar' next to this binary, then $PATH)")
	f.StringVar(&o.logDir, "log-dir", "", "with --spawn: directory for the replicas' logs and file (default: a temporary one, removed)")
	f.BoolVar(&o.failover, "failover", false, "kill one spawned replica and measure the failover (needs --spawn 2 or more)")
	f.IntVar(&o.changes, "changes", 3, "changes affecting every node to time")
	f.IntVar(&o.namespaces, "namespaces", 5, "namespaces the nodes are spread over")
	f.IntVar(&o.apps, "apps", 10, "app labels (and selectors) the nodes are spread over")
	f.Float64Var(&o.connectRate, "connect-rate", 2000, "clients started per second in total; 0 = all at once")
	f.DurationVar(&o.phaseTimeout, "phase-timeout", 60*time.Second, "bound of each phase")
	f.DurationVar(&o.idleWindow, "idle-window", 5*time.Second, "control plane CPU sampled with every node connected and nothing changing")
	f.DurationVar(&o.backoffBase, "backoff-base", 0, "clients' reconnect backoff base (0 = the sidecar default, 250ms)")
	f.DurationVar(&o.bMax, "backoff-max", 0, "clients' reconnect backoff cap (0 = the sidecar default, 10s)")
	f.StringVar(&o.jsonPath, "json", "", "write the result as JSON to this file (- = stdout)")
	f.BoolVar(&o.quiet, "quiet", false, "no progress lines")
	_ = cmd.MarkFlagRequired("nodes")
	return cmd
}

func runXDSFleet(ctx context.Context, o fleetOptions, stderr, stdout io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.nodes < 1 || o.namespaces < 1 || o.apps < 4 {
		return errors.New("--nodes must be at least 1, --namespaces at least 1, --apps at least 4")
	}
	if (o.spawn > 0) == (o.controlPlanes != "") {
		return errors.New("give either --spawn K or --control-plane ADDR[,ADDR] --config FILE")
	}
	if o.controlPlanes != "" && o.config == "" {
		return errors.New("--control-plane needs --config: the file those control planes read (the tool writes it)")
	}
	if o.failover && o.spawn < 2 {
		return errors.New("--failover needs --spawn 2 or more (the tool kills one replica it started)")
	}
	if o.workers <= 0 {
		o.workers = (o.nodes + 2499) / 2500
	}
	o.workers = min(o.workers, o.nodes)

	r := &fleetRun{o: o, log: stderr, state: make([]fleetNodeState, o.nodes)}
	if !o.quiet {
		r.progress = stderr
	}
	defer r.cleanup()
	res, err := r.run(ctx)
	if res != nil {
		printFleet(stdout, res)
		if o.jsonPath != "" {
			b, jerr := json.MarshalIndent(res, "", "  ")
			if jerr == nil {
				if o.jsonPath == "-" {
					_, jerr = stdout.Write(append(b, '\n'))
				} else {
					jerr = os.WriteFile(o.jsonPath, append(b, '\n'), 0o644)
				}
			}
			if err == nil {
				err = jerr
			}
		}
		if err == nil && len(res.Failures) > 0 {
			err = fmt.Errorf("%d check(s) failed: %s", len(res.Failures), strings.Join(res.Failures, "; "))
		}
	}
	return err
}

// fleetNodeState is the parent's view of one node, from its worker's events.
type fleetNodeState struct {
	up        bool
	server    string
	upAt      int64
	version   string
	appliedAt int64
	applies   int
	nacks     int
}

// fleetRun is one run: its control planes, its workers and the nodes' state.
type fleetRun struct {
	o        fleetOptions
	log      io.Writer
	progress io.Writer
	cps      []*fleetCP
	config   string // the control-plane file
	tmpDir   string
	workers  []*exec.Cmd
	stdins   []io.WriteCloser
	readers  sync.WaitGroup

	gen      fleetGen
	expected []string // version each node should run under the file as last written

	mu      sync.Mutex
	state   []fleetNodeState
	started int
	werr    []string
}

func (r *fleetRun) logf(format string, args ...any) {
	if r.progress != nil {
		fmt.Fprintf(r.progress, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
	}
}

func (r *fleetRun) run(ctx context.Context) (*fleet.Result, error) {
	o := r.o
	res := &fleet.Result{Nodes: o.nodes, Workers: o.workers, Namespaces: o.namespaces, Apps: o.apps}
	if err := r.startControlPlanes(ctx); err != nil {
		return nil, err
	}
	res.Replicas = len(r.cps)
	before := r.scrape(ctx)
	res.RSSBeforeMiB = before.sum("process_resident_memory_bytes") / (1 << 20)

	r.logf("starting %d clients in %d worker process(es) against %s", o.nodes, o.workers, strings.Join(r.addresses(), ","))
	t0 := time.Now()
	if err := r.startWorkers(); err != nil {
		return nil, err
	}
	if !r.waitExpected(ctx, nil, o.phaseTimeout+time.Duration(float64(o.nodes)/max(o.connectRate, 1)*float64(time.Second))) {
		res.Failures = append(res.Failures, "connect: not every node applied its first settings in time ("+r.lagging(nil)+")")
		return res, nil
	}
	res.ConnectS = time.Duration(r.lastApply(nil) - t0.UnixNano()).Seconds()
	r.logf("every node applied its first settings %.2fs after the first client started", res.ConnectS)
	r.settle(ctx, o.nodes, before)
	after := r.scrape(ctx)
	res.RSSAfterMiB = after.sum("process_resident_memory_bytes") / (1 << 20)
	res.RSSPerNodeKiB = (after.sum("process_resident_memory_bytes") - before.sum("process_resident_memory_bytes")) / 1024 / float64(o.nodes)
	res.HeapPerNodeKB = (after.sum("go_memstats_heap_inuse_bytes") - before.sum("go_memstats_heap_inuse_bytes")) / 1024 / float64(o.nodes)
	res.Versions = after.sum("stormgate_control_plane_settings_versions")
	if o.idleWindow > 0 {
		a := r.scrape(ctx)
		sleepCtx(ctx, o.idleWindow)
		b := r.scrape(ctx)
		res.IdleCPU = (b.sum("process_cpu_seconds_total") - a.sum("process_cpu_seconds_total")) / o.idleWindow.Seconds()
	}

	for i := range o.changes {
		c := r.change(ctx, fmt.Sprintf("all nodes #%d (default keepalive.upstream_interval)", i+1), func(g *fleetGen) { g.def++ })
		res.Changes = append(res.Changes, c)
		res.Failures = append(res.Failures, c.Failures()...)
	}
	c := r.change(ctx, "one selector (app-3: admission.accept_rate)", func(g *fleetGen) { g.sel++ })
	res.Changes = append(res.Changes, c)
	res.Failures = append(res.Failures, c.Failures()...)

	if o.failover {
		fo := r.failover(ctx)
		res.Failover = fo
		if !fo.AllConnected {
			res.Failures = append(res.Failures, "failover: not every node connected to another replica within --phase-timeout")
		}
		if fo.SettingsChanged > 0 {
			res.Failures = append(res.Failures, fmt.Sprintf("failover: %d nodes applied settings while their control plane was killed", fo.SettingsChanged))
		}
		res.Failures = append(res.Failures, fo.After.Failures()...)
	}
	r.mu.Lock()
	res.Failures = append(res.Failures, r.werr...)
	r.mu.Unlock()
	return res, ctx.Err()
}

// fleetGen is the state of the file the tool writes: each counter moves
// one level's setting.
type fleetGen struct{ def, sel int }

func (g fleetGen) yaml(namespaces, apps int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# written by stormbench xds-fleet\ndefault:\n  keepalive: { upstream_interval: %ds }\n  hold: { timeout: 3s }\n", 20+g.def%40)
	fmt.Fprintf(&b, "namespaces:\n  ns-0:\n    hold: { timeout: 2s }\nselectors:\n")
	for a := range apps {
		rate := 3000 + a
		if a == 3 {
			rate += 100 * g.sel
		}
		fmt.Fprintf(&b, "  - name: app-%d\n    match: { labels: { app: app-%d } }\n    settings:\n      admission: { accept_rate: %d }\n", a, a, rate)
	}
	_ = namespaces
	return b.String()
}

// write writes the file for g and returns the version each node should
// then run.
func (r *fleetRun) write(g fleetGen) ([]string, time.Time, error) {
	text := g.yaml(r.o.namespaces, r.o.apps)
	f, err := cpfile.Parse([]byte(text))
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("the generated control-plane file is invalid: %w", err)
	}
	exp := make([]string, r.o.nodes)
	byClass := map[string]string{}
	for i := range exp {
		n := fleetNode(i, r.o.namespaces, r.o.apps)
		key := n.Namespace + "|" + n.Labels["app"]
		v, ok := byClass[key]
		if !ok {
			v = settings.Version(f.Resolve(n).Overlay)
			byClass[key] = v
		}
		exp[i] = v
	}
	tmp := filepath.Join(filepath.Dir(r.config), "."+filepath.Base(r.config)+".tmp")
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		return nil, time.Time{}, err
	}
	at := time.Now()
	return exp, at, os.Rename(tmp, r.config) // atomic, as editors and ConfigMap updates do
}

// change writes one change and measures it.
func (r *fleetRun) change(ctx context.Context, name string, mutate func(*fleetGen)) fleet.Change {
	c := fleet.Change{Name: name}
	r.mu.Lock()
	applies := make([]int, len(r.state))
	nacks := 0
	for i, s := range r.state {
		applies[i] = s.applies
		nacks += s.nacks
	}
	r.mu.Unlock()
	before := r.scrape(ctx)
	old := r.expected
	mutate(&r.gen)
	exp, at, err := r.write(r.gen)
	if err != nil {
		r.mu.Lock()
		r.werr = append(r.werr, err.Error())
		r.mu.Unlock()
		c.TimedOut = true
		return c
	}
	r.expected = exp
	c.WrittenAtNs = at.UnixNano()
	affected := map[int]bool{}
	for i := range exp {
		if exp[i] != old[i] {
			affected[i] = true
		}
	}
	c.Affected, c.Unaffected = len(affected), r.o.nodes-len(affected)
	r.logf("change %q written: %d nodes affected", name, c.Affected)
	c.TimedOut = !r.waitExpected(ctx, affected, r.o.phaseTimeout)
	r.settle(ctx, c.Affected, before)
	afterM := r.scrape(ctx)

	var lat []time.Duration
	r.mu.Lock()
	for i, s := range r.state {
		nacks -= s.nacks
		if !affected[i] {
			if s.applies != applies[i] {
				c.UnaffApply++
			}
			continue
		}
		if s.version == exp[i] {
			c.Acked++
			lat = append(lat, time.Duration(s.appliedAt-c.WrittenAtNs))
		}
	}
	r.mu.Unlock()
	// Counted on both sides (the clients' NACK events, the control planes'
	// counter): either one seeing a NACK is a NACK.
	c.NACKs = max(-nacks, int(afterM.sum("stormgate_control_plane_nacks_total")-before.sum("stormgate_control_plane_nacks_total")))
	c.P50ms, c.P99ms, c.MaxMs = quantileMs(lat, 0.5), quantileMs(lat, 0.99), quantileMs(lat, 1)
	c.Pushes = afterM.sum("stormgate_control_plane_pushes_total") - before.sum("stormgate_control_plane_pushes_total")
	c.CPUs = afterM.sum("process_cpu_seconds_total") - before.sum("process_cpu_seconds_total")
	if c.Affected > 0 {
		c.CPUPerNode = c.CPUs / float64(c.Affected) * 1e6
	}
	c.CPP99ms = 1000 * histogramQuantile(0.99, before.buckets("stormgate_control_plane_ack_duration_seconds"),
		afterM.buckets("stormgate_control_plane_ack_duration_seconds"))
	r.logf("change %q: %d/%d ACKed, p50 %.0f ms p99 %.0f ms max %.0f ms; pushes %.0f; CPU %.3f s; NACKs %d; unaffected applied %d",
		name, c.Acked, c.Affected, c.P50ms, c.P99ms, c.MaxMs, c.Pushes, c.CPUs, c.NACKs, c.UnaffApply)
	return c
}

// settle waits (bounded) until the control planes have counted the ACKs of
// n pushes since before, so their CPU figure includes the ACK handling.
func (r *fleetRun) settle(ctx context.Context, n int, before fleetScrape) {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		m := r.scrape(ctx)
		if len(m) == 0 || m.sum("stormgate_control_plane_acks_total")-before.sum("stormgate_control_plane_acks_total") >= float64(n) {
			return
		}
		sleepCtx(ctx, 50*time.Millisecond)
	}
}

// failover kills the replica most nodes are connected to and measures.
func (r *fleetRun) failover(ctx context.Context) *fleet.Failover {
	fo := &fleet.Failover{}
	count := map[string]int{}
	r.mu.Lock()
	for _, s := range r.state {
		if s.up {
			count[s.server]++
		}
	}
	r.mu.Unlock()
	var victim *fleetCP
	for _, cp := range r.cps {
		if victim == nil || count[cp.addr] > count[victim.addr] {
			victim = cp
		}
	}
	fo.Killed, fo.NodesOnKilled = victim.addr, count[victim.addr]
	r.mu.Lock()
	applies := make([]int, len(r.state))
	onVictim := map[int]bool{}
	for i, s := range r.state {
		applies[i] = s.applies
		if s.up && s.server == victim.addr {
			onVictim[i] = true
		}
	}
	r.mu.Unlock()
	r.logf("failover: SIGKILL the replica on %s (%d nodes connected to it)", victim.addr, fo.NodesOnKilled)
	killAt := time.Now()
	victim.kill()
	deadline := killAt.Add(r.o.phaseTimeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		all := true
		r.mu.Lock()
		for _, s := range r.state {
			if !s.up || s.server == victim.addr {
				all = false
				break
			}
		}
		r.mu.Unlock()
		if all {
			fo.AllConnected = true
			break
		}
		sleepCtx(ctx, 10*time.Millisecond)
	}
	var lat []time.Duration
	r.mu.Lock()
	for i, s := range r.state {
		if onVictim[i] && s.up && s.upAt >= killAt.UnixNano() {
			lat = append(lat, time.Duration(s.upAt-killAt.UnixNano()))
		}
		if s.applies != applies[i] {
			fo.SettingsChanged++
		}
	}
	r.mu.Unlock()
	fo.P50ms, fo.P99ms, fo.MaxMs = quantileMs(lat, 0.5), quantileMs(lat, 0.99), quantileMs(lat, 1)
	r.logf("failover: %d of %d nodes reconnected elsewhere, p50 %.0f ms p99 %.0f ms max %.0f ms after the kill; %d applied settings meanwhile",
		len(lat), fo.NodesOnKilled, fo.P50ms, fo.P99ms, fo.MaxMs, fo.SettingsChanged)
	fo.After = r.change(ctx, "all nodes after the failover", func(g *fleetGen) { g.def++ })
	return fo
}

// waitExpected waits until every node in set (nil = all) runs its expected
// version; false on timeout.
func (r *fleetRun) waitExpected(ctx context.Context, set map[int]bool, bound time.Duration) bool {
	deadline := time.Now().Add(bound)
	lastLog := time.Now()
	for ctx.Err() == nil {
		done, total := 0, 0
		r.mu.Lock()
		for i, s := range r.state {
			if set != nil && !set[i] {
				continue
			}
			total++
			if s.version == r.expected[i] {
				done++
			}
		}
		r.mu.Unlock()
		if done == total {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		if time.Since(lastLog) > time.Second {
			r.logf("  %d of %d nodes on the expected version", done, total)
			lastLog = time.Now()
		}
		sleepCtx(ctx, 5*time.Millisecond)
	}
	return false
}

func (r *fleetRun) lastApply(set map[int]bool) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var last int64
	for i, s := range r.state {
		if set == nil || set[i] {
			last = max(last, s.appliedAt)
		}
	}
	return last
}

// lagging describes the nodes not on their expected version, for errors.
func (r *fleetRun) lagging(set map[int]bool) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	n, up := 0, 0
	first := -1
	for i, s := range r.state {
		if (set == nil || set[i]) && s.version != r.expected[i] {
			n++
			if s.up {
				up++
			}
			if first < 0 {
				first = i
			}
		}
	}
	if n == 0 {
		return "none lagging"
	}
	return fmt.Sprintf("%d nodes lagging, %d of them connected; first: node %d", n, up, first)
}

func (r *fleetRun) addresses() []string {
	out := make([]string, len(r.cps))
	for i, cp := range r.cps {
		out[i] = cp.addr
	}
	return out
}

// startWorkers starts the worker processes and their event readers.
func (r *fleetRun) startWorkers() error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	per := (r.o.nodes + r.o.workers - 1) / r.o.workers
	for w := range r.o.workers {
		from, to := w*per, min((w+1)*per, r.o.nodes)
		if from >= to {
			break
		}
		cfg := fleetWorkerConfig{Addresses: r.addresses(), From: from, To: to, Namespaces: r.o.namespaces, Apps: r.o.apps,
			ConnectRate: r.o.connectRate / float64(r.o.workers), BackoffBase: r.o.backoffBase, BackoffMax: r.o.bMax}
		cmd := exec.Command(exe, "xds-fleet-worker")
		cmd.Stderr = r.log
		stdin, stdout, err := startChild(cmd, w)
		if err != nil {
			return err
		}
		r.workers = append(r.workers, cmd)
		r.stdins = append(r.stdins, stdin)
		r.readers.Go(func() { r.readWorker(w, stdout) })
		b, _ := json.Marshal(cfg)
		if _, err := stdin.Write(append(b, '\n')); err != nil {
			return fmt.Errorf("worker %d: %w", w, err)
		}
	}
	return nil
}

func (r *fleetRun) readWorker(w int, out io.Reader) {
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<16), 64<<20)
	for sc.Scan() {
		var m fleetWorkerMsg
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			r.mu.Lock()
			r.werr = append(r.werr, fmt.Sprintf("worker %d: bad message: %v", w, err))
			r.mu.Unlock()
			continue
		}
		r.mu.Lock()
		if m.T == "started" {
			r.started++
		}
		for _, e := range m.E {
			s := &r.state[e.Node]
			switch e.Kind {
			case "up":
				s.up, s.server, s.upAt = true, e.V, e.At
			case "down":
				s.up = false
			case "apply":
				s.version, s.appliedAt = e.V, e.At
				s.applies++
			case "nack":
				s.nacks++
			}
		}
		r.mu.Unlock()
	}
}

func (r *fleetRun) cleanup() {
	for _, in := range r.stdins {
		_ = in.Close()
	}
	for _, c := range r.workers {
		_ = c.Wait()
	}
	r.readers.Wait()
	for _, cp := range r.cps {
		cp.kill()
	}
	if r.tmpDir != "" {
		_ = os.RemoveAll(r.tmpDir)
	}
}

func quantileMs(ds []time.Duration, q float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(q*float64(len(s))+0.999999) - 1
	i = max(0, min(i, len(s)-1))
	return float64(s[i]) / 1e6
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func printFleet(w io.Writer, r *fleet.Result) {
	fmt.Fprintf(w, "xds-fleet: %d nodes (%d worker processes), %d control plane replica(s), %d namespaces x %d apps\n",
		r.Nodes, r.Workers, r.Replicas, r.Namespaces, r.Apps)
	fmt.Fprintf(w, "  connect: every node applied its first settings %.2f s after the first client started\n", r.ConnectS)
	fmt.Fprintf(w, "  control plane: RSS %.1f -> %.1f MiB (%.1f KiB per node; Go heap %.1f KiB per node); idle CPU %.2f%% of a core; %.0f settings versions shared\n",
		r.RSSBeforeMiB, r.RSSAfterMiB, r.RSSPerNodeKiB, r.HeapPerNodeKB, 100*r.IdleCPU, r.Versions)
	for _, c := range append(r.Changes, fleetAfter(r)...) {
		fmt.Fprintf(w, "  change %s: %d/%d affected nodes ACKed; p50 %.0f ms, p99 %.0f ms, max %.0f ms after the write "+
			"(control plane publish->ACK p99 <= %.0f ms); pushes %.0f; control plane CPU %.3f s (%.0f us per pushed node); NACKs %d; "+
			"unaffected %d of which applied %d\n",
			c.Name, c.Acked, c.Affected, c.P50ms, c.P99ms, c.MaxMs, c.CPP99ms, c.Pushes, c.CPUs, c.CPUPerNode, c.NACKs, c.Unaffected, c.UnaffApply)
	}
	if f := r.Failover; f != nil {
		fmt.Fprintf(w, "  failover: killed %s with %d nodes; reconnected elsewhere p50 %.0f ms, p99 %.0f ms, max %.0f ms; all connected: %v; nodes whose settings changed: %d\n",
			f.Killed, f.NodesOnKilled, f.P50ms, f.P99ms, f.MaxMs, f.AllConnected, f.SettingsChanged)
	}
	for _, f := range r.Failures {
		fmt.Fprintf(w, "  FAILED: %s\n", f)
	}
}

func fleetAfter(r *fleet.Result) []fleet.Change {
	if r.Failover == nil {
		return nil
	}
	return []fleet.Change{r.Failover.After}
}
