package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stormgate/stormgate/peer"
)

// Issue 5, acceptance 1: with 1,000 consumer connections up and traffic flowing
// through `sidecar run --xds`, an edit of the `sidecar control-plane` YAML pushes
// keepalive.upstream_interval 30s -> 1s and admission.accept_rate 2000 -> 50
// (with accept_burst 500 -> 10 and max_wait 1s -> 4s, without which a burst of
// 500 tokens, or the 1 s max_wait, would admit 100 new connections at once).
// /config_dump shows the new values within 1 s of the push; the behavior
// changes, measured:
//   - the provider's HeartbeatsReceived goes from 0 in a 2 s window to about
//     M/interval per second (M = 4 upstream connections). Upstream heartbeats
//     are sent on idle upstream connections only (DESIGN §3), so both windows
//     have the request stream paused while the 1,000 consumers keep
//     heartbeating (answered by the sidecar);
//   - 100 new connections opened at once get their first reply (a heartbeat)
//     within a few ms of each other before the push, and spread at ~50/s after;
//
// and no consumer connection closes, no request and no heartbeat fails.
//
// The interval goes to 1 s, not lower: the schema's range for
// keepalive.upstream_interval starts at 1 s.
func TestXDSLivePushUnderLoad(t *testing.T) {
	const (
		conns    = 1000
		probes   = 100
		node     = "e2e-live"
		upConns  = 4
		reqRate  = 200.0 // requests/s across the fleet while the stream runs
		hbRate   = 500.0 // consumer heartbeats/s across the fleet, all along
		newRate  = 50.0  // pushed admission.accept_rate
		newBurst = 10    // pushed admission.accept_burst
		newIvl   = time.Second
	)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "control-plane.yaml")
	before := "default:\n" +
		"  keepalive: { upstream_interval: 30s }\n" +
		"  admission: { accept_rate: 2000, accept_burst: 500, max_wait: 1s }\n"
	after := "default:\n" +
		"  keepalive: { upstream_interval: 1s }\n" +
		fmt.Sprintf("  admission: { accept_rate: %v, accept_burst: %d, max_wait: 4s }\n", newRate, newBurst)
	writeFileAtomic(t, cfgPath, before)

	prov := startXDSProvider(t)
	cp := startXDSControlPlane(t, "", cfgPath)
	sc := startXDSSidecar(t, prov.Addr(), cp.addr, node, upConns)
	v1 := cpVersion(t, before, node)
	sc.waitXDSApplied(t, 10*time.Second, v1)

	f := dialFleet(t, sc.listen, conns, false)
	sc.waitMetric(t, 20*time.Second, "stormgate_downstream_connections", func(v float64) bool { return v == conns })
	hbs := startXDSHeartbeats(f, hbRate)
	defer hbs.stop()

	// Before the push: 100 new connections are admitted at once (burst 500).
	pre := xdsAdmissionProbe(t, sc.listen, probes)
	sc.waitMetric(t, 10*time.Second, "stormgate_downstream_connections", func(v float64) bool { return v == conns+probes })

	// Window A: interval 30 s, request stream paused.
	beatsA, sentA := xdsHeartbeatWindow(t, prov, sc, 2*time.Second)

	st := f.startStream(streamConfig{rate: reqRate, duration: 5 * time.Second, method: "echo", arg: "hello"})
	time.Sleep(time.Until(st.start.Add(time.Second))) // one second of steady traffic first
	writeAt := time.Now()
	writeFileAtomic(t, cfgPath, after)
	v2 := cpVersion(t, after, node)
	cd, seenAt := sc.waitConfigDump(t, 5*time.Second, "upstream_interval 1s and accept_rate 50", func(cd configDump) bool {
		return cd.field("keepalive.upstream_interval") == "1s" && cd.field("admission.accept_rate") == fmt.Sprint(newRate)
	})
	// The control plane logs the publish after handing out the snapshots, and its stderr
	// reaches the test through a pipe: the sidecar may show the push before the line is here.
	var pushedAt time.Time
	poll(5*time.Second, func() bool {
		for _, m := range cp.jsonLines("config published") {
			if m["default_version"] == v2 {
				pushedAt = logTime(m)
			}
		}
		return !pushedAt.IsZero()
	})
	if pushedAt.IsZero() {
		t.Fatalf("control plane never logged publishing version %s", v2)
	}
	if cd.Version != v2 || cd.Source != "xds" {
		t.Errorf("/config_dump version %q source %q, want %q from xds", cd.Version, cd.Source, v2)
	}
	if got := cd.field("admission.accept_burst"); got != fmt.Sprint(newBurst) {
		t.Errorf("/config_dump admission.accept_burst = %s, want %d", got, newBurst)
	}
	pushToDump, writeToDump := seenAt.Sub(pushedAt), seenAt.Sub(writeAt)
	if pushToDump > time.Second {
		t.Errorf("/config_dump showed the push %v after the control plane published it, want <= 1s", pushToDump)
	}

	// After the push: 100 new connections are admitted at ~50/s.
	post := xdsAdmissionProbe(t, sc.listen, probes)

	calls := st.wait(t, 30*time.Second)

	// Window B: interval 1 s, request stream over. Start it at the first heartbeat
	// after the stream: connections that just carried a response are not idle yet.
	base := prov.Stats().HeartbeatsReceived
	if !poll(5*time.Second, func() bool { return prov.Stats().HeartbeatsReceived > base }) {
		t.Fatalf("no upstream heartbeat reached the provider within 5s of the stream's end, interval %v", newIvl)
	}
	const windowB = 3 * time.Second
	beatsB, sentB := xdsHeartbeatWindow(t, prov, sc, windowB)
	hbs.stop()

	// Figures.
	tl := count(calls)
	preSpread, postSpread := pre[len(pre)-1]-pre[0], post[len(post)-1]-post[0]
	postRate := float64(len(post)-1-newBurst) / (post[len(post)-1] - post[newBurst]).Seconds()
	rateB := float64(beatsB) / windowB.Seconds()
	want := float64(upConns) / newIvl.Seconds()
	t.Logf("push: file written -> control plane published %v -> /config_dump shows it %v (file -> dump %v)",
		pushedAt.Sub(writeAt).Round(time.Millisecond), pushToDump.Round(time.Millisecond), writeToDump.Round(time.Millisecond))
	t.Logf("provider heartbeats: %d in 2s at 30s interval (sidecar sent %d); %d in %v at 1s interval = %.2f/s (sidecar sent %d), M/interval = %.0f/s",
		beatsA, sentA, beatsB, windowB, rateB, sentB, want)
	t.Logf("admission of %d new connections, first reply after dial: before push p0 %v p50 %v max %v (spread %v); after push p0 %v p50 %v max %v (spread %v, %.1f/s after the burst of %d)",
		probes, pre[0].Round(time.Millisecond), pre[len(pre)/2].Round(time.Millisecond), pre[len(pre)-1].Round(time.Millisecond),
		preSpread.Round(time.Millisecond), post[0].Round(time.Millisecond), post[len(post)/2].Round(time.Millisecond),
		post[len(post)-1].Round(time.Millisecond), postSpread.Round(time.Millisecond), postRate, newBurst)
	t.Logf("requests: %v; consumer heartbeats: %s", tl, hbs)

	if beatsA != 0 {
		t.Errorf("%d upstream heartbeats reached the provider in 2s at a 30s interval, want 0", beatsA)
	}
	// Expected ~0.8*M/interval: with +-20% jitter, a beat that fires before 0.9
	// interval of silence is skipped. Bounds: 0.4x (clearly changed) to 1.25x
	// (the shortest jittered interval) plus one beat per connection in flight.
	if rateB < 0.4*want || beatsB > int(1.25*want*windowB.Seconds())+upConns {
		t.Errorf("upstream heartbeat rate after the push %.2f/s, want about %.0f/s (M=%d / %v)", rateB, want, upConns, newIvl)
	}
	if preSpread > 750*time.Millisecond {
		t.Errorf("before the push (rate 2000/s, burst 500) %d new connections took %v to be admitted, want < 750ms", probes, preSpread)
	}
	if postRate < 0.6*newRate || postRate > 1.4*newRate {
		t.Errorf("after the push new connections were admitted at %.1f/s, want about %.0f/s", postRate, newRate)
	}
	if tl.ok != tl.sent || tl.sent < int(reqRate*4) {
		t.Errorf("requests: %v, want every one OK and at least %d sent (first connection error: %v)", tl, int(reqRate*4), tl.firstConnErr)
	}
	if n := f.unexpected(); n != 0 {
		t.Errorf("%d responses nobody waited for (duplicates?)", n)
	}
	// At least 2 s worth: a loaded machine drops ticks, and that is not the sidecar's doing.
	if ok, sent := hbs.ok.Load(), hbs.sent.Load(); ok != sent || sent < int64(hbRate*2) {
		t.Errorf("consumer heartbeats: %s, want every one answered and at least %d", hbs, int(hbRate*2))
	}
	if n, first := f.closedConns(); n != 0 {
		t.Errorf("%d of %d consumer connections closed (first: %v)", n, conns, first)
	}
	if n := sc.metric(t, "stormgate_downstream_closed_total"); n != 0 {
		t.Errorf("sidecar closed %v consumer connections", n)
	}
	if n := sc.metric(t, "stormgate_downstream_connections"); n != conns+2*probes {
		t.Errorf("stormgate_downstream_connections = %v, want %d", n, conns+2*probes)
	}
	if n := sc.metric(t, "stormgate_xds_updates_total", `result="nack"`); n != 0 {
		t.Errorf("%v NACKs, want 0", n)
	}
}

