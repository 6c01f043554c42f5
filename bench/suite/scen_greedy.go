package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/stormgate/stormgate/loadgen"
)

// GreedyResult is the greedy scenario (issue 23): well-behaved consumers send small requests at
// a steady rate to an echo provider while greedy neighbours push large requests as fast as TCP
// lets them, either never reading their answers or reading them (bulk senders). The figure is
// the well-behaved consumers' p99 beside each kind of neighbour, for each target, against the
// same target with no neighbour. Direct and HAProxy give every consumer a provider connection of
// its own; Stormgate shares M connections among all of them, so only its scheduling (per-consumer
// send queues, the bulk lane, backpressure) keeps the neighbours from costing the others.
type GreedyResult struct {
	Conns    int           `json:"conns"`
	Rate     float64       `json:"rate"`
	Body     int           `json:"body"`
	Greedy   int           `json:"greedy"`
	Size     int           `json:"size"`
	Duration time.Duration `json:"duration_ns"`
	Rows     []GreedyRow   `json:"rows"`
}

// Neighbour kinds of the greedy scenario.
const (
	noNeighbours = "none"
	neverReading = "never reading"
	bulkSenders  = "bulk senders"
)

var greedyKinds = []string{noNeighbours, neverReading, bulkSenders}

// GreedyRow is one target beside one kind of neighbour.
type GreedyRow struct {
	Target     string  `json:"target"`
	Neighbours string  `json:"neighbours"`
	Command    string  `json:"command"`
	Greedy     string  `json:"greedy_command,omitempty"`
	Sent       uint64  `json:"sent"`
	OK         uint64  `json:"ok"`
	Failed     uint64  `json:"failed"` // errors, body mismatches, timeouts, lost, unsent
	P50ms      float64 `json:"p50_ms"`
	P99ms      float64 `json:"p99_ms"`
	MaxMs      float64 `json:"max_ms"`
	// What the neighbours did (nil with none).
	Neighbour *loadgen.GreedyResult `json:"neighbour,omitempty"`
	Error     string                `json:"error,omitempty"`
}

func (s *Suite) runGreedy(ctx context.Context) (*GreedyResult, error) {
	o := s.opt
	res := &GreedyResult{Conns: o.GreedyConns, Rate: o.GreedyRate, Body: greedyBody, Greedy: o.GreedyNeighbours,
		Size: o.GreedySize, Duration: o.GreedyDuration}
	var err error
	res.Rows, err = rowPerTarget(ctx, s, "greedy", greedyKinds,
		func(tg, kind string) (GreedyRow, error) { return s.greedyTarget(ctx, tg, kind) },
		func(r *GreedyRow, e string) { r.Error = e })
	return res, err
}

// greedyBody is the well-behaved requests' body size.
const greedyBody = 1 << 10

// greedyLead is how long the neighbours push before the measured load starts (and the pause
// before it without neighbours).
const greedyLead = 2 * time.Second

func (s *Suite) greedyTarget(ctx context.Context, tg, kind string) (GreedyRow, error) {
	o := s.opt
	row := GreedyRow{Target: tg, Neighbours: kind}
	prov, err := s.startEchoProvider(ctx)
	if err != nil {
		return row, err
	}
	defer prov.proc.Kill()
	px, err := s.startProxy(ctx, tg, prov, proxyOpts{})
	if err != nil {
		return row, err
	}
	defer px.stop()

	name := fmt.Sprintf("greedy-%s-%s", tg, map[string]string{noNeighbours: "none", neverReading: "noread", bulkSenders: "bulk"}[kind])
	var neighbours *Proc
	var nbJSON string
	if kind != noNeighbours {
		nbJSON = filepath.Join(s.out, "runs", name+"-neighbours.json")
		_ = os.Remove(nbJSON)
		args := []string{"--conns", strconv.Itoa(o.GreedyNeighbours), "--size", strconv.Itoa(o.GreedySize),
			"--duration", (o.GreedyDuration + 2*greedyLead).String()}
		if kind == bulkSenders {
			args = append(args, "--read")
		}
		row.Greedy = "stormbench greedy --target $" + targetVar(tg) + " " + strings.Join(args, " ")
		argv := append([]string{s.bins.stormbench, "greedy", "--target", px.addr, "--json", nbJSON}, args...)
		if neighbours, err = s.start(ctx, procSpec{name: "neighbours-" + name, argv: argv}); err != nil {
			return row, err
		}
		defer neighbours.Kill()
	}
	// The neighbours are at full speed when the measured load starts; without neighbours the
	// same pause after the target starts, so that every row starts alike.
	if err := sleepCtx(ctx, greedyLead); err != nil {
		return row, err
	}
	spec := loadSpec{Conns: o.GreedyConns, Rate: o.GreedyRate, Duration: o.GreedyDuration, Timeout: 10 * time.Second,
		BodyMin: greedyBody, BodyMax: greedyBody}
	row.Command = spec.command("$" + targetVar(tg))
	h, err := s.startLoad(ctx, name, px.addr, "", spec)
	if err != nil {
		return row, err
	}
	run, err := h.wait()
	if err != nil {
		return row, err
	}
	r := run.Result
	row.Sent, row.OK = r.Sent, r.OK
	row.Failed = r.Errors + r.Exceptions + r.BodyMismatches + r.Timeouts + r.Lost + r.Unsent
	row.P50ms, row.P99ms, row.MaxMs = ms(r.Latency.P50), ms(r.Latency.P99), ms(r.Latency.Max)
	if neighbours != nil {
		_ = neighbours.Wait()
		b, err := os.ReadFile(nbJSON)
		if err != nil {
			return row, fmt.Errorf("the greedy neighbours wrote no result: %w; see %s", err, neighbours.LogPath)
		}
		var nb loadgen.GreedyResult
		if err := json.Unmarshal(b, &nb); err != nil {
			return row, fmt.Errorf("%s: %w", nbJSON, err)
		}
		row.Neighbour = &nb
	}
	s.logf("  greedy %s, %s: well-behaved %d/%d ok, %d failed, p50 %.2f ms, p99 %.2f ms, max %.1f ms; neighbours: %v",
		tg, kind, row.OK, row.Sent, row.Failed, row.P50ms, row.P99ms, row.MaxMs, row.Neighbour)
	return row, nil
}

// startEchoProvider starts `stormbench echo-provider` reading normally (no slow or stalled spells,
// the kernel's buffer sizes) on a free port: it answers every checked body with itself.
func (s *Suite) startEchoProvider(ctx context.Context) (*provider, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	p, err := s.start(ctx, procSpec{name: "echo-provider", argv: []string{s.bins.stormbench, "echo-provider",
		"--listen", "127.0.0.1:" + strconv.Itoa(port), "--rcvbuf", "0", "--mss", "0", "--slow-chance", "0",
		"--stall-chance", "0", "--stats-every", "0"}})
	if err != nil {
		return nil, err
	}
	if err := waitListening(ctx, p, port, 1); err != nil {
		p.Kill()
		return nil, err
	}
	return &provider{kind: "echo", proc: p, addr: "127.0.0.1:" + strconv.Itoa(port), port: port}, nil
}
