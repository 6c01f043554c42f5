package promscrape

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

const text = `# HELP stormgate_heartbeats_answered_total x
# TYPE stormgate_heartbeats_answered_total counter
stormgate_heartbeats_answered_total{side="downstream"} 1500
stormgate_heartbeats_answered_total{side="upstream"} 2
stormgate_upstream_heartbeats_sent_total 7
stormgate_local_replies_total{reason="upstream lost, retry"} 3
stormgate_local_replies_total{reason="hold_expired"} 4 1780000000000
go_gc_duration_seconds{quantile="0.5"} 1.5e-05
bad line
`

func TestParse(t *testing.T) {
	m, err := Parse(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"stormgate_heartbeats_answered_total", []string{`side="downstream"`}, 1500},
		{"stormgate_heartbeats_answered_total", nil, 1502},
		{"stormgate_upstream_heartbeats_sent_total", nil, 7},
		{"stormgate_local_replies_total", nil, 7}, // label values with spaces and commas; a timestamp
		{"go_gc_duration_seconds", nil, 1.5e-05},
	} {
		if got := m.Sum(c.name, c.labels...); got != c.want {
			t.Errorf("Sum(%s, %q) = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	before, _ := Parse(strings.NewReader("stormgate_upstream_heartbeats_sent_total 2\n"))
	if d := Delta(before, m, "stormgate_upstream_heartbeats_sent_total"); d != 5 {
		t.Errorf("Delta = %v", d)
	}
	if d := Delta(nil, m, "stormgate_upstream_heartbeats_sent_total"); d != 0 {
		t.Errorf("Delta without a before scrape = %v", d)
	}
}

func TestGetAndFamilies(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(strings.ReplaceAll(text, "bad line\n", "")))
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	m, err := Get(context.Background(), nil, addr)
	if err != nil || m.Sum("stormgate_heartbeats_answered_total") != 1502 {
		t.Fatalf("Get: %v, %v", m, err)
	}
	mfs, err := Families(context.Background(), srv.Client(), addr)
	if err != nil || len(mfs["stormgate_heartbeats_answered_total"].GetMetric()) != 2 {
		t.Fatalf("Families: %v, %v", mfs, err)
	}
	if _, err := Get(context.Background(), nil, strings.TrimPrefix(srv.URL, "http://")+"/x"); err == nil ||
		!strings.Contains(err.Error(), "404") {
		t.Errorf("a 404 scrape: %v", err)
	}
}
