package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stormgate/stormgate/loadgen"
)

// loadSpec is one run of `stormbench load`.
type loadSpec struct {
	Protocol        string // "" or protoDubbo: Dubbo 2; protoTriple: h2c, PINGs as heartbeats
	Conns           int
	ConnectRate     float64
	DialConcurrency int
	ConnectTimeout  time.Duration
	Heartbeat       time.Duration
	ProbeOnConnect  bool
	Rate            float64
	Duration        time.Duration
	Timeout         time.Duration
	Method, Arg     string
	Reconnect       time.Duration
	Workers         int
	SourceAddrs     string
	// Checked bodies (soak): sizes, one-way fraction, seed.
	BodyMin, BodyMax int
	OneWay           float64
	Seed             uint64
}

// args are the load tool's flags (after "stormbench load"), target first.
func (l loadSpec) args(target string) []string {
	a := []string{"--target", target, "--conns", strconv.Itoa(l.Conns)}
	add := func(k, v string) { a = append(a, k, v) }
	if l.Protocol != "" && l.Protocol != protoDubbo {
		add("--protocol", l.Protocol)
	}
	if l.ConnectRate > 0 {
		add("--connect-rate", fmtNum(l.ConnectRate))
	}
	if l.DialConcurrency > 0 {
		add("--dial-concurrency", strconv.Itoa(l.DialConcurrency))
	}
	if l.ConnectTimeout > 0 {
		add("--connect-timeout", l.ConnectTimeout.String())
	}
	if l.Heartbeat > 0 {
		add("--heartbeat", l.Heartbeat.String())
	}
	if l.ProbeOnConnect {
		a = append(a, "--probe-on-connect")
	}
	if l.Rate > 0 {
		add("--rate", fmtNum(l.Rate))
	}
	add("--duration", l.Duration.String())
	if l.Timeout > 0 {
		add("--timeout", l.Timeout.String())
	}
	if l.Method != "" {
		add("--method", l.Method)
	}
	if l.Arg != "" {
		add("--arg", l.Arg)
	}
	if l.Reconnect > 0 {
		add("--reconnect", l.Reconnect.String())
	}
	if l.Workers > 0 {
		add("--workers", strconv.Itoa(l.Workers))
	}
	if l.SourceAddrs != "" {
		add("--source-addrs", l.SourceAddrs)
	}
	if l.BodyMax > 0 {
		add("--body-min", strconv.Itoa(max(l.BodyMin, 1)))
		add("--body-max", strconv.Itoa(l.BodyMax))
	}
	if l.OneWay > 0 {
		add("--one-way", fmtNum(l.OneWay))
	}
	if l.Seed != 0 {
		add("--seed", strconv.FormatUint(l.Seed, 10))
	}
	return a
}

// command is the command line for the report, with the target written symbolically.
func (l loadSpec) command(target string) string {
	return "stormbench load " + strings.Join(l.args(target), " ")
}

// bound is the longest the run may take: connect phase, request phase, drain, and slack.
func (l loadSpec) bound() time.Duration {
	d := l.Duration + 2*max(l.Timeout, loadgen.DefaultTimeout) + time.Minute
	if l.ConnectRate > 0 {
		d += time.Duration(float64(l.Conns) / l.ConnectRate * float64(time.Second))
	}
	return d + 3*max(l.ConnectTimeout, loadgen.DefaultConnectTimeout)
}

// progress is one of the load tool's once-a-second progress lines (cumulative counts), stamped
// with the time the suite read it.
type progress struct {
	At                               time.Time
	Phase                            string
	Conns, ConnFail                  int
	Sent, OK, Err, Tmo, Lost, Unsent uint64
	HBOK, HBSent, Resets, EOF        uint64
	P50ms, P99ms                     float64
}

var progressRe = regexp.MustCompile(`^\[\s*\d+s\] (\S+)\s+conns (\d+) fail (\d+) \| req (\d+) ok (\d+) err (\d+) tmo (\d+) lost (\d+) unsent (\d+) \| hb (\d+)/(\d+) \| reset (\d+) eof (\d+) \| p50 ([\d.]+)ms p99 ([\d.]+)ms`)

