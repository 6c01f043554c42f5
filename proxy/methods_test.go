package proxy

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/stormgate/stormgate/internal/testkit"
	"github.com/stormgate/stormgate/keepalive"
	"github.com/stormgate/stormgate/peer"
	"github.com/stormgate/stormgate/proxy/dubbo"
	"github.com/stormgate/stormgate/proxy/wire"
)

// TestMethodLabels (issue 25): each answer is counted under its service, method and
// Dubbo status name, business exceptions and durations per method, with the test
// provider's methods: echo (OK), fail (a business exception, status OK), error (80),
// an unknown method (60), and a group and version from the attachments.
func TestMethodLabels(t *testing.T) {
	f := newFixture(t, peer.ProviderConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := f.dial(ctx)
	calls := []struct {
		method string
		n      int
		status byte
	}{{"echo", 5, 20}, {"fail", 2, 20}, {"error", 3, 80}, {"no-such-method", 1, 60}}
	id := int64(0)
	for _, cl := range calls {
		for range cl.n {
			id++
			resp, err := c.Call(ctx, id, svc, cl.method, "x")
			if err != nil || resp.Status != cl.status {
				t.Fatalf("%s: %+v %v", cl.method, resp, err)
			}
		}
	}
	// A group and a version: the service label is Dubbo's service key.
	body := dubbo.AppendHessianString(nil, "2.0.2")
	for _, s := range []string{svc, "1.2.0", "echo", "Ljava/lang/String;", "grouped"} {
		body = dubbo.AppendHessianString(body, s)
	}
	body = append(body, 'H')
	for _, s := range []string{"group", "blue", "version", "1.2.0"} {
		body = dubbo.AppendHessianString(body, s)
	}
	body = append(body, 'Z')
	frame := append(dubbo.AppendHeader(nil, dubbo.Header{Flags: 0xc2, ID: 99, BodyLen: int32(len(body))}), body...)
	if resp, err := c.Roundtrip(ctx, frame); err != nil || resp.Status != 20 {
		t.Fatalf("grouped call: %+v %v", resp, err)
	}

	req := testkit.Series(t, f.reg, "stormgate_method_requests_total")
	for k, want := range map[string]float64{
		"method=echo,service=" + svc + ",status=OK":                          5,
		"method=fail,service=" + svc + ",status=OK":                          2,
		"method=error,service=" + svc + ",status=SERVER_ERROR":               3,
		"method=error,service=" + svc + ",status=OK":                         0, // created with the pair
		"method=no-such-method,service=" + svc + ",status=SERVICE_NOT_FOUND": 1,
		"method=echo,service=blue/" + svc + ":1.2.0,status=OK":               1,
		"method=unknown,service=unknown,status=OK":                           0,
		"method=other,service=other,status=OK":                               0,
	} {
		if got, ok := req[k]; !ok || got != want {
			t.Errorf("requests{%s} = %v (present %v), want %v; all: %v", k, got, ok, want, req)
		}
	}
	exc := testkit.Series(t, f.reg, "stormgate_method_exceptions_total")
	if exc["method=fail,service="+svc] != 2 || exc["method=echo,service="+svc] != 0 {
		t.Errorf("exceptions: %v", exc)
	}
	dur := testkit.Series(t, f.reg, "stormgate_method_request_duration_seconds")
	if dur["method=echo,service="+svc] != 5 || dur["method=error,service="+svc] != 3 {
		t.Errorf("duration counts: %v", dur)
	}
	if g := testkit.Series(t, f.reg, "stormgate_method_labels")[""]; g != 5 {
		t.Errorf("stormgate_method_labels = %v, want 5", g)
	}
	if g := testkit.Series(t, f.reg, "stormgate_method_labels_limit")[""]; g != 500 {
		t.Errorf("stormgate_method_labels_limit = %v, want 500", g)
	}
}

// TestMethodGarbageIsUnknown (issue 25, acceptance 1): bodies that are not a Dubbo
// request, or another serialization, are counted under unknown and reach the provider
// unchanged: the call's answer is the provider's own.
func TestMethodGarbageIsUnknown(t *testing.T) {
	f := newFixture(t, peer.ProviderConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := f.dial(ctx)
	garbage := []byte{0xff, 0x00, 0x13, 'x', 'y', 'Z'}
	frames := [][]byte{
		append(dubbo.AppendHeader(nil, dubbo.Header{Flags: 0xc2, ID: 1, BodyLen: int32(len(garbage))}), garbage...),
		func() []byte { // the echo request, said to be another serialization
			b := dubbo.AppendRequest(nil, 2, true, svc, "echo", "x")
			b[2] = 0xc0 | 23
			return b
		}(),
	}
	// The provider's own answers: BAD_REQUEST for a body it cannot decode; the test
	// provider reads the other serialization's body as hessian2 and echoes it.
	for i, want := range []byte{40, 20} {
		resp, err := c.Roundtrip(ctx, frames[i])
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status != want || resp.ID != int64(i+1) {
			t.Fatalf("answer %+v, want the provider's status %d", resp, want)
		}
	}
	if resp, err := c.Call(ctx, 3, svc, "echo", "still fine"); err != nil || resp.Value != "still fine" {
		t.Fatalf("the connection after garbage: %+v %v", resp, err)
	}
	req := testkit.Series(t, f.reg, "stormgate_method_requests_total")
	if req["method=unknown,service=unknown,status=BAD_REQUEST"] != 1 || req["method=unknown,service=unknown,status=OK"] != 1 ||
		req["method=echo,service="+svc+",status=OK"] != 1 {
		t.Errorf("want unknown BAD_REQUEST 1, unknown OK 1, echo 1: %v", req)
	}
}

// TestMethodCardinalityBound (issue 25, acceptance 1): at most metrics.max_methods pairs;
// the rest count under other, which the overflow counter reports; raising the bound live
// lets new pairs in, and a known pair keeps its series.
func TestMethodCardinalityBound(t *testing.T) {
	f := newFixture(t, peer.ProviderConfig{}, func(c *Config) { c.MaxMethods = 3 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := f.dial(ctx)
	call := func(id int64, method string) {
		t.Helper()
		if _, err := c.Call(ctx, id, svc, method, "x"); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 {
		call(int64(i+1), fmt.Sprintf("m%d", i))
	}
	call(11, "m0")
	req := testkit.Series(t, f.reg, "stormgate_method_requests_total")
	methods := map[string]bool{}
	for k := range req {
		for _, kv := range strings.Split(k, ",") {
			if m, ok := strings.CutPrefix(kv, "method="); ok {
				methods[m] = true
			}
		}
	}
	if len(methods) != 5 || !methods["m0"] || !methods["m2"] || methods["m3"] || !methods["other"] || !methods["unknown"] {
		t.Fatalf("methods exported: %v", methods)
	}
	// not-found answers: the test provider knows none of these methods
	if got := req["method=m0,service="+svc+",status=SERVICE_NOT_FOUND"]; got != 2 {
		t.Errorf("m0 = %v, want 2", got)
	}
	if got := req["method=other,service=other,status=SERVICE_NOT_FOUND"]; got != 7 {
		t.Errorf("other = %v, want 7", got)
	}
	if got := testkit.Series(t, f.reg, "stormgate_method_labels_overflow_total")[""]; got != 7 {
		t.Errorf("overflow = %v, want 7", got)
	}
	if got := testkit.Series(t, f.reg, "stormgate_method_labels")[""]; got != 3 {
		t.Errorf("labels = %v, want 3", got)
	}
	cfg := f.srv.Config()
	cfg.MaxMethods = 4
	if err := f.srv.Update(cfg); err != nil {
		t.Fatal(err)
	}
	call(12, "m9")
	call(13, "m8")
	req = testkit.Series(t, f.reg, "stormgate_method_requests_total")
	if req["method=m9,service="+svc+",status=SERVICE_NOT_FOUND"] != 1 || req["method=other,service=other,status=SERVICE_NOT_FOUND"] != 8 {
		t.Errorf("after raising the bound to 4: %v", req)
	}
}

// TestMethodHoldsAndLocalReplies: a request held while the provider is away and then
// refused at hold.timeout is counted as held, as a local reply by reason, and under
// its status, for its own method.
func TestMethodHoldsAndLocalReplies(t *testing.T) {
	clk := keepalive.NewManualClock(time.Unix(1_000_000, 0))
	f := newFixtureWith(t, peer.ProviderConfig{}, Options{Clock: clk})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := f.dial(ctx)
	if _, err := c.Call(ctx, 1, svc, "echo", "before"); err != nil {
		t.Fatal(err)
	}
	f.provider.Close()
	waitFor(t, 10*time.Second, "the provider gone", func() bool { return f.readyConns() == 0 })
	done := make(chan peer.Response, 1)
	go func() {
		resp, _ := c.Call(ctx, 2, svc, "slowpoke", "held")
		done <- resp
	}()
	waitFor(t, 10*time.Second, "the request held", func() bool { return f.srv.pools[0].hold.Len() == 1 })
	f.advance(3*time.Second+50*time.Millisecond, 100*time.Millisecond, false)
	if resp := <-done; resp.Status != 35 {
		t.Fatalf("held request answered %+v, want CHANNEL_INACTIVE", resp)
	}
	held := testkit.Series(t, f.reg, "stormgate_method_held_requests_total")
	if held["kind=held,method=slowpoke,service="+svc] != 1 {
		t.Errorf("held: %v", held)
	}
	local := testkit.Series(t, f.reg, "stormgate_method_local_replies_total")
	if local["method=slowpoke,reason=hold_timeout,service="+svc] != 1 {
		t.Errorf("local replies: %v", local)
	}
	if got := testkit.Series(t, f.reg, "stormgate_method_requests_total")["method=slowpoke,service="+svc+",status=CHANNEL_INACTIVE"]; got != 1 {
		t.Errorf("slowpoke CHANNEL_INACTIVE = %v", got)
	}
}

// TestMethodsOff: metrics.max_methods 0 exports no per-method series.
func TestMethodsOff(t *testing.T) {
	f := newFixture(t, peer.ProviderConfig{}, func(c *Config) { c.MaxMethods = 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := f.dial(ctx)
	if _, err := c.Call(ctx, 1, svc, "echo", "x"); err != nil {
		t.Fatal(err)
	}
	if req := testkit.Series(t, f.reg, "stormgate_method_requests_total"); len(req) != 0 {
		t.Fatalf("per-method series with max_methods 0: %v", req)
	}
}

// TestAccessLog: failed and slow calls are logged with their fields, others not, and a
// burst over max_per_second is counted as dropped.
func TestAccessLog(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	f := newFixtureWith(t, peer.ProviderConfig{Methods: map[string]time.Duration{"slow": 30 * time.Millisecond}},
		Options{AccessLogger: zap.New(core)}, func(c *Config) {
			c.AccessLog = AccessLogConfig{Enabled: true, Failed: true, SlowThreshold: 20 * time.Millisecond, MaxPerSecond: 5}
		})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := f.dial(ctx)
	for i, m := range []string{"echo", "error", "fail", "slow"} {
		if _, err := c.Call(ctx, int64(i+1), svc, m, "x"); err != nil {
			t.Fatal(err)
		}
	}
	lines := logs.TakeAll()
	got := map[string]map[string]any{}
	for _, l := range lines {
		got[l.ContextMap()["method"].(string)] = l.ContextMap()
	}
	if _, ok := got["echo"]; ok || len(got) != 3 {
		t.Fatalf("logged %v, want error, fail and slow", got)
	}
	e := got["error"]
	if e["status"] != "SERVER_ERROR" || e["service"] != svc || e["answered_by"] != "provider" || e["held"] != false ||
		e["request_bytes"] == uint64(0) || e["consumer"] == "" {
		t.Errorf("error line: %v", e)
	}
	if got["fail"]["exception"] != true || got["fail"]["status"] != "OK" {
		t.Errorf("fail line: %v", got["fail"])
	}
	// A burst of failures: at most max_per_second lines, the rest dropped and counted.
	for i := range 20 {
		if _, err := c.Call(ctx, int64(100+i), svc, "error", "x"); err != nil {
			t.Fatal(err)
		}
	}
	n := len(logs.TakeAll())
	dropped := testkit.Series(t, f.reg, "stormgate_access_log_dropped_total")[""]
	if n+int(dropped) != 20 || n > 6 {
		t.Errorf("burst of 20 failures: %d lines, %v dropped (max_per_second 5)", n, dropped)
	}
}

// TestMethodMemory1000 (issue 25): the memory 1,000 service/method pairs cost: the table, and each pair
// counted once on each of 4 provider connections' shards, the local shard and the events.
func TestMethodMemory1000(t *testing.T) {
	const pairs, conns = 1000, 4
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var tbl callTable
	tbl.init(pairs)
	shards := make([]MethodShard, conns+1)
	var events paged[callEvent]
	for i := range pairs {
		c := wire.CallName{Service: []byte(fmt.Sprintf("com.example.service%02d.OrderService", i/50)), Method: []byte(fmt.Sprintf("method%04d", i))}
		idx := tbl.index(&c)
		if idx < firstCall {
			t.Fatalf("pair %d not interned: %d", i, idx)
		}
		for s := range shards {
			shards[s].at(idx).observe(0, false, time.Millisecond)
		}
		events.at(idx).held.Add(1)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	used := after.HeapAlloc - before.HeapAlloc
	t.Logf("1,000 pairs, %d shards: %.0f KiB live heap (%.0f bytes per pair)", len(shards), float64(used)/1024, float64(used)/pairs)
	if used > 4<<20 {
		t.Errorf("1,000 pairs cost %d bytes, want under 4 MiB", used)
	}
	runtime.KeepAlive(shards)
	runtime.KeepAlive(&events)
	runtime.KeepAlive(&tbl)
}
