package main

// `suite soak`: the long integrity run behind `make soak` (bench/soak.sh). Real binaries as
// separate processes: the echo provider (`stormbench echo-provider`, killed and restarted on
// schedule, reading slowly at random), `sidecar run`, and the load tool (`stormbench load`
// with checked bodies, spread over worker processes). It checks the integrity invariant
// request by request (the load tool compares every answer with its own body; the provider
// records any malformed frame, repeated upstream id or request delivered twice) and that the
// sidecar's open fds, goroutines and heap at the end are within a tolerance of their values
// after warm-up.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/stormgate/stormgate/loadgen"
	"github.com/stormgate/stormgate/peer"
)

// SoakOptions are the soak's knobs; the defaults are the published run.
type SoakOptions struct {
	Protocol     string        `json:"protocol,omitempty"` // "" or protoDubbo: Dubbo 2; protoTriple: h2c consumers and provider
	Duration     time.Duration `json:"duration_ns"`        // request phase
	Conns        int           `json:"conns"`
	Workers      int           `json:"workers"`
	ConnectRate  float64       `json:"connect_rate"`
	Rate         float64       `json:"rate"`
	Heartbeat    time.Duration `json:"heartbeat_ns"`
	BodyMin      int           `json:"body_min"`
	BodyMax      int           `json:"body_max"`
	OneWay       float64       `json:"one_way"`
	Timeout      time.Duration `json:"timeout_ns"`
	RestartEvery time.Duration `json:"restart_every_ns"`
	Down         time.Duration `json:"down_ns"`
	Kill         string        `json:"kill"` // how the provider's kills end its connections: abort, close or alternate
	Spell        time.Duration `json:"spell_ns"`
	SlowChance   float64       `json:"slow_chance"`
	StallChance  float64       `json:"stall_chance"`
	Warmup       time.Duration `json:"warmup_ns"`
	SampleEvery  time.Duration `json:"sample_every_ns"`
	Calm         time.Duration `json:"calm_ns"` // the provider reads normally this long before each leak sample
	Tolerance    float64       `json:"tolerance"`
	Seed         uint64        `json:"seed"`
}

// SoakSample is one reading of the sidecar, at a time since the request phase started.
type SoakSample struct {
	At         time.Duration `json:"at_ns"`
	Forced     bool          `json:"forced_gc"`                // taken right after a forced GC (the warm-up and end samples)
	Quiet      bool          `json:"quiet,omitempty"`          // the warm-up and end samples: taken with the load paused and nothing in flight
	QuietAfter time.Duration `json:"quiet_after_ns,omitempty"` // how long after the pause nothing was in flight
	Goroutines float64       `json:"go_goroutines"`
	HeapLive   float64       `json:"go_gc_heap_live_bytes"`        // what the last GC found live: the leak check
	HeapInuse  float64       `json:"go_memstats_heap_inuse_bytes"` // for information: also counts what was allocated since
	HeapAlloc  float64       `json:"go_memstats_heap_alloc_bytes"` // for information: likewise
	OpenFDs    float64       `json:"process_open_fds"`
	RSSKiB     int64         `json:"rss_kib"`
	Downstream float64       `json:"downstream_connections"`
	Upstream   float64       `json:"upstream_connections"`
	Held       float64       `json:"held_requests"`
	Requests   float64       `json:"requests_total"`
}

