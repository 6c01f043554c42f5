package loadgen

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stormgate/stormgate/peer"
)

// Against the project's test provider, which decodes our request bodies: every method's outcome
// lands in its own counter, and the provider's own heartbeats are answered.
func TestAgainstPeerProvider(t *testing.T) {
	p, err := peer.NewProvider(peer.ProviderConfig{HeartbeatInterval: 100 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		p.Close()
		<-done
	})

	for _, tc := range []struct {
		method string
		check  func(*Result) bool
	}{
		{"echo", func(r *Result) bool { return r.OK == r.Sent }},
		{"fail", func(r *Result) bool { return r.Exceptions == r.Sent }},
		{"error", func(r *Result) bool { return r.ErrorByStatus[80] == r.Sent }},
		{"no-such-method", func(r *Result) bool { return r.ErrorByStatus[60] == r.Sent }},
	} {
		before := p.Stats()
		res := run(t, Config{Target: p.Addr(), Conns: 4, Rate: 200, Duration: 300 * time.Millisecond,
			Method: tc.method, HeartbeatInterval: 50 * time.Millisecond})
		after := p.Stats()
		if res.Sent != 60 || !tc.check(res) || after.BadRequests != before.BadRequests {
			t.Fatalf("%s: sent %d ok %d exceptions %d errors %v bad requests %d", tc.method, res.Sent, res.OK,
				res.Exceptions, res.ErrorByStatus, after.BadRequests-before.BadRequests)
		}
		if res.HeartbeatsAnswered != res.HeartbeatsSent || res.HeartbeatsSent == 0 {
			t.Fatalf("%s: heartbeats %d/%d", tc.method, res.HeartbeatsAnswered, res.HeartbeatsSent)
		}
		if res.ServerHeartbeats == 0 {
			t.Fatalf("%s: the provider's heartbeats (every 100 ms) were not seen", tc.method)
		}
	}
}

// Checked bodies against the echo provider: every answer is compared byte for byte, one-way
// requests reach the provider intact and once, and nothing is counted as a mismatch.
func TestCheckedBodiesAgainstEchoProvider(t *testing.T) {
	var oneWay atomic.Int64
	p, err := peer.StartEcho(peer.EchoConfig{
		Seed: 3, RecvBuf: 4096,
		Reading:  peer.Reading{MaxRead: 3000, PauseChance: 0.01, MaxPause: time.Millisecond},
		OnOneWay: func([]byte) { oneWay.Add(1) },
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	res := run(t, Config{Target: p.Addr(), Conns: 8, Rate: 400, Duration: 500 * time.Millisecond,
		BodyMin: 1, BodyMax: 100 << 10, OneWay: 0.2, KeyBase: 1 << 40, Seed: 11})
	if res.Sent == 0 || res.OneWaySent == 0 || res.OK != res.Sent || res.BodyMismatches != 0 {
		t.Fatalf("sent %d one-way %d ok %d mismatches %d", res.Sent, res.OneWaySent, res.OK, res.BodyMismatches)
	}
	waitUntil(t, "one-way bodies at the provider", func() bool { return uint64(oneWay.Load()) == res.OneWaySent })
	st := p.Stats()
	if st.Violations != 0 || st.Requests != res.Sent || st.OneWay != res.OneWaySent {
		t.Fatalf("provider %+v, violations %v", st, p.Violations())
	}
	if res.Seed != 11 || res.KeyBase != 1<<40 {
		t.Fatalf("the result does not record the seed and key base: %d %d", res.Seed, res.KeyBase)
	}
}

// An answer that is not the request's own body counts as a mismatch, and as foreign when it is
// another request's intact body.
func TestCheckedBodyMismatches(t *testing.T) {
	p := startResponder(t, func(p *responder) {
		p.reply = func(n int64) (byte, []byte) {
			switch n % 3 {
			case 0: // another request's body, intact
				return statusOK, peer.AppendBody(nil, 1<<50+uint64(n), 40)
			case 1: // damaged
				return statusOK, []byte("not a checked body")
			}
			return 35, []byte{0x04, 'l', 'o', 's', 't'} // an error status: not a mismatch
		}
	})
	res := run(t, Config{Target: p.addr(), Conns: 3, Rate: 300, Duration: 300 * time.Millisecond,
		BodyMin: 20, BodyMax: 60})
	if res.Sent != 90 || res.BodyMismatches != 60 || res.ForeignBodies != 30 || res.ErrorByStatus[35] != 30 || res.OK != 0 {
		t.Fatalf("sent %d mismatches %d foreign %d errors %v ok %d", res.Sent, res.BodyMismatches,
			res.ForeignBodies, res.ErrorByStatus, res.OK)
	}
}

// A target that stops reading for longer than one blocking write slice (50 ms): once it reads
// again, every queued request must still go out and be answered. (The write deadline of the
// timed-out slice used to stay set, so every later write on that connection failed at once:
// the connection never wrote again and the shard writer spun at 100% CPU.)
func TestWritesResumeAfterTheTargetStalls(t *testing.T) {
	p, err := peer.StartEcho(peer.EchoConfig{RecvBuf: 4096, MaxSegment: 1460}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	cfg := Config{Target: p.Addr(), Conns: 1, Rate: 100, Duration: time.Second, Timeout: 5 * time.Second,
		BodyMin: 64 << 10, BodyMax: 64 << 10}
	cfg.hooks.beforeRequest = func(k uint64) {
		if k == 0 {
			p.Stall(500 * time.Millisecond)
		}
	}
	res := run(t, cfg)
	if res.OK != res.Sent || res.Timeouts != 0 {
		t.Fatalf("sent %d ok %d timeouts %d: writes did not resume after the stall", res.Sent, res.OK, res.Timeouts)
	}
}
