package loadgen

import (
	"context"
	"testing"
	"time"

	"github.com/stormgate/stormgate/peer"
)

// Greedy Triple bulk readers against the Triple echo provider: every call asks for a 20,000-byte
// answer, and every answer is checked as its own key's body. (Run for 5 s: in 1 s, beside a make test
// series' CPU hog and other test binaries under -race, no answer had come yet: sent 200, answered 0.)
func TestGreedyTripleReaders(t *testing.T) {
	p, err := peer.StartTripleEcho(peer.TripleConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	res, err := Greedy(t.Context(), GreedyConfig{Target: p.Addr(), Conns: 2, Size: 20_000, Read: true,
		Duration: 5 * time.Second, Protocol: ProtocolTriple, KeyBase: 1 << 60})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%v; provider %+v", res, p.Stats())
	if res.Answered == 0 || res.Errors != 0 || res.Closed != 0 || res.Sent < res.Answered {
		t.Errorf("%v; want answers, no error, no connection closed", res)
	}
	if v := p.Violations(); len(v) != 0 {
		t.Errorf("provider violations: %v", v)
	}
}

// Greedy Triple consumers that never read open as many streams as the provider allows (100 by
// default) and read nothing more; when the provider goes away, each notices (its PINGs fail) and
// Greedy returns before its duration, counting them closed by the target.
func TestGreedyTripleNonReaders(t *testing.T) {
	p, err := peer.StartTripleEcho(peer.TripleConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const conns = 3
	done := make(chan *GreedyResult, 1)
	go func() {
		res, err := Greedy(context.Background(), GreedyConfig{Target: p.Addr(), Conns: conns, Size: 256 << 10,
			Duration: time.Minute, Protocol: ProtocolTriple, KeyBase: 1 << 60})
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	deadline := time.Now().Add(20 * time.Second)
	for p.Stats().Checked < conns*greedyStreams {
		if time.Now().After(deadline) {
			t.Fatalf("the provider got %d calls, want %d", p.Stats().Checked, conns*greedyStreams)
		}
		time.Sleep(10 * time.Millisecond)
	}
	p.Close()
	select {
	case res := <-done:
		t.Logf("%v", res)
		if res.Sent != conns*greedyStreams || res.Answered != 0 || res.Closed != conns {
			t.Errorf("%v; want %d calls, no answer read, %d connections closed by the target", res, conns*greedyStreams, conns)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Greedy did not notice its target went away")
	}
	if v := p.Violations(); len(v) != 0 {
		t.Errorf("provider violations: %v", v)
	}
}