// SoakCheck is one pass/fail line of the verdict.
type SoakCheck struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// SoakResult is everything one soak measured (bench/out/soak/soak.json).
type SoakResult struct {
	Started      time.Time          `json:"started"`
	Command      string             `json:"command"`
	LoadCommand  string             `json:"load_command"`
	Options      SoakOptions        `json:"options"`
	Machine      Machine            `json:"machine"`
	Wall         time.Duration      `json:"wall_ns"`
	Load         *loadgen.Result    `json:"load"`
	Provider     *peer.EchoStats    `json:"provider"`
	ProviderH2   *peer.TripleStats  `json:"provider_triple,omitempty"` // the Triple echo provider's, with --protocol triple
	Violations   []peer.Violation   `json:"violations"`
	Restarts     int                `json:"restarts"` // provider kills the driver ordered
	LocalReplies map[string]float64 `json:"local_replies"`
	Warm         *SoakSample        `json:"warm"` // after warm-up
	End          *SoakSample        `json:"end"`  // at the end, same point of the restart cycle
	Series       []SoakSample       `json:"series"`
	Checks       []SoakCheck        `json:"checks"`
	Pass         bool               `json:"pass"`
	Error        string             `json:"error,omitempty"`
}

func cmdSoak(args []string) error {
	fs := flag.NewFlagSet("soak", flag.ExitOnError)
	var o SoakOptions
	bin := fs.String("bin", "bench/out/bin", "directory holding sidecar and stormbench")
	out := fs.String("out", "bench/out/soak", "output directory: logs, the load tool's JSON, soak.json")
	doc := fs.String("doc", "", "markdown file whose soak section (between <!-- soak:begin --> and <!-- soak:end -->) is rewritten; empty: none")
	command := fs.String("command", "make soak", "the command line the doc says produced it")
	fs.StringVar(&o.Protocol, "protocol", protoDubbo, "dubbo, or triple: h2c consumers (stormbench load --protocol triple: unary calls, PINGs) in front of the Triple echo provider, which reads normally (the reading flags do not apply) and checks bodies across its restarts; its doc section is the Triple soak's")
	fs.DurationVar(&o.Duration, "duration", 10*time.Minute, "request phase")
	fs.IntVar(&o.Conns, "conns", 10000, "consumer connections")
	fs.IntVar(&o.Workers, "workers", 0, "load tool worker processes; 0 = one per 5,000 connections")
	fs.Float64Var(&o.ConnectRate, "connect-rate", 2000, "connections opened per second")
	fs.Float64Var(&o.Rate, "rate", 1000, "requests per second in total (two-way and one-way)")
	fs.DurationVar(&o.Heartbeat, "heartbeat", 10*time.Second, "heartbeat interval per consumer")
	fs.IntVar(&o.BodyMin, "body-min", 1, "smallest checked body, bytes")
	fs.IntVar(&o.BodyMax, "body-max", 256<<10, "largest checked body, bytes (sizes are log-uniform)")
	fs.Float64Var(&o.OneWay, "one-way", 0.1, "fraction of requests sent one-way")
	fs.DurationVar(&o.Timeout, "timeout", 10*time.Second, "consumers' request timeout (an answer later than this is a failure)")
	fs.DurationVar(&o.RestartEvery, "restart-every", time.Minute, "kill and restart the provider at this interval")
	fs.DurationVar(&o.Down, "down", time.Second, "how long the killed provider stays down")
	fs.StringVar(&o.Kill, "kill", "alternate", "how the provider's kills end its connections: abort (SO_LINGER 0: nothing proves a request unread, every one in flight is answered 35), close (as a dying process's kernel does: Stormgate proves unread requests and sends them again, which the provider's check for a request seen twice covers), or alternate")
	fs.DurationVar(&o.Spell, "spell", 2*time.Second, "the provider's mean reading spell")
	fs.Float64Var(&o.SlowChance, "slow-chance", 0.3, "fraction of spells the provider reads slowly")
	fs.Float64Var(&o.StallChance, "stall-chance", 0.02, "fraction of spells the provider does not read at all")
	fs.DurationVar(&o.Warmup, "warmup", 90*time.Second, "the warm-up sample is taken this long into the request phase")
	fs.DurationVar(&o.SampleEvery, "sample-every", 10*time.Second, "interval of the metrics series")
	fs.DurationVar(&o.Calm, "calm", 10*time.Second, "the provider reads normally this long before the warm-up and end samples (like with like: no slow spell's backlog in either)")
	fs.Float64Var(&o.Tolerance, "tolerance", 0.05, "largest relative change of fds, goroutines and heap from warm-up to the end")
	fs.Uint64Var(&o.Seed, "seed", 0, "seed of the provider's reading and the load's bodies; 0 = from the clock")
	_ = fs.Parse(args)
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case o.Protocol != protoDubbo && o.Protocol != protoTriple:
		return fmt.Errorf("--protocol %q: want %s or %s", o.Protocol, protoDubbo, protoTriple)
	case o.Protocol == protoTriple && set["one-way"] && o.OneWay > 0:
		return fmt.Errorf("--one-way %v with --protocol triple: gRPC has no one-way call", o.OneWay)
	case o.Protocol == protoTriple:
		o.OneWay, o.SlowChance, o.StallChance = 0, 0, 0
	}
	if o.Workers <= 0 {
		o.Workers = max(1, (o.Conns+4999)/5000)
	}
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano())
	}
	switch {
	case o.Warmup <= 0 || o.Warmup >= o.Duration:
		return fmt.Errorf("--warmup %v must be inside the request phase (--duration %v)", o.Warmup, o.Duration)
	case o.RestartEvery <= o.Down:
		return fmt.Errorf("--restart-every %v must be longer than --down %v", o.RestartEvery, o.Down)
	case o.Tolerance <= 0:
		return fmt.Errorf("--tolerance %v must be positive", o.Tolerance)
	}

	root, err := os.Getwd()
	if err != nil {
		return err
	}
	s := &Suite{out: *out, root: root, log: os.Stderr}
	if err := os.RemoveAll(filepath.Join(s.out, "logs")); err != nil {
		return err
	}
	s.bins = Bins{sidecar: filepath.Join(*bin, "sidecar"), stormbench: filepath.Join(*bin, "stormbench")}
	if err := requireBins("bench/soak.sh", s.bins.sidecar, s.bins.stormbench); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	defer s.cleanup()

	res := &SoakResult{Started: time.Now(), Command: *command, Options: o, Machine: machineInfo(ctx, s)}
	runErr := s.runSoak(ctx, o, res)
	if runErr != nil {
		res.Error = runErr.Error()
	}
	res.Wall = time.Since(res.Started)
	res.Machine.LoadAvgPost = loadAvg()
	res.evaluate()
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(s.out, "soak.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Fprint(os.Stderr, res.summary())
	if *doc != "" && res.Load != nil {
		sec, err := res.markdown()
		if err == nil {
			err = res.writeSoakSection(*doc, sec)
		}
		if err != nil {
			return err
		}
		s.logf("wrote the soak section of %s", *doc)
	}
	switch {
	case runErr != nil:
		return runErr
	case !res.Pass:
		return errors.New("soak FAILED: see the checks above and " + filepath.Join(s.out, "soak.json"))
	}
	return nil
}

