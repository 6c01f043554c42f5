package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stormgate/stormgate/loadgen"
)

// Issue 6, acceptance 1 (dual stack since issue 13): transparent interception end to
// end. In the pod namespace a provider listens on 0.0.0.0:20880 (as dubbo-go does),
// Stormgate runs `--transparent` on [::]:15006, and `sidecar iptables` redirects inbound
// 20880 to it, IPv4 and IPv6. Consumers in the client namespace dial pod:20880 over
// either family, unchanged, and get the provider's answers through Stormgate:
// Stormgate's metrics count every connection and request, and the provider only ever
// sees Stormgate's M loopback connections. `sidecar iptables --clean` then restores
// the pod's rules exactly (nft list ruleset, iptables and ip6tables), after which the
// same dials reach the provider directly.
func TestTransparentNetnsEndToEnd(t *testing.T) {
	const (
		loadConns = 50
		loadRate  = 200
		loadDur   = 3 * time.Second
		probes    = 4 // in-process consumers that check the answers' content
		calls     = 5 // echo calls per probe consumer
	)
	start := time.Now()
	p := startTransparentPod(t, strconv.Itoa(tpProviderPort), []int{tpProviderPort})
	sc := p.sidecar
	if v := sc.metric(t, "stormgate_upstream_connections"); v != 0 {
		t.Errorf("transparent mode dialed %v upstream connections before any consumer came; pools are made on first use", v)
	}

	// Probe consumers: the exact echo comes back, the consumer sees the address it
	// dialed, and its heartbeat is answered (by Stormgate, as the provider's counters
	// show at the end).
	dialed := netip.AddrPortFrom(p.addr, tpProviderPort)
	dialed6 := netip.AddrPortFrom(p.addr6, tpProviderPort)
	for i := range probes {
		to := dialed
		if i%2 == 1 {
			to = dialed6
		}
		c, err := p.dialAddr(t, to)
		if err != nil {
			t.Fatalf("consumer %d: dial %v: %v", i, to, err)
		}
		for j := range calls {
			arg := fmt.Sprintf("transparent-%d-%d", i, j)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			resp, err := c.Call(ctx, int64(j+1), tpService, "echo", arg)
			cancel()
			if err != nil || resp.Status != 20 || resp.Value != arg {
				t.Fatalf("consumer %d call %d: status %d value %q err %v; want status 20 value %q",
					i, j, resp.Status, resp.Value, err, arg)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		hb, err := c.Heartbeat(ctx, 1000)
		cancel()
		if err != nil || hb.Status != 20 {
			t.Fatalf("consumer %d heartbeat: status %d err %v", i, hb.Status, err)
		}
		// Left open (closed by t.Cleanup): the metrics below count them as open.
	}
	sc.waitMetric(t, 10*time.Second, "stormgate_upstream_connections", func(v float64) bool { return v == tpUpstreamM })

	// The load: a separate process in the client namespace, open loop, with heartbeats.
	jsonPath := filepath.Join(t.TempDir(), "load.json")
	load := startProc(t, "load", "ip", "netns", "exec", p.cli.Name, bins.stormbench, "load",
		"--target", dialed.String(), "--conns", strconv.Itoa(loadConns), "--rate", strconv.Itoa(loadRate),
		"--duration", loadDur.String(), "--heartbeat", "1s", "--timeout", "3s", "--json", jsonPath, "--quiet")
	if code := load.wait(t, loadDur+30*time.Second); code != 0 {
		t.Fatalf("stormbench load exited with status %d", code)
	}
	raw, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var res loadgen.Result
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatalf("load result: %v", err)
	}
	t.Logf("load: %d conns opened, %d sent, %d ok, %d errors, %d timeouts, %d lost, %d unsent; p50 %v p99 %v; heartbeats %d/%d answered",
		res.ConnsOpened, res.Sent, res.OK, res.Errors, res.Timeouts, res.Lost, res.Unsent,
		res.Latency.P50, res.Latency.P99, res.HeartbeatsAnswered, res.HeartbeatsSent)
	if res.ConnsOpened != loadConns || res.ConnectFailures.Total() != 0 {
		t.Errorf("load opened %d connections (%+v failures), want %d", res.ConnsOpened, res.ConnectFailures, loadConns)
	}
	if want := uint64(loadRate * loadDur / time.Second); res.Sent < want*9/10 || res.OK != res.Sent || res.Scheduled != res.Sent {
		t.Errorf("load: scheduled %d, sent %d, ok %d; want all of about %d sent and answered OK", res.Scheduled, res.Sent, res.OK, want)
	}
	if res.Errors+res.Exceptions+res.Timeouts+res.Lost+res.Unsent+res.Resets+res.ClosedByPeer+res.UnknownIDs+res.Duplicates != 0 {
		t.Errorf("load: errors %d exceptions %d timeouts %d lost %d unsent %d resets %d closed %d unknown ids %d duplicates %d; want all 0",
			res.Errors, res.Exceptions, res.Timeouts, res.Lost, res.Unsent, res.Resets, res.ClosedByPeer, res.UnknownIDs, res.Duplicates)
	}
	if res.HeartbeatsSent == 0 || res.HeartbeatsAnswered != res.HeartbeatsSent {
		t.Errorf("load heartbeats: %d sent, %d answered; want all answered", res.HeartbeatsSent, res.HeartbeatsAnswered)
	}

	// Stormgate's view: every consumer connection and request went through it, on
	// exactly M upstream connections.
	sc.waitMetric(t, 10*time.Second, "stormgate_downstream_connections", func(v float64) bool { return v == probes })
	ms, err := sc.scrape()
	if err != nil {
		t.Fatal(err)
	}
	wantReqs := float64(res.Sent + probes*calls)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"stormgate_downstream_accepted_total", nil, loadConns + probes},
		{"stormgate_requests_total", nil, wantReqs},
		{"stormgate_responses_total", nil, wantReqs},
		{"stormgate_upstream_connections", nil, tpUpstreamM},
		{"stormgate_heartbeats_answered_total", []string{`side="downstream"`}, float64(res.HeartbeatsAnswered + probes)},
		{"stormgate_admission_rejected_total", nil, 0},
		{"stormgate_downstream_closed_total", []string{`reason="port_not_allowed"`}, 0},
		{"stormgate_local_replies_total", nil, 0},
	} {
		if got := ms.Sum(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}

	// The provider's view, live: only Stormgate's M connections, all from loopback.
	peers := p.providerPeers(t)
	if len(peers) != tpUpstreamM {
		t.Errorf("provider has %d established connections on :%d (%v), want Stormgate's %d", len(peers), tpProviderPort, peers, tpUpstreamM)
	}
	for _, a := range peers {
		if !strings.HasPrefix(a, "127.0.0.1:") {
			t.Errorf("provider connection from %s: only Stormgate's loopback connections should reach it", a)
		}
	}

	// --clean restores the pod's rules byte for byte.
	p.clean(t)
	// Without the rules new consumers reach the provider itself (Stormgate does not see
	// them): the redirect, and only the redirect, was what sent traffic through it.
	for _, to := range []netip.AddrPort{dialed, dialed6} {
		direct, err := p.dialAddr(t, to)
		if err != nil {
			t.Fatalf("dial %v after --clean: %v", to, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := direct.Call(ctx, 1, tpService, "echo", "direct")
		cancel()
		if err != nil || resp.Status != 20 || resp.Value != "direct" {
			t.Fatalf("direct call to %v after --clean: status %d value %q err %v", to, resp.Status, resp.Value, err)
		}
	}
	if got := sc.metric(t, "stormgate_downstream_accepted_total"); got != loadConns+probes {
		t.Errorf("after --clean Stormgate accepted %v connections in total, want still %d", got, loadConns+probes)
	}

	st := p.stopProvider(t)
	t.Logf("provider: %+v", st)
	if st.ConnsAccepted != tpUpstreamM+2 { // Stormgate's M, then the two direct ones after --clean
		t.Errorf("provider accepted %d connections, want Stormgate's %d plus the two direct ones after --clean", st.ConnsAccepted, tpUpstreamM)
	}
	if st.Requests != uint64(wantReqs)+2 {
		t.Errorf("provider answered %d requests, want %v through Stormgate plus 2 direct", st.Requests, wantReqs)
	}
	if st.HeartbeatsReceived != 0 {
		t.Errorf("provider received %d heartbeats; Stormgate answers the consumers' heartbeats itself", st.HeartbeatsReceived)
	}
	t.Logf("scenario took %v", time.Since(start).Round(time.Millisecond))
}

// Issue 6, acceptance 2: the rules redirect 20880 and 20990, the settings allow only
// 20880. A consumer dialing pod:20990 is accepted by the kernel (so the redirect
// happened: nothing listens on 20990), then closed by Stormgate without any answer,
// and counted by reason port_not_allowed. No upstream pool is made for 20990, and
// 20880 keeps working.
func TestTransparentPortNotAllowed(t *testing.T) {
	const (
		denied  = 20990
		refused = 5
	)
	p := startTransparentPod(t, fmt.Sprintf("%d,%d", tpProviderPort, denied), []int{tpProviderPort})
	sc := p.sidecar

	for i := range refused {
		c, err := p.dial(t, denied)
		if err != nil {
			t.Fatalf("dial pod:%d: %v (the REDIRECT rule should have taken it to Stormgate)", denied, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		start := time.Now()
		resp, err := c.Call(ctx, 1, tpService, "echo", "should-not-pass")
		cancel()
		if err == nil {
			t.Fatalf("consumer %d on port %d got a response (status %d, %q); want the connection closed", i, denied, resp.Status, resp.Value)
		}
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("consumer %d on port %d: no answer and no close within 5 s; want the connection closed at once", i, denied)
		}
		select {
		case <-c.Closed():
		case <-time.After(2 * time.Second):
			t.Fatalf("consumer %d: call failed (%v) but the connection is still open", i, err)
		}
		if st := c.Stats(); st.Responses != 0 || st.Unexpected != 0 || st.Events != 0 {
			t.Errorf("consumer %d received frames on a refused connection: %+v", i, st)
		}
		t.Logf("consumer %d on port %d: closed after %v (%v)", i, denied, time.Since(start).Round(time.Microsecond), c.Err())
	}

	sc.waitMetric(t, 5*time.Second, "stormgate_downstream_accepted_total", func(v float64) bool { return v == refused })
	ms, err := sc.scrape()
	if err != nil {
		t.Fatal(err)
	}
	// Admission refuses before the proxy ever sees the connection; the proxy's own check
	// is a second line. Either may count it, but exactly once.
	adm := ms.Sum("stormgate_admission_rejected_total", `reason="port_not_allowed"`)
	prx := ms.Sum("stormgate_downstream_closed_total", `reason="port_not_allowed"`)
	t.Logf("port_not_allowed: admission_rejected_total %v, downstream_closed_total %v", adm, prx)
	if adm+prx != refused {
		t.Errorf("port_not_allowed counted %v (admission) + %v (proxy) times, want %d in total", adm, prx, refused)
	}
	for _, c := range []struct{ name string }{
		{"stormgate_requests_total"}, {"stormgate_upstream_connections"}, {"stormgate_downstream_connections"},
	} {
		if got := ms.Sum(c.name); got != 0 {
			t.Errorf("%s = %v after refused connections only, want 0", c.name, got)
		}
	}

	// The allowed port still works through Stormgate.
	c, err := p.dial(t, tpProviderPort)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	resp, err := c.Call(ctx, 1, tpService, "echo", "allowed")
	cancel()
	if err != nil || resp.Status != 20 || resp.Value != "allowed" {
		t.Fatalf("call on port %d: status %d value %q err %v", tpProviderPort, resp.Status, resp.Value, err)
	}
	sc.waitMetric(t, 10*time.Second, "stormgate_upstream_connections", func(v float64) bool { return v == tpUpstreamM })
	if got := sc.metric(t, "stormgate_requests_total"); got != 1 {
		t.Errorf("stormgate_requests_total = %v, want 1", got)
	}
	if st := p.stopProvider(t); st.ConnsAccepted != tpUpstreamM {
		t.Errorf("provider accepted %d connections, want Stormgate's %d", st.ConnsAccepted, tpUpstreamM)
	}

	p.clean(t)
}
