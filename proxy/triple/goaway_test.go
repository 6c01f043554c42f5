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

// TestH2GoAwayReachesABusyConsumer: a connection error's GOAWAY reaches the consumer even when it waits in
// Stormgate behind answers the consumer has not read yet (a stalled writer): the connection is closed
// once the writer has written it, not at once (which dropped what was queued, GOAWAY included, and the
// consumer saw a bare FIN). A consumer that never reads gets closed after h2GoAwayLinger all the same.
func TestH2GoAwayReachesABusyConsumer(t *testing.T) {
	clk := keepalive.NewManualClock(time.Unix(1_700_000_000, 0))
	prov := startGRPCProvider(t)
	srv, addr := newH2ServerWith(t, prov.Addr().String(), proxy.ProtoTriple, proxy.Options{Clock: clk},
		func(c *proxy.Config) { c.MaxQueuedBytesPerConn = 256 << 20 })
	flood := func(n int) (net.Conn, *http2.Framer) {
		t.Helper()
		// 32 MiB of answers the consumer does not read yet: more than the kernel's buffers hold.
		nc, fr := h2Handshake(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 30})
		if err := fr.WriteWindowUpdate(0, 1<<30); err != nil {
			t.Fatal(err)
		}
		rawRequests(t, fr, 16, []byte("busy"), h2.HeaderField{Name: "x-answer-bytes", Value: "2097152"})
		waitFor(t, 20*time.Second, "answers waiting in a stalled writer", func() bool { return envOf(srv).Budget().InUse() >= 8<<20 })
		for range 10000 { // answers sent meanwhile earn free PINGs (up to 4,096): far more than that and the budget
			if err := fr.WritePing(false, [8]byte{'f', 'l', 'o', 'o', 'd'}); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, 10*time.Second, "the PING flood stopped", func() bool {
			return testutilCounter(h2Of(srv).m.guards[h2.GuardPingFlood]) == float64(n)
		})
		return nc, fr
	}

	nc, fr := flood(1)
	_ = nc.SetReadDeadline(time.Now().Add(60 * time.Second))
	var goAway *http2.GoAwayFrame
	data := 0
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			break
		}
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			goAway = f
		case *http2.DataFrame:
			data += len(f.Data())
		}
	}
	if goAway == nil || goAway.ErrCode != http2.ErrCodeEnhanceYourCalm {
		t.Fatalf("after %d bytes of answers: GOAWAY %v, want ENHANCE_YOUR_CALM before the connection ends", data, goAway)
	}
	nc.Close() // Stormgate shut its side after the GOAWAY; the consumer closes its own
	waitFor(t, 10*time.Second, "counted as http2_error", func() bool { return srv.Stats().Closed["http2_error"] == 1 })

	// One that never reads: closed once the linger bound passed on the server's clock.
	flood(2)
	if n := srv.Stats().Closed["http2_error"]; n != 1 {
		t.Fatalf("%d consumers closed before the linger bound, want 1", n)
	}
	// The guard's trip is counted before the session arms its linger bound (h2Session.process, then
	// Consumer.Linger): advancing the clock in between armed it a second late for good (failed in a
	// make test run beside a CPU hog; every time with a 200 ms sleep before the Schedule).
	waitFor(t, 10*time.Second, "the linger bound armed", func() bool {
		armed := 0
		for _, h := range sessionsOf(srv) {
			if h.consumer.Lingering() {
				armed++
			}
		}
		return armed == 1
	})
	clk.Add(h2GoAwayLinger)
	envOf(srv).Wheel().Advance(clk.Now())
	waitFor(t, 10*time.Second, "the consumer that never reads closed", func() bool { return srv.Stats().Closed["http2_error"] == 2 })
	waitFor(t, 10*time.Second, "every kept byte released", func() bool { return envOf(srv).Budget().InUse() == 0 })
}

// TestH2GoAwayOutlivesAFlood: 50 PING floods, each on a fresh connection that goes on flooding after the
// GOAWAY; every one gets its GOAWAY ENHANCE_YOUR_CALM before its connection ends. Closing the socket at
// once lost it in 3 of 60: close(2) with the flood's bytes unread sends RST, which discards what the
// kernel had not sent yet (the GOAWAY, the last PING answers).
func TestH2GoAwayOutlivesAFlood(t *testing.T) {
	prov := startGRPCProvider(t)
	_, addr := newH2Server(t, prov.Addr().String(), proxy.ProtoTriple)
	for i := range 50 {
		nc, fr := h2Handshake(t, addr)
		sent := make(chan int)
		go func() {
			n := 0
			for ; n < 10000 && fr.WritePing(false, [8]byte{'f', 'l', 'o', 'o', 'd'}) == nil; n++ {
			}
			sent <- n
		}()
		var goAway *http2.GoAwayFrame
		answers := 0
		var end error
		for end == nil {
			var f http2.Frame
			if f, end = fr.ReadFrame(); end == nil {
				switch f := f.(type) {
				case *http2.GoAwayFrame:
					goAway = f
				case *http2.PingFrame:
					answers++
				}
			}
		}
		nc.Close()
		n := <-sent
		if goAway == nil || goAway.ErrCode != http2.ErrCodeEnhanceYourCalm {
			t.Fatalf("flood %d: GOAWAY %v after %d PING answers (%d PINGs sent), then %v", i, goAway, answers, n, end)
		}
	}
}