// runSoak starts the three parties, drives the schedule and collects what evaluate needs.
func (s *Suite) runSoak(ctx context.Context, o SoakOptions, res *SoakResult) error {
	// Every process lives as long as the whole run may: connect, request phase, drain, slack.
	bound := time.Duration(float64(o.Conns)/o.ConnectRate*float64(time.Second)) + o.Duration + 2*o.Timeout + 5*time.Minute

	var finalMu sync.Mutex
	var final *echoFinal
	triple := o.Protocol == protoTriple
	argv := []string{s.bins.stormbench, "echo-provider", "--listen", "127.0.0.1:0",
		"--seed", strconv.FormatUint(o.Seed, 10), "--spell", o.Spell.String(),
		"--slow-chance", fmtNum(o.SlowChance), "--stall-chance", fmtNum(o.StallChance),
		"--down", o.Down.String(), "--calm", (o.Calm + 10*time.Second).String(), "--stats-every", "30s", "--log-level", "warn",
		"--kill", o.Kill}
	if triple {
		argv = append(argv, "--protocol", protoTriple)
	}
	prov, err := s.start(ctx, procSpec{
		name: "echo-provider", bound: bound, argv: argv,
		readyRe: regexp.MustCompile(`"event":"listening".*"addr":"([^"]+)"`),
		onLine: func(line string) {
			if !strings.Contains(line, `"event":"final"`) {
				return
			}
			var f echoFinal
			if json.Unmarshal([]byte(line), &f) == nil {
				finalMu.Lock()
				final = &f
				finalMu.Unlock()
			}
		},
	})
	if err != nil {
		return err
	}
	m, err := prov.Ready(ctx, 30*time.Second)
	if err != nil {
		return err
	}
	_, ps, _ := net.SplitHostPort(m[1])
	port, _ := strconv.Atoi(ps)
	up := &provider{kind: "echo", proto: protoDubbo, proc: prov, addr: m[1], port: port}
	if triple {
		up.proto = protoTriple
	}

	px, err := s.startProxy(ctx, stormgate, up, proxyOpts{bound: bound})
	if err != nil {
		return err
	}
	if err := waitFor(ctx, px.procs[0], 30*time.Second, "the upstream connections", func() bool {
		mt, err := scrape(ctx, px.metrics)
		return err == nil && mt.sum("stormgate_upstream_connections") >= stormgateUpstreamConns
	}); err != nil {
		return err
	}

	spec := loadSpec{Conns: o.Conns, ConnectRate: o.ConnectRate, Heartbeat: o.Heartbeat, Rate: o.Rate,
		Duration: o.Duration, Timeout: o.Timeout, Workers: o.Workers,
		BodyMin: o.BodyMin, BodyMax: o.BodyMax, OneWay: o.OneWay, Seed: o.Seed}
	if triple {
		spec.Protocol = protoTriple
	}
	res.LoadCommand = spec.command("SIDECAR")
	h, err := s.startLoad(ctx, "soak", px.addr, "", spec)
	if err != nil {
		return err
	}
	if err := h.waitRun(ctx); err != nil {
		return err
	}
	h.mu.Lock()
	runAt := h.runAt
	h.mu.Unlock()
	s.logf("soak: request phase started; warm-up sample at +%v, provider restarts every %v", o.Warmup, o.RestartEvery)
	if err := s.soakSchedule(ctx, o, res, runAt, prov, px, h); err != nil {
		return err
	}

	run, err := h.wait()
	if err != nil {
		return err
	}
	res.Load = run.Result
	if mt, err := scrape(ctx, px.metrics); err == nil {
		res.LocalReplies = map[string]float64{}
		for k, v := range mt {
			if strings.HasPrefix(k, "stormgate_local_replies_total{") {
				res.LocalReplies[labelValue(k, "reason")] = v
			}
		}
	}
	sidecarAlive := px.alive()
	prov.Stop(30 * time.Second) // SIGTERM: the provider prints its final line
	px.stop()
	if !sidecarAlive {
		return fmt.Errorf("the sidecar exited during the run; see %s", px.procs[0].LogPath)
	}
	finalMu.Lock()
	defer finalMu.Unlock()
	if final == nil {
		return fmt.Errorf("the echo provider printed no final line; see %s", prov.LogPath)
	}
	res.Provider, res.ProviderH2, res.Violations = final.Stats, final.Triple, final.Violations
	return nil
}

