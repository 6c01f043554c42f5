package loadgen

import (
	"context"
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
