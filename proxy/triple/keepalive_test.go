package triple

import (
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/stormgate/stormgate/internal/testkit"
	"github.com/stormgate/stormgate/keepalive"
	"github.com/stormgate/stormgate/proxy"
)

// TestH2WriteTimeout: upstream.write_timeout applies to HTTP/2 provider connections as to Dubbo ones. A
// provider stops reading: a 16 MiB call fills the kernel's buffers and a small call queues behind it in
// Stormgate. After write_timeout with no byte taken, Stormgate closes the connection itself: the call
// partly written gets grpc-status 14 naming the setting, the small one (none of its bytes left Stormgate)
// is sent again on the next connection and answered. Before, the connection stayed until the PING rule
// ended it (keepalive.upstream_max_missed intervals: 90 s by default).
func TestH2WriteTimeout(t *testing.T) {
	clk, srv, fr, u := stalledProvider(t, func(c *proxy.Config) { c.WriteTimeout = 10 * time.Second })
	clk.Add(10 * time.Second)
	envOf(srv).Wheel().Advance(clk.Now())
	testkit.StepClockUntil(t, clk, envOf(srv).Wheel(), time.Second, 100*time.Millisecond, "the stalled connection closed", u.w.Closed)
	got := readAnswersTicking(t, fr, 2, clk, srv)
	if a := got[1]; a.grpcStatus != "14" || !strings.Contains(a.grpcMessage, "upstream.write_timeout") {
		t.Errorf("the big call, partly written: %v, want grpc-status 14 naming upstream.write_timeout", a)
	}
	if a := got[3]; !a.echoed([]byte("small-call")) {
		t.Errorf("the small call, never written: %v, want its own answer from the next connection", a)
	}
}

// probeH2UpstreamInterval: a call the provider never answers, PINGs an hour apart; lowered to 1 s, a PING
// goes out within 3 s on the clock. (A beat PINGs a provider silent for an interval, and beats are
// jittered: the first PING comes within two intervals and their jitter.)
func probeH2UpstreamInterval(t *testing.T) {
	clk := keepalive.NewManualClock(time.Unix(1_700_000_000, 0))
	p := startScriptedH2(t, func(*scriptedConn, uint32, int, []byte) {})
	srv, addr := resendServer(t, p, proxy.Options{Clock: clk}, func(c *proxy.Config) {
		c.UpstreamInterval, c.UpstreamHungTimeout = time.Hour, 0
	})
	_, fr := h2Handshake(t, addr)
	writeCall(t, fr, 1, true, []byte("unanswered"))
	waitFor(t, 10*time.Second, "the call on a provider stream", func() bool { return h2StreamsOpen(srv) == 1 })
	updateLive(t, srv, func(c *proxy.Config) { c.UpstreamInterval = time.Second })
	testkit.StepClockUntil(t, clk, envOf(srv).Wheel(), 3*time.Second, 100*time.Millisecond, "a PING to the provider", func() bool { return metric(t, srv, "stormgate_upstream_heartbeats_sent_total") > 0 })
}

// probeH2WriteTimeout: a provider connection whose writer is stalled, write_timeout an hour; lowered to
// 2 s, the connection is closed within 3 s on the clock.
func probeH2WriteTimeout(t *testing.T) {
	clk, srv, _, u := stalledProvider(t, func(c *proxy.Config) {
		c.WriteTimeout, c.UpstreamHungTimeout, c.UpstreamInterval = time.Hour, 0, time.Hour
	})
	updateLive(t, srv, func(c *proxy.Config) { c.WriteTimeout = 2 * time.Second })
	testkit.StepClockUntil(t, clk, envOf(srv).Wheel(), 3*time.Second, 100*time.Millisecond, "the stalled connection closed", u.w.Closed)
}

// stalledProvider is a server on a manual clock (settings changed by mod) in front of a scripted provider
// whose first connection stops reading, with backUpCalls' two calls on it and its writer stalled.
func stalledProvider(t *testing.T, mod func(*proxy.Config)) (*keepalive.ManualClock, *proxy.Server, *http2.Framer, *h2Upstream) {
	t.Helper()
	clk := keepalive.NewManualClock(time.Unix(1_700_000_000, 0))
	p := startScriptedH2(t, func(pc *scriptedConn, id uint32, n int, body []byte) { pc.answer(id, body) })
	p.stalled = make(chan *scriptedConn, 1)
	srv, addr := resendServer(t, p, proxy.Options{Clock: clk}, func(c *proxy.Config) {
		c.MaxBufferedBytes = 256 << 20
		mod(c)
	})
	<-p.stalled
	fr := backUpCalls(t, srv, addr)
	return clk, srv, fr, waitWriterStalled(t, srv)
}

// waitWriterStalled waits until the first pool's HTTP/2 provider connection has a stalled writer (the
// kernel refused bytes): a write in progress may have queued more behind it before that.
func waitWriterStalled(t *testing.T, srv *proxy.Server) (u *h2Upstream) {
	t.Helper()
	hp := poolOf(srv)
	waitFor(t, 10*time.Second, "the provider connection's writer stalled", func() bool {
		hp.mu.Lock()
		defer hp.unlock()
		if len(hp.ups) == 1 && hp.ups[0].w.StalledFor(envOf(srv).Now()) > 0 {
			u = hp.ups[0]
		}
		return u != nil
	})
	return u
}

// updateLive applies mod to the server's settings with Update.
func updateLive(t *testing.T, srv *proxy.Server, mod func(*proxy.Config)) {
	t.Helper()
	cfg := srv.Config()
	mod(&cfg)
	if err := srv.Update(cfg); err != nil {
		t.Fatal(err)
	}
}