// echoFinal is the echo provider's last stdout line.
type echoFinal struct {
	Stats      *peer.EchoStats   `json:"stats"`
	Triple     *peer.TripleStats `json:"triple"`
	Violations []peer.Violation  `json:"violations"`
}

// soakSchedule runs the request phase: provider restarts, the warm-up and end samples (after a
// forced GC), and the metrics series, until the load tool exits.
func (s *Suite) soakSchedule(ctx context.Context, o SoakOptions, res *SoakResult, runAt time.Time, prov *Proc, px *proxy, h *loadHandle) error {
	endAt := soakEndSample(o)
	nextRestart := o.RestartEvery
	nextSample := time.Duration(0)
	warmDone, endDone := false, false
	calms := []time.Duration{max(o.Warmup-o.Calm, 0), max(endAt-o.Calm, 0)}
	for {
		now := time.Since(runAt)
		next := nextSample
		if nextRestart < o.Duration {
			next = min(next, nextRestart)
		}
		if len(calms) > 0 {
			next = min(next, calms[0])
		}
		if !warmDone {
			next = min(next, o.Warmup)
		}
		if !endDone {
			next = min(next, endAt)
		}
		t := time.NewTimer(max(next-now, 0))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-h.proc.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		now = time.Since(runAt)
		switch {
		case len(calms) > 0 && now >= calms[0]:
			calms = calms[1:]
			if err := syscall.Kill(prov.PID, syscall.SIGUSR2); err != nil {
				return fmt.Errorf("calming the provider: %w", err)
			}
		case nextRestart < o.Duration && now >= nextRestart:
			if err := syscall.Kill(prov.PID, syscall.SIGUSR1); err != nil {
				return fmt.Errorf("restarting the provider: %w", err)
			}
			res.Restarts++
			s.logf("soak: +%v provider killed (restart %d), back in %v", now.Round(time.Second), res.Restarts, o.Down)
			nextRestart += o.RestartEvery
		case !warmDone && now >= o.Warmup:
			warmDone = true
			sm, err := s.soakQuietSample(ctx, px, h, runAt)
			if err != nil {
				return fmt.Errorf("warm-up sample: %w", err)
			}
			res.Warm = &sm
			s.logf("soak: warm-up sample %s", sm.brief())
		case !endDone && now >= endAt:
			endDone = true
			sm, err := s.soakQuietSample(ctx, px, h, runAt)
			if err != nil {
				return fmt.Errorf("end sample: %w", err)
			}
			res.End = &sm
			s.logf("soak: end sample %s", sm.brief())
		case now >= nextSample:
			if sm, err := s.soakSample(ctx, px, runAt); err == nil {
				res.Series = append(res.Series, sm)
				pr := h.latest()
				s.logf("soak: +%v %s | load: ok %d err %d tmo %d lost %d", now.Round(time.Second), sm.brief(), pr.OK, pr.Err, pr.Tmo, pr.Lost)
			}
			nextSample += o.SampleEvery
		}
	}
}

