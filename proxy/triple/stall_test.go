package triple

import (
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/stormgate/stormgate/keepalive"
	"github.com/stormgate/stormgate/proxy"
	"github.com/stormgate/stormgate/proxy/h2"
)

// TestH2ZeroWindowStall (issue 26 item 5, the zero-window stall guard armed): a consumer that keeps a
// stream's window at zero while its answer waits in Stormgate gets that stream reset (RST_STREAM CANCEL)
// once limits.frame_read_timeout has passed on the server's clock, and not before. Its connection stays up,
// the bytes Stormgate kept for the stream are released, the provider's stream is ended, and the trip is
// counted (stormgate_http2_guard_trips_total{reason="zero_window_stall"}).
func TestH2ZeroWindowStall(t *testing.T) {
	st := newStallFixture(t)
	st.advance(29 * time.Second)
	if r := st.pingUntilAck("29 s stalled"); len(r) != 0 {
		t.Fatalf("stream %d reset (%v) before limits.frame_read_timeout", r[0].StreamID, r[0].ErrCode)
	}
	st.advance(2 * time.Second)
	st.wantStallReset("31 s stalled")
	if n := testutilCounter(h2Of(st.srv).m.guards[h2.GuardZeroWindow]); n != 1 {
		t.Errorf("zero_window_stall counted %v times, want 1", n)
	}
	waitFor(t, 10*time.Second, "the stalled stream's bytes released", func() bool { return envOf(st.srv).Budget().InUse() == 0 })
	waitFor(t, 10*time.Second, "no provider stream left open", func() bool { return h2StreamsLeft(st.srv) == 0 })
	if s := st.srv.Stats(); s.Closed["http2_error"] != 0 || s.Closed["slow_consumer"] != 0 {
		t.Errorf("consumers closed: %v", s.Closed)
	}
}

// TestH2ZeroWindowStallLive: limits.frame_read_timeout is live for the stall guard too (the live rule,
// proxy/rearm.go): 0 turns it off, and lowering it resets a stream already stalled longer than the new
// value within a tick.
func TestH2ZeroWindowStallLive(t *testing.T) {
	st := newStallFixture(t)
	st.advance(10 * time.Second)
	st.setTimeout(0)
	st.advance(40 * time.Second)
	if r := st.pingUntilAck("50 s stalled, guard off"); len(r) != 0 {
		t.Fatalf("stream %d reset (%v) with limits.frame_read_timeout 0", r[0].StreamID, r[0].ErrCode)
	}
	st.setTimeout(5 * time.Second)
	st.advance(time.Second)
	st.wantStallReset("51 s stalled, timeout lowered to 5 s")
}

// stallFixture is a Server on a manual clock (limits.frame_read_timeout 30 s) and a consumer whose one
// stream waits for a 256 KiB answer behind a zero window.
type stallFixture struct {
	t   *testing.T
	clk *keepalive.ManualClock
	srv *proxy.Server
	nc  net.Conn
	fr  *http2.Framer
}

func newStallFixture(t *testing.T) *stallFixture {
	t.Helper()
	clk := keepalive.NewManualClock(time.Unix(1_700_000_000, 0))
	prov := startGRPCProvider(t)
	srv, addr := newH2ServerWith(t, prov.Addr().String(), proxy.ProtoTriple, proxy.Options{Clock: clk},
		func(c *proxy.Config) { c.FrameReadTimeout = 30 * time.Second })
	nc, fr := stallingConsumer(t, addr, 1)
	waitFor(t, 10*time.Second, "answer bytes kept for the stalled stream", func() bool { return envOf(srv).Budget().InUse() > 0 })
	return &stallFixture{t: t, clk: clk, srv: srv, nc: nc, fr: fr}
}

// advance moves the clock by d a second at a time; each step returns once what became due has run.
func (st *stallFixture) advance(d time.Duration) {
	for end := st.clk.Now().Add(d); st.clk.Now().Before(end); {
		st.clk.Add(time.Second)
		envOf(st.srv).Wheel().Advance(st.clk.Now())
	}
}

func (st *stallFixture) setTimeout(d time.Duration) {
	st.t.Helper()
	cfg := st.srv.Config()
	cfg.FrameReadTimeout = d
	if err := st.srv.Update(cfg); err != nil {
		st.t.Fatal(err)
	}
}

// pingUntilAck sends a PING and reads up to its answer, returning the stream resets seen on the way:
// whatever Stormgate wrote before it answered the PING. A GOAWAY fails the test.
func (st *stallFixture) pingUntilAck(what string) (resets []*http2.RSTStreamFrame) {
	st.t.Helper()
	_ = st.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	data := [8]byte{'s', 't', 'a', 'l', 'l', 0, 0, byte(len(what))}
	if err := st.fr.WritePing(false, data); err != nil {
		st.t.Fatalf("%s: %v", what, err)
	}
	for {
		f, err := st.fr.ReadFrame()
		if err != nil {
			st.t.Fatalf("%s: reading: %v (resets so far %d)", what, err, len(resets))
		}
		switch f := f.(type) {
		case *http2.RSTStreamFrame:
			resets = append(resets, f)
		case *http2.GoAwayFrame:
			st.t.Fatalf("%s: GOAWAY %v %q: the connection should live", what, f.ErrCode, f.DebugData())
		case *http2.PingFrame:
			if f.IsAck() && f.Data == data {
				return resets
			}
		}
	}
}

// wantStallReset checks that stream 1 was reset with CANCEL, and nothing else.
func (st *stallFixture) wantStallReset(what string) {
	st.t.Helper()
	r := st.pingUntilAck(what)
	if len(r) != 1 || r[0].StreamID != 1 || r[0].ErrCode != http2.ErrCodeCancel {
		st.t.Fatalf("%s: resets %v, want RST_STREAM CANCEL on stream 1", what, r)
	}
}