// xdsHeartbeatWindow returns the heartbeats that reached the provider, and the
// sidecar's stormgate_upstream_heartbeats_sent_total increase, over d.
func xdsHeartbeatWindow(t *testing.T, prov *peer.Provider, sc *sidecar, d time.Duration) (received int, sent int) {
	t.Helper()
	p0, s0 := prov.Stats().HeartbeatsReceived, sc.metric(t, "stormgate_upstream_heartbeats_sent_total")
	time.Sleep(d) // the measurement window itself
	p1, s1 := prov.Stats().HeartbeatsReceived, sc.metric(t, "stormgate_upstream_heartbeats_sent_total")
	return int(p1 - p0), int(s1 - s0)
}

// xdsAdmissionProbe opens n connections at once; each sends a heartbeat as soon
// as it is connected. It returns, sorted, the time from the start of the probe
// to each heartbeat's reply: the sidecar answers only once it has admitted the
// connection, so these are admission times. The connections stay open until the
// test ends.
func xdsAdmissionProbe(t *testing.T, addr string, n int) []time.Duration {
	t.Helper()
	clients := make([]*peer.Client, n)
	took := make([]time.Duration, n)
	errs := make([]error, n)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := peer.Dial(ctx, addr, 0)
			if err != nil {
				errs[i] = err
				return
			}
			clients[i] = c
			resp, err := c.Heartbeat(ctx, 1)
			switch {
			case err != nil:
				errs[i] = err
			case resp.Status != 20:
				errs[i] = fmt.Errorf("heartbeat reply status %d", resp.Status)
			}
			took[i] = time.Since(start)
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, c := range clients {
			if c != nil {
				_ = c.Close()
			}
		}
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("probe connection %d of %d: %v", i, n, err)
		}
	}
	for i, c := range clients {
		if err := c.Err(); err != nil {
			t.Fatalf("probe connection %d closed: %v", i, err)
		}
	}
	return sortedDurations(took)
}