// soakEndSample is when the end sample is taken: at the same point of the restart cycle as the
// warm-up sample (so both see the same phase of a provider restart), as late as possible but at
// least 5 s before the request phase ends.
func soakEndSample(o SoakOptions) time.Duration {
	last := o.Duration - 5*time.Second
	n := (last - o.Warmup) / o.RestartEvery
	if n < 1 {
		return max(last, o.Warmup)
	}
	return o.Warmup + n*o.RestartEvery
}

// soakSample reads the sidecar's metrics and RSS.
func (s *Suite) soakSample(ctx context.Context, px *proxy, runAt time.Time) (SoakSample, error) {
	mt, err := scrape(ctx, px.metrics)
	if err != nil {
		return SoakSample{}, err
	}
	u, _ := sampleUsage(px.pids()...)
	return SoakSample{
		At:         time.Since(runAt),
		Goroutines: mt.sum("go_goroutines"), HeapLive: mt.sum("go_gc_heap_live_bytes"),
		HeapInuse: mt.sum("go_memstats_heap_inuse_bytes"), HeapAlloc: mt.sum("go_memstats_heap_alloc_bytes"),
		OpenFDs: mt.sum("process_open_fds"), RSSKiB: u.RSSKiB,
		Downstream: mt.sum("stormgate_downstream_connections"), Upstream: mt.sum("stormgate_upstream_connections"),
		Held: mt.sum("stormgate_held_requests"), Requests: mt.sum("stormgate_requests_total"),
	}, nil
}

// soakQuietWait bounds how long a leak sample waits, with the load paused, for the sidecar to have
// nothing in flight; past it the sample is taken anyway and says so (Quiet false).
const soakQuietWait = 15 * time.Second

