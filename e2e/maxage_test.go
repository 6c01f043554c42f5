package e2e

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"
)

// limits.max_request_age: a request the provider does not answer in time gets
// Stormgate's error response (status 31 SERVER_TIMEOUT) once it is older than the
// limit, its pending entry is freed, and the provider's answer, when it finally
// comes, is dropped (counted as an unknown id), never delivered as a second response.
func TestMaxRequestAge(t *testing.T) {
	const (
		conns  = 20
		maxAge = time.Second
		// The sidecar sweeps pending tables once a second: an entry is answered between
		// maxAge and maxAge + 1 s after it arrived.
		bound = maxAge + time.Second + 500*time.Millisecond
	)
	prov := startProvider(t, "")
	sc := startSidecar(t, prov.addr, "limits:\n  max_request_age: 1s\nhold:\n  timeout: 500ms\n", 4)
	f := dialFleet(t, sc.listen, conns, false)
	sc.waitMetric(t, 20*time.Second, "stormgate_downstream_connections", func(v float64) bool { return v == conns })

	var wg sync.WaitGroup
	slow := make([]*call, conns)
	fast := make([]*call, conns)
	for i, c := range f.conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			// The provider answers "sleep 4s" after 4 s: far past max_request_age.
			s := &call{conn: i, id: 1, sent: time.Now()}
			ch := make(chan struct{})
			go func() {
				defer close(ch)
				s.resp, s.err = c.c.Call(ctx, 1, service, "sleep", "4s")
				s.done = time.Now()
			}()
			// Meanwhile the same connection keeps working.
			q := &call{conn: i, id: 2, sent: time.Now()}
			q.resp, q.err = c.c.Call(ctx, 2, service, "echo", "fast")
			q.done = time.Now()
			<-ch
			slow[i], fast[i] = s, q
		}()
	}
	wg.Wait()
	var lat []time.Duration
	for i := range conns {
		s, q := slow[i], fast[i]
		if !q.ok() || q.latency() > maxAge {
			t.Errorf("consumer %d: echo next to the stuck request: status %d err %v after %v", i, q.resp.Status, q.err, q.latency())
		}
		if s.err != nil || s.resp.Status != 31 {
			t.Errorf("consumer %d: stuck request ended with status %d err %v; want status 31 from the sidecar", i, s.resp.Status, s.err)
			continue
		}
		if !strings.Contains(s.resp.Value, "max_request_age") {
			t.Errorf("error message %q does not name limits.max_request_age", s.resp.Value)
		}
		lat = append(lat, s.latency())
		if l := s.latency(); l < maxAge || l > bound {
			t.Errorf("consumer %d: answered after %v; want within [%v, %v]", i, l, maxAge, bound)
		}
	}
	t.Logf("max_request_age %v: error after min %v max %v", maxAge,
		percentile(lat, 0).Round(time.Millisecond), percentile(lat, 1).Round(time.Millisecond))

	ms, err := sc.scrape()
	if err != nil {
		t.Fatal(err)
	}
	// A call leaves the in-flight count just after its answer is written: a scrape may see it a moment.
	sc.waitMetric(t, 10*time.Second, "stormgate_inflight_requests", func(v float64) bool { return v == 0 })
	if v := ms.Sum("stormgate_local_replies_total", `reason="max_request_age"`); v != conns {
		t.Errorf("stormgate_local_replies_total{max_request_age} = %v, want %d", v, conns)
	}
	// The provider's late answers (at about 4 s) reach the sidecar and are dropped there.
	sc.waitMetric(t, 10*time.Second, "stormgate_upstream_unknown_ids_total", func(v float64) bool { return v >= conns })
	if n := f.unexpected(); n != 0 {
		t.Errorf("%d late provider answers reached consumers after the sidecar had answered", n)
	}
	if n, first := f.closedConns(); n != 0 {
		t.Errorf("%d consumer connections closed (first: %v); want 0", n, first)
	}
}
