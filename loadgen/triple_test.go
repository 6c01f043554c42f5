package loadgen

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/stormgate/stormgate/peer"
)

func startTriple(t *testing.T, cfg peer.TripleConfig) *peer.TripleEcho {
	t.Helper()
	p, err := peer.StartTripleEcho(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// noViolations fails the test for anything the Triple echo provider recorded.
func noViolations(t *testing.T, p *peer.TripleEcho) {
	t.Helper()
	for _, v := range p.Violations() {
		t.Errorf("provider: %s", v)
	}
}

// Unique checked bodies from 16 B to 100 KB (larger than the provider's 65,535-byte windows, so the
// requests wait for WINDOW_UPDATEs) over 8 connections: every answer is its call's own message, and the
// provider checked and counted every body once.
func TestTripleCheckedBodies(t *testing.T) {
	p := startTriple(t, peer.TripleConfig{})
	res := run(t, Config{Protocol: ProtocolTriple, Target: p.Addr(), Conns: 8, Rate: 1000, Duration: time.Second,
		BodyMin: 16, BodyMax: 100_000})
	if res.Sent != 1000 || res.OK != res.Sent || res.BodyMismatches != 0 || res.Errors != 0 || res.Timeouts != 0 || res.Lost != 0 {
		t.Fatalf("sent %d ok %d mismatches %d errors %v timeouts %d lost %d", res.Sent, res.OK, res.BodyMismatches,
			res.ErrorByStatus, res.Timeouts, res.Lost)
	}
	if res.GRPCStatus[0] != res.Sent || res.ConnsOpened != 8 || res.MaxOpenStreams < 1 {
		t.Fatalf("grpc-status %v, opened %d, most open streams %d", res.GRPCStatus, res.ConnsOpened, res.MaxOpenStreams)
	}
	st := p.Stats()
	if st.Requests != res.Sent || st.Checked != res.Sent || st.UniqueKeys != res.Sent || st.ConnsAccepted != 8 {
		t.Fatalf("provider %+v; we sent %d", st, res.Sent)
	}
	noViolations(t, p)
}

// A provider that answers a wrong body is caught: every third answer has a byte changed (a mismatch),
// and every third after the first is the previous answer's message (another call's intact body:
// foreign too).
func TestTripleWrongBodiesCaught(t *testing.T) {
	var mu sync.Mutex
	var prev []byte
	p := startTriple(t, peer.TripleConfig{Tamper: func(n uint64, msg []byte) []byte {
		mu.Lock()
		defer mu.Unlock()
		last := prev
		prev = bytes.Clone(msg)
		switch {
		case n%3 == 0:
			out := bytes.Clone(msg)
			out[len(out)-1] ^= 1
			return out
		case n%3 == 1 && last != nil:
			return last
		}
		return msg
	}})
	res := run(t, Config{Protocol: ProtocolTriple, Target: p.Addr(), Conns: 4, Rate: 300, Duration: time.Second,
		BodyMin: 16, BodyMax: 2000})
	if res.Sent != 300 || res.BodyMismatches != 199 || res.ForeignBodies != 99 || res.OK != 101 || res.Timeouts != 0 {
		t.Fatalf("sent %d mismatches %d foreign %d ok %d timeouts %d; want 300/199/99/101/0",
			res.Sent, res.BodyMismatches, res.ForeignBodies, res.OK, res.Timeouts)
	}
	noViolations(t, p)
}

// Idle connections PING at the heartbeat interval; every PING is answered, and the provider saw each
// one with the load consumer's mark.
func TestTriplePingsCounted(t *testing.T) {
	p := startTriple(t, peer.TripleConfig{})
	res := run(t, Config{Protocol: ProtocolTriple, Target: p.Addr(), Conns: 10, Duration: time.Second,
		HeartbeatInterval: 50 * time.Millisecond})
	if res.HeartbeatsSent < 10*10 || res.HeartbeatsAnswered != res.HeartbeatsSent || res.HeartbeatRTT.Count != res.HeartbeatsSent {
		t.Fatalf("PINGs sent %d answered %d (RTT samples %d); want at least 100, all answered",
			res.HeartbeatsSent, res.HeartbeatsAnswered, res.HeartbeatRTT.Count)
	}
	if st := p.Stats(); st.Pings != res.HeartbeatsSent || st.LoadPings != res.HeartbeatsSent {
		t.Fatalf("provider saw %d PINGs (%d marked); we sent %d", st.Pings, st.LoadPings, res.HeartbeatsSent)
	}
	noViolations(t, p)

	// A busy connection does not PING: it hears from the server all the time. (That the calls arrive
	// is other tests' business: run 1 of a make test series beside a busy loop had one of the 1,000
	// not answered, and this check was about PINGs; it fails again if the connection was not busy.)
	p2 := startTriple(t, peer.TripleConfig{})
	res = run(t, Config{Protocol: ProtocolTriple, Target: p2.Addr(), Conns: 1, Rate: 1000, Duration: time.Second,
		HeartbeatInterval: 200 * time.Millisecond})
	if res.OK < 990 || res.HeartbeatsSent > 1 {
		t.Fatalf("busy connection: ok %d, PINGs %d; want at least 990 and at most 1 PING; %+v", res.OK, res.HeartbeatsSent, *res)
	}
}

// The server's SETTINGS_MAX_CONCURRENT_STREAMS is kept: with 2 streams and answers held 20 ms, calls
// queue on the one connection instead of opening a third stream (which the provider would refuse and
// record), and all are answered.
func TestTripleMaxConcurrentStreams(t *testing.T) {
	p := startTriple(t, peer.TripleConfig{MaxConcurrentStreams: 2, Delay: 20 * time.Millisecond})
	res := run(t, Config{Protocol: ProtocolTriple, Target: p.Addr(), Conns: 1, Rate: 200, Duration: 500 * time.Millisecond,
		BodyMin: 16, BodyMax: 256})
	// About 100 calls (run 3 of a make test series on a loaded machine paced 99): what matters is that every
	// one is answered, none refused.
	if res.Sent < 90 || res.OK != res.Sent || res.Errors != 0 || res.StreamResets != 0 {
		t.Fatalf("sent %d ok %d errors %v resets %d", res.Sent, res.OK, res.ErrorByStatus, res.StreamResets)
	}
	if res.StreamsWaited == 0 || res.MaxOpenStreams != 2 {
		t.Fatalf("streams waited %d, most open %d; want > 0 and 2", res.StreamsWaited, res.MaxOpenStreams)
	}
	if st := p.Stats(); st.MaxOpenStreams != 2 {
		t.Fatalf("provider saw %d streams open at once", st.MaxOpenStreams)
	}
	noViolations(t, p)
}

// Calls that time out are reset (RST_STREAM CANCEL), as a gRPC client does at its deadline: the
// provider sees every one reset and answers none.
func TestTripleTimeoutsReset(t *testing.T) {
	p := startTriple(t, peer.TripleConfig{Delay: 2 * time.Second})
	res := run(t, Config{Protocol: ProtocolTriple, Target: p.Addr(), Conns: 2, Rate: 100, Duration: 300 * time.Millisecond,
		Timeout: 100 * time.Millisecond})
	if res.Sent != 30 || res.Timeouts != 30 || res.OK != 0 {
		t.Fatalf("sent %d timeouts %d ok %d; want 30/30/0", res.Sent, res.Timeouts, res.OK)
	}
	// Run 3 of a make test series beside a CPU hog timed out here once, without saying what the provider had
	// seen: say it next time.
	defer func() {
		if t.Failed() {
			t.Logf("provider %+v; load %+v", p.Stats(), *res)
		}
	}()
	waitUntil(t, "the provider to see every call reset", func() bool { return p.Stats().ResetsReceived == 30 })
	if st := p.Stats(); st.Requests != 0 {
		t.Fatalf("provider answered %d reset calls", st.Requests)
	}
	noViolations(t, p)
}
