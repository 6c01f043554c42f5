package proxy

import (
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/stormgate/stormgate/keepalive"
	"github.com/stormgate/stormgate/proxy/h2"
)

// TestH2ZeroWindowStall (issue 26 item 5, the zero-window stall guard armed): a consumer that keeps a
// stream's window at zero while its answer waits in Stormgate gets that stream reset (RST_STREAM CANCEL)
// once limits.frame_read_timeout has passed on the server's clock, and not before. Its connection stays up,
// the bytes Stormgate kept for the stream are released, the provider's stream is ended, and the trip is
// counted (stormgate_http2_guard_trips_total{reason="zero_window_stall"}).
func TestH2ZeroWindowStall(t *testing.T) {
	clk := keepalive.NewManualClock(time.Unix(1_700_000_000, 0))
	prov := startGRPCProvider(t)
	srv, addr := newH2ServerWith(t, prov.Addr().String(), ProtoTriple, Options{Clock: clk},
		func(c *Config) { c.FrameReadTimeout = 30 * time.Second })
	nc, fr := stallingConsumer(t, addr, 1)
	waitFor(t, 10*time.Second, "answer bytes kept for the stalled stream", func() bool { return srv.budget.inUse() > 0 })
	advance := func(d time.Duration) {
		for end := clk.Now().Add(d); clk.Now().Before(end); {
			clk.Add(time.Second)
			srv.wheel.Advance(clk.Now()) // returns once what became due has run
		}
	}
	// pingUntilAck sends a PING and reads up to its answer, returning the stream resets seen on the way:
	// anything Stormgate wrote before it answered the PING.
	pingUntilAck := func(what string) (resets []*http2.RSTStreamFrame) {
		t.Helper()
		_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		data := [8]byte{'s', 't', 'a', 'l', 'l', 0, 0, byte(len(what))}
		if err := fr.WritePing(false, data); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatalf("%s: reading: %v (resets so far %d)", what, err, len(resets))
			}
			switch f := f.(type) {
			case *http2.RSTStreamFrame:
				resets = append(resets, f)
			case *http2.GoAwayFrame:
				t.Fatalf("%s: GOAWAY %v %q: the connection should live", what, f.ErrCode, f.DebugData())
			case *http2.PingFrame:
				if f.IsAck() && f.Data == data {
					return resets
				}
			}
		}
	}
	advance(29 * time.Second)
	if r := pingUntilAck("29 s stalled"); len(r) != 0 {
		t.Fatalf("stream %d reset (%v) before limits.frame_read_timeout", r[0].StreamID, r[0].ErrCode)
	}
	advance(2 * time.Second)
	r := pingUntilAck("31 s stalled")
	if len(r) != 1 || r[0].StreamID != 1 || r[0].ErrCode != http2.ErrCodeCancel {
		t.Fatalf("after limits.frame_read_timeout: resets %v, want RST_STREAM CANCEL on stream 1", r)
	}
	if n := testutilCounter(srv.m.h2Guards[h2.GuardZeroWindow]); n != 1 {
		t.Errorf("zero_window_stall counted %v times, want 1", n)
	}
	waitFor(t, 10*time.Second, "the stalled stream's bytes released", func() bool { return srv.budget.inUse() == 0 })
	hp := srv.poolList()[0].h2
	waitFor(t, 10*time.Second, "no provider stream left open", func() bool {
		hp.mu.Lock()
		defer hp.mu.Unlock()
		n := 0
		for _, u := range hp.ups {
			n += len(u.calls) + u.conn.OpenStreams()
		}
		return n == 0
	})
	if st := srv.Stats(); st.Closed["http2_error"] != 0 || st.Closed["slow_consumer"] != 0 {
		t.Errorf("consumers closed: %v", st.Closed)
	}
}