// soakQuietSample is a leak sample taken like with like: the load tool is paused (SIGUSR1: no new
// request, heartbeats go on, every connection stays open), the sidecar is waited for until it has
// no request in flight or held and no byte buffered, then soakGCSample reads it, and the load
// resumes (SIGUSR2). Sampled under load, the live heap also holds whatever requests happen to be
// in flight (bodies up to 256 KiB at 1,000/s): per-minute medians of a passing run moved between
// 43 and 47 MiB with no trend, and a two-point check at 5 % failed on that noise alone (+8.3 %,
// +12 %). Paused, what is left is what the sidecar keeps: connections, pools, tables.
func (s *Suite) soakQuietSample(ctx context.Context, px *proxy, h *loadHandle, runAt time.Time) (SoakSample, error) {
	if err := syscall.Kill(h.proc.PID, syscall.SIGUSR1); err != nil {
		return SoakSample{}, fmt.Errorf("pausing the load: %w", err)
	}
	paused := time.Now()
	defer func() {
		if err := syscall.Kill(h.proc.PID, syscall.SIGUSR2); err != nil {
			s.logf("soak: resuming the load: %v", err)
		}
	}()
	quiet := false
	for !quiet {
		mt, err := scrape(ctx, px.metrics)
		if err == nil {
			quiet = mt.sum("stormgate_inflight_requests")+mt.sum("stormgate_held_requests")+mt.sum("stormgate_buffered_bytes") == 0
		}
		if quiet || time.Since(paused) > soakQuietWait {
			break
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return SoakSample{}, err
		}
	}
	wait := time.Since(paused)
	sm, err := s.soakGCSample(ctx, px, runAt)
	sm.Quiet, sm.QuietAfter = quiet, wait
	if !quiet {
		s.logf("soak: the sidecar still had requests or bytes in flight %v after the load paused; sampled anyway", wait.Round(time.Millisecond))
	}
	return sm, err
}

// soakGCSamples is how many readings a leak sample takes the median of: the live heap
// still holds the requests in flight at each GC (bodies up to 256 KiB at 1,000/s), a few
// MiB up or down from one reading to the next.
const soakGCSamples = 5

