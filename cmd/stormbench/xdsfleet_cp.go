package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stormgate/stormgate/internal/childproc"
	"github.com/stormgate/stormgate/internal/promscrape"
)

// fleetCP is one control plane: spawned by the tool, or given by address.
type fleetCP struct {
	addr    string          // ADS
	metrics string          // its --metrics address; "" = unknown
	proc    *childproc.Proc // nil: given by address
	dead    bool
}

func (cp *fleetCP) kill() {
	if cp.proc == nil || cp.dead {
		return
	}
	cp.dead = true
	cp.proc.Kill()
}

func (r *fleetRun) startControlPlanes(ctx context.Context) error {
	if r.o.controlPlanes != "" {
		r.config = r.o.config
		addrs := strings.Split(r.o.controlPlanes, ",")
		ms := strings.Split(r.o.metrics, ",")
		for i, a := range addrs {
			cp := &fleetCP{addr: strings.TrimSpace(a)}
			if r.o.metrics != "" && i < len(ms) {
				cp.metrics = strings.TrimSpace(ms[i])
			}
			r.cps = append(r.cps, cp)
		}
		exp, _, err := r.write(r.gen)
		r.expected = exp
		return err
	}
	bin, err := findSidecar(r.o.sidecar)
	if err != nil {
		return err
	}
	dir := r.o.logDir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "xds-fleet-"); err != nil {
			return err
		}
		r.tmpDir = dir
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	r.config = filepath.Join(dir, "control-plane.yaml")
	exp, _, err := r.write(r.gen)
	if err != nil {
		return err
	}
	r.expected = exp
	for i := range r.o.spawn {
		cp, err := spawnControlPlane(ctx, bin, r.config, filepath.Join(dir, fmt.Sprintf("control-plane-%d.log", i)))
		if err != nil {
			return err
		}
		r.cps = append(r.cps, cp)
		r.logf("control plane %d: ADS %s, metrics %s (log %s)", i, cp.addr, cp.metrics, filepath.Join(dir, fmt.Sprintf("control-plane-%d.log", i)))
	}
	return nil
}

func findSidecar(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "sidecar")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath("sidecar")
	if err != nil {
		return "", errors.New("--spawn needs the sidecar binary: pass --sidecar PATH (make build puts it in bin/)")
	}
	return p, nil
}

// spawnControlPlane starts `sidecar control-plane` on loopback ports and
// learns its addresses from its JSON log, which is copied to logPath.
func spawnControlPlane(ctx context.Context, bin, config, logPath string) (*fleetCP, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	p, err := childproc.Start(context.Background(), childproc.Spec{Name: "control plane", Keep: 1000, Log: logf,
		Argv: []string{bin, "control-plane", "--listen", "127.0.0.1:0", "--config", config,
			"--metrics", "127.0.0.1:0", "--log-format", "json"}})
	if err != nil {
		logf.Close()
		return nil, err
	}
	go func() { <-p.Done(); logf.Close() }() // owned by the process: ends when it has exited
	cp := &fleetCP{proc: p}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if _, err := p.WaitLine(wctx, func(l childproc.Line) bool {
		var m map[string]any
		if !l.Stderr || json.Unmarshal([]byte(l.Text), &m) != nil {
			return false
		}
		switch m["msg"] {
		case "control plane serving":
			cp.addr, _ = m["listen"].(string)
		case "http listener started":
			cp.metrics, _ = m["address"].(string)
		}
		return cp.addr != "" && cp.metrics != ""
	}); err != nil {
		cp.kill()
		return nil, fmt.Errorf("control plane did not report its addresses within 20 s (log: %s)", logPath)
	}
	return cp, nil
}

// fleetScrape is one scrape of every live control plane's /metrics.
type fleetScrape []map[string]*dto.MetricFamily

func (r *fleetRun) scrape(ctx context.Context) fleetScrape {
	var out fleetScrape
	for _, cp := range r.cps {
		if cp.metrics == "" || cp.dead {
			continue
		}
		mfs, err := promscrape.Families(ctx, nil, cp.metrics)
		if err != nil {
			r.logf("scrape %s: %v", cp.metrics, err)
			continue
		}
		out = append(out, mfs)
	}
	return out
}

// sum adds a counter or gauge (all series) over every control plane.
func (s fleetScrape) sum(name string) float64 {
	total := 0.0
	for _, mfs := range s {
		for _, m := range mfs[name].GetMetric() {
			switch {
			case m.GetCounter() != nil:
				total += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				total += m.GetGauge().GetValue()
			case m.GetUntyped() != nil:
				total += m.GetUntyped().GetValue()
			}
		}
	}
	return total
}

// buckets adds a histogram's cumulative buckets over every control plane:
// upper bound -> count.
func (s fleetScrape) buckets(name string) map[float64]float64 {
	out := map[float64]float64{}
	for _, mfs := range s {
		for _, m := range mfs[name].GetMetric() {
			inf := false
			for _, b := range m.GetHistogram().GetBucket() {
				out[b.GetUpperBound()] += float64(b.GetCumulativeCount())
				inf = inf || math.IsInf(b.GetUpperBound(), 1)
			}
			if !inf {
				out[math.Inf(1)] += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

// histogramQuantile returns the upper bound of the bucket holding quantile q
// of what was observed between two scrapes (0 when nothing was).
func histogramQuantile(q float64, before, after map[float64]float64) float64 {
	bounds := make([]float64, 0, len(after))
	for b := range after {
		bounds = append(bounds, b)
	}
	sort.Float64s(bounds)
	total := after[math.Inf(1)] - before[math.Inf(1)]
	if total <= 0 {
		return 0
	}
	for _, b := range bounds {
		if after[b]-before[b] >= q*total {
			if math.IsInf(b, 1) {
				return math.NaN()
			}
			return b
		}
	}
	return math.NaN()
}
