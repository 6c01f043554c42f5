package promscrape

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Timeout bounds a scrape when the client has no timeout of its own.
const Timeout = 5 * time.Second

// maxBody bounds what a scrape reads.
const maxBody = 32 << 20

// Samples is one scrape: series ("name", or `name{labels}` with the labels as exposed) → value.
type Samples map[string]float64

// Get scrapes http://addr/metrics with client (nil: http.DefaultClient), bounded by Timeout.
func Get(ctx context.Context, client *http.Client, addr string) (Samples, error) {
	var s Samples
	err := fetch(ctx, client, addr, func(r io.Reader) (err error) {
		s, err = Parse(r)
		return err
	})
	return s, err
}

// Families scrapes http://addr/metrics as Get does and parses it with Prometheus's parser.
func Families(ctx context.Context, client *http.Client, addr string) (map[string]*dto.MetricFamily, error) {
	var mfs map[string]*dto.MetricFamily
	err := fetch(ctx, client, addr, func(r io.Reader) (err error) {
		p := expfmt.NewTextParser(model.UTF8Validation)
		mfs, err = p.TextToMetricFamilies(r)
		return err
	})
	return mfs, err
}

func fetch(ctx context.Context, client *http.Client, addr string, parse func(io.Reader) error) error {
	if client == nil {
		client = http.DefaultClient
	}
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	url := "http://" + addr + "/metrics"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return parse(io.LimitReader(resp.Body, maxBody))
}

// Parse reads the Prometheus text format, skipping comments and lines without a value.
func Parse(r io.Reader) (Samples, error) {
	s := Samples{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxBody)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		// The value follows the label set (label values may hold spaces); a timestamp may follow it.
		key, rest := line, ""
		if end := strings.LastIndexByte(line, '}'); end >= 0 {
			key, rest = line[:end+1], line[end+1:]
		} else if i := strings.IndexByte(line, ' '); i >= 0 {
			key, rest = line[:i], line[i:]
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		s[key] = v
	}
	return s, sc.Err()
}

// Sum adds every series of the metric name whose labels contain all of the given `k="v"`
// pairs (for a histogram, name it name_count or name_sum).
func (s Samples) Sum(name string, labels ...string) float64 {
	var total float64
	for k, v := range s {
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
			total += v
		}
	}
	return total
}

// Delta is after.Sum - before.Sum for the metric; 0 when either scrape is missing.
func Delta(before, after Samples, name string, labels ...string) float64 {
	if before == nil || after == nil {
		return 0
	}
	return after.Sum(name, labels...) - before.Sum(name, labels...)
}