// soakGCSample is the median of soakGCSamples samples, each taken right after two GCs forced through
// the admin listener's /debug/pprof/heap?gc=1 (the first moves what sync.Pools hold to their
// victim caches, the second frees those). The heap figure checked is go_gc_heap_live_bytes,
// what that collection found live. go_memstats_heap_inuse_bytes, checked before, also counts
// whatever was allocated between the collection and the scrape, and at 1,000 requests/s with
// bodies up to 256 KiB it swung between 48 and 84 MiB from one forced GC to the next while the
// heap profile's live total stayed at 43 MiB: two soaks failed on it (-14 % and -16 %).
func (s *Suite) soakGCSample(ctx context.Context, px *proxy, runAt time.Time) (SoakSample, error) {
	var ss []SoakSample
	for i := range soakGCSamples {
		if i > 0 {
			if err := sleepCtx(ctx, time.Second); err != nil {
				return SoakSample{}, err
			}
		}
		for range 2 {
			if err := forceGC(ctx, px.admin); err != nil {
				return SoakSample{}, err
			}
		}
		sm, err := s.soakSample(ctx, px, runAt)
		if err != nil {
			return SoakSample{}, err
		}
		ss = append(ss, sm)
	}
	med := func(f func(SoakSample) float64) float64 {
		v := make([]float64, len(ss))
		for i, x := range ss {
			v[i] = f(x)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	out := ss[len(ss)/2]
	out.Forced = true
	out.Goroutines = med(func(x SoakSample) float64 { return x.Goroutines })
	out.HeapLive = med(func(x SoakSample) float64 { return x.HeapLive })
	out.HeapInuse = med(func(x SoakSample) float64 { return x.HeapInuse })
	out.HeapAlloc = med(func(x SoakSample) float64 { return x.HeapAlloc })
	out.OpenFDs = med(func(x SoakSample) float64 { return x.OpenFDs })
	out.RSSKiB = int64(med(func(x SoakSample) float64 { return float64(x.RSSKiB) }))
	return out, nil
}

// forceGC asks the sidecar for a heap profile with gc=1, which runs a garbage collection first.
func forceGC(ctx context.Context, admin string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+admin+"/debug/pprof/heap?gc=1", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s/debug/pprof/heap?gc=1: %s", admin, resp.Status)
	}
	return nil
}

func (sm SoakSample) brief() string {
	return fmt.Sprintf("conns %.0f/%.0f held %.0f | fds %.0f goroutines %.0f heap %.1f MiB rss %.1f MiB",
		sm.Downstream, sm.Upstream, sm.Held, sm.OpenFDs, sm.Goroutines, sm.HeapInuse/(1<<20), mib(sm.RSSKiB))
}

// labelValue returns the value of label name in a series key `metric{a="x",name="y"}`.
func labelValue(key, name string) string {
	i := strings.Index(key, name+`="`)
	if i < 0 {
		return ""
	}
	v := key[i+len(name)+2:]
	if j := strings.IndexByte(v, '"'); j >= 0 {
		return v[:j]
	}
	return v
}

// evaluate fills Checks and Pass.
func (r *SoakResult) evaluate() {
	add := func(name string, ok bool, format string, args ...any) {
		r.Checks = append(r.Checks, SoakCheck{Name: name, OK: ok, Detail: fmt.Sprintf(format, args...)})
	}
	if r.Error != "" {
		add("the run completed", false, "%s", r.Error)
	}
	if l := r.Load; l != nil {
		add("no answer carried bytes that were not its own request's", l.BodyMismatches == 0,
			"%d answers compared byte for byte: %d not the request's body, %d of them another request's", l.OK+l.BodyMismatches, l.BodyMismatches, l.ForeignBodies)
		once := l.Timeouts+l.Lost+l.Duplicates+l.UnknownIDs+l.LateReplies+l.Abandoned == 0 && l.OK+l.BodyMismatches+l.Errors == l.Sent
		add("every two-way request got exactly one answer", once,
			"%d sent: %d with its own body, %d errors %s; timeouts %d, lost %d, second answers %d, unknown ids %d, late %d, abandoned %d",
			l.Sent, l.OK, l.Errors, statusList(l.ErrorByStatus), l.Timeouts, l.Lost, l.Duplicates, l.UnknownIDs, l.LateReplies, l.Abandoned)
		add("every heartbeat answered", l.HeartbeatsTimedOut+l.HeartbeatsLost == 0 && l.HeartbeatsAnswered == l.HeartbeatsSent,
			"%d sent, %d answered, %d timed out, %d lost", l.HeartbeatsSent, l.HeartbeatsAnswered, l.HeartbeatsTimedOut, l.HeartbeatsLost)
		closed := l.Resets + l.ClosedByPeer + l.ProtocolErrors + l.OtherConnErrors
		add("consumer connections stayed open", closed == 0 && l.ConnectFailures.Total() == 0 && l.ConnsOpenAtEnd == uint64(l.Conns),
			"%d opened, %d open at the end; resets %d, closed by the sidecar %d, protocol errors %d, connect failures %d",
			l.ConnsOpened, l.ConnsOpenAtEnd, l.Resets, l.ClosedByPeer, l.ProtocolErrors, l.ConnectFailures.Total())
	}
	if p := r.Provider; p != nil {
		// A slow or pausing provider is backpressure: only the kills may end its connections.
		want := uint64(stormgateUpstreamConns * (p.Restarts + 1))
		add("the sidecar closed no provider connection on its own", p.ConnsAccepted == want && p.Truncated == 0,
			"%d provider connections for %d restarts (want %d: M=%d per provider lifetime), %d closed by the sidecar in the middle of a frame",
			p.ConnsAccepted, p.Restarts, want, stormgateUpstreamConns, p.Truncated)
		add("the provider saw no malformed frame, repeated upstream id or request twice", p.Violations == 0,
			"%d violations; %d two-way and %d one-way requests checked (%d distinct bodies) on %d connections, %d restarts",
			p.Violations, p.Requests, p.OneWay, p.UniqueKeys, p.ConnsAccepted, p.Restarts)
	}
	if p := r.ProviderH2; p != nil {
		// The Triple echo provider reads normally: only the kills may end its connections.
		want := uint64(stormgateUpstreamConns * (p.Restarts + 1))
		add("the sidecar closed no provider connection on its own", p.ConnsAccepted == want,
			"%d provider connections for %d restarts (want %d: M=%d per provider lifetime)", p.ConnsAccepted, p.Restarts, want, stormgateUpstreamConns)
		add("the provider saw no malformed frame, stream over its limit or call twice", p.Violations == 0,
			"%d violations; %d calls answered, %d checked (%d distinct bodies) on %d connections, %d restarts; %d consumer PINGs reached it",
			p.Violations, p.Requests, p.Checked, p.UniqueKeys, p.ConnsAccepted, p.Restarts, p.LoadPings)
		add("no consumer PING reached the provider", p.LoadPings == 0, "%d of the consumers' PINGs reached it", p.LoadPings)
	}
	want := int((r.Options.Duration - 1) / r.Options.RestartEvery)
	add("the provider was restarted on schedule", r.Restarts == want, "%d restarts (every %v)", r.Restarts, r.Options.RestartEvery)
	if r.Warm != nil && r.End != nil {
		for _, c := range []struct {
			name      string
			warm, end float64
			unit      float64
			format    string
		}{
			{"open fds", r.Warm.OpenFDs, r.End.OpenFDs, 1, "%.0f"},
			{"goroutines", r.Warm.Goroutines, r.End.Goroutines, 1, "%.0f"},
			{"live heap", r.Warm.HeapLive, r.End.HeapLive, 1 << 20, "%.1f MiB"},
		} {
			ch := relChange(c.warm, c.end)
			add(fmt.Sprintf("sidecar %s within %.0f%% of warm-up", c.name, 100*r.Options.Tolerance), math.Abs(ch) <= r.Options.Tolerance,
				"%s after warm-up, %s at the end (%+.1f%%)", fmt.Sprintf(c.format, c.warm/c.unit), fmt.Sprintf(c.format, c.end/c.unit), 100*ch)
		}
	} else {
		add("warm-up and end samples taken", false, "missing (the run ended early)")
	}
	r.Pass = true
	for _, c := range r.Checks {
		r.Pass = r.Pass && c.OK
	}
}

func relChange(a, b float64) float64 {
	if a == 0 {
		if b == 0 {
			return 0
		}
		return math.Inf(1)
	}
	return (b - a) / a
}

func statusList(m map[int]uint64) string {
	if len(m) == 0 {
		return "(none)"
	}
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d×%d", m[k], k)
	}
	return "(status " + strings.Join(parts, ", ") + ")"
}

func (r *SoakResult) summary() string {
	var b strings.Builder
	verdict := "PASS"
	if !r.Pass {
		verdict = "FAIL"
	}
	fmt.Fprintf(&b, "\nsoak %s after %v (seed %d)\n", verdict, r.Wall.Round(time.Second), r.Options.Seed)
	for _, c := range r.Checks {
		mark := "ok  "
		if !c.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(&b, "  %s %s: %s\n", mark, c.Name, c.Detail)
	}
	for i, v := range r.Violations {
		if i == 10 {
			fmt.Fprintf(&b, "  ... %d more violations in soak.json\n", len(r.Violations)-10)
			break
		}
		fmt.Fprintf(&b, "  violation: %s\n", v)
	}
	return b.String()
}
