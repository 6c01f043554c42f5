package main

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/stormgate/stormgate/internal/promscrape"
)

// metrics is one scrape of a Prometheus text endpoint: series ("name" or `name{labels}`) → value.
type metrics promscrape.Samples

// scrape fetches http://addr/metrics.
func scrape(ctx context.Context, addr string) (metrics, error) {
	m, err := promscrape.Get(ctx, nil, addr)
	return metrics(m), err
}

// parseMetrics reads the Prometheus text format, skipping comments and unparsable lines.
func parseMetrics(text string) metrics {
	m, _ := promscrape.Parse(strings.NewReader(text))
	return metrics(m)
}

// sum adds every series of the metric name whose labels contain all of the given `k="v"` pairs.
func (m metrics) sum(name string, labels ...string) float64 {
	return promscrape.Samples(m).Sum(name, labels...)
}

// delta returns after.sum - before.sum for the metric.
func delta(before, after metrics, name string, labels ...string) float64 {
	return promscrape.Delta(promscrape.Samples(before), promscrape.Samples(after), name, labels...)
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