// parseProgress parses a progress line; ok is false for any other line.
func parseProgress(line string, at time.Time) (progress, bool) {
	m := progressRe.FindStringSubmatch(line)
	if m == nil {
		return progress{}, false
	}
	u := func(i int) uint64 { v, _ := strconv.ParseUint(m[i], 10, 64); return v }
	f := func(i int) float64 { v, _ := strconv.ParseFloat(m[i], 64); return v }
	return progress{
		At: at, Phase: m[1], Conns: int(u(2)), ConnFail: int(u(3)),
		Sent: u(4), OK: u(5), Err: u(6), Tmo: u(7), Lost: u(8), Unsent: u(9),
		HBOK: u(10), HBSent: u(11), Resets: u(12), EOF: u(13), P50ms: f(14), P99ms: f(15),
	}, true
}

// loadHandle is a running load tool.
type loadHandle struct {
	proc     *Proc
	spec     loadSpec
	jsonPath string
	started  time.Time

	mu       sync.Mutex
	series   []progress
	runOnce  sync.Once
	runStart chan struct{} // closed at the first progress line of the request phase
	runAt    time.Time
}

// loadRun is a finished load run.
type loadRun struct {
	Result *loadgen.Result
	Series []progress
	RunAt  time.Time // when the request phase was first seen
	Start  time.Time
}

// startLoad starts `stormbench load` against target (inside ns when ns != "").
func (s *Suite) startLoad(ctx context.Context, name, target, ns string, spec loadSpec) (*loadHandle, error) {
	h := &loadHandle{spec: spec, runStart: make(chan struct{}), started: time.Now()}
	h.jsonPath = filepath.Join(s.out, "runs", name+".json")
	if err := os.MkdirAll(filepath.Dir(h.jsonPath), 0o755); err != nil {
		return nil, err
	}
	_ = os.Remove(h.jsonPath)
	argv := append([]string{s.bins.stormbench, "load"}, spec.args(target)...)
	argv = append(argv, "--json", h.jsonPath)
	p, err := s.start(ctx, procSpec{
		name: "load-" + name, argv: argv, netns: ns, bound: spec.bound(),
		onLine: func(line string) {
			pr, ok := parseProgress(line, time.Now())
			if !ok {
				return
			}
			h.mu.Lock()
			h.series = append(h.series, pr)
			h.mu.Unlock()
			if pr.Phase != "connect" {
				h.runOnce.Do(func() {
					h.mu.Lock()
					h.runAt = pr.At
					h.mu.Unlock()
					close(h.runStart)
				})
			}
		},
	})
	if err != nil {
		return nil, err
	}
	h.proc = p
	s.logf("  load %s: %s", name, spec.command(target))
	return h, nil
}

// RunStarted is closed once the request phase has been seen (within a second of its start).
func (h *loadHandle) RunStarted() <-chan struct{} { return h.runStart }

// waitRun waits for the request phase; it fails if the tool exits first.
func (h *loadHandle) waitRun(ctx context.Context) error {
	select {
	case <-h.runStart:
		return nil
	case <-h.proc.Done():
		select {
		case <-h.runStart:
			return nil
		default:
		}
		return fmt.Errorf("load tool exited before its request phase (%v); see %s", h.proc.Err(), h.proc.LogPath)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// latest returns the last progress line read.
func (h *loadHandle) latest() progress {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.series) == 0 {
		return progress{}
	}
	return h.series[len(h.series)-1]
}

// wait waits for the tool to exit and reads its JSON result.
func (h *loadHandle) wait() (*loadRun, error) {
	exitErr := h.proc.Wait()
	b, err := os.ReadFile(h.jsonPath)
	if err != nil {
		return nil, fmt.Errorf("load tool (%v) wrote no result: %w; see %s", exitErr, err, h.proc.LogPath)
	}
	res, err := loadgen.ParseResult(b)
	if err != nil {
		return nil, fmt.Errorf("load result %s: %w", h.jsonPath, err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return &loadRun{Result: res, Series: append([]progress(nil), h.series...), RunAt: h.runAt, Start: h.started}, nil
}

// fmtNum prints a number without a trailing ".0" or exponent (flags and tables).
func fmtNum(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