// xdsHeartbeats sends consumer heartbeats round robin over a fleet at a fixed
// rate until stopped, each in its own goroutine, and counts the outcomes.
type xdsHeartbeats struct {
	sent, ok atomic.Int64
	mu       sync.Mutex
	firstErr error

	cancel   context.CancelFunc
	sched    sync.WaitGroup
	inflight sync.WaitGroup
	once     sync.Once
}

func startXDSHeartbeats(f *fleet, rate float64) *xdsHeartbeats {
	h := &xdsHeartbeats{}
	ctx, cancel := context.WithCancel(f.ctx)
	h.cancel = cancel
	h.sched.Go(func() {
		tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			c := f.conns[i%len(f.conns)]
			h.sent.Add(1)
			h.inflight.Go(func() {
				rctx, rcancel := context.WithTimeout(f.ctx, 5*time.Second)
				defer rcancel()
				resp, err := c.c.Heartbeat(rctx, c.ids.Add(1))
				if err == nil && resp.Status != 20 {
					err = fmt.Errorf("heartbeat reply status %d", resp.Status)
				}
				if err == nil {
					h.ok.Add(1)
					return
				}
				h.mu.Lock()
				if h.firstErr == nil {
					h.firstErr = err
				}
				h.mu.Unlock()
			})
		}
	})
	return h
}

// stop ends the schedule and waits for every heartbeat's outcome.
func (h *xdsHeartbeats) stop() {
	h.once.Do(func() {
		h.cancel()
		h.sched.Wait()
		h.inflight.Wait()
	})
}

func (h *xdsHeartbeats) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return fmt.Sprintf("sent=%d answered=%d first_error=%v", h.sent.Load(), h.ok.Load(), h.firstErr)
}
