package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// metrics is one scrape of a Prometheus text endpoint: series ("name" or `name{labels}`) → value.
type metrics map[string]float64

// scrape fetches http://addr/metrics.
func scrape(ctx context.Context, addr string) (metrics, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s/metrics: %s", addr, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return nil, err
	}
	return parseMetrics(string(b)), nil
}

// parseMetrics reads the Prometheus text format, skipping comments and unparsable lines.
func parseMetrics(text string) metrics {
	m := metrics{}
	for line := range strings.SplitSeq(text, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		// The value follows the last space outside the label set (label values may hold spaces).
		var key, val string
		if end := strings.LastIndexByte(line, '}'); end >= 0 {
			f := strings.Fields(line[end+1:])
			if len(f) == 0 {
				continue
			}
			key, val = line[:end+1], f[0]
		} else {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			key, val = f[0], f[1]
		}
		v, err := strconv.ParseFloat(val, 64)
		if err != nil {
			continue
		}
		m[key] = v
	}
	return m
}

// sum adds every series of the metric name whose labels contain all of the given `k="v"` pairs.
func (m metrics) sum(name string, labels ...string) float64 {
	var s float64
	for k, v := range m {
		base, lbl, _ := strings.Cut(k, "{")
		if base != name {
			continue
		}
		ok := true
		for _, l := range labels {
			if !strings.Contains(lbl, l) {
				ok = false
				break
			}
		}
		if ok {
			s += v
		}
	}
	return s
}

// delta returns after.sum - before.sum for the metric.
func delta(before, after metrics, name string, labels ...string) float64 {
	if before == nil || after == nil {
		return 0
	}
	return after.sum(name, labels...) - before.sum(name, labels...)
}

// waitReady polls http://addr/readyz until it answers 200.
func waitReady(ctx context.Context, p *Proc, addr string) error {
	return waitFor(ctx, p, 30*time.Second, p.Name+" /readyz", func() bool {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(rctx, http.MethodGet, "http://"+addr+"/readyz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}
