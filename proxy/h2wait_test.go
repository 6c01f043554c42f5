package proxy

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
)

// The waiting calls go out round robin by consumer, each consumer's oldest first, whatever is removed
// meanwhile.
func TestH2WaitingRoundRobin(t *testing.T) {
	a, b, c := &h2Session{}, &h2Session{}, &h2Session{}
	call := func(s *h2Session, n uint32) *h2Call { return &h2Call{sess: s, down: n} }
	var w h2Waiting
	a1, a2, a3, a4 := call(a, 1), call(a, 3), call(a, 5), call(a, 7)
	b1, b2 := call(b, 1), call(b, 3)
	c1 := call(c, 1)
	for _, x := range []*h2Call{a1, a2, a3, a4, b1, b2, c1} {
		w.push(x)
	}
	if !w.remove(a3) || w.remove(a3) || w.len() != 6 {
		t.Fatalf("remove: len %d", w.len())
	}
	var got []*h2Call
	got = append(got, w.pop(), w.pop()) // a1, b1
	if !w.remove(c1) {                  // c's only call: c leaves the turns before its turn came
		t.Fatal("c1 was not waiting")
	}
	for w.len() > 0 {
		got = append(got, w.pop())
	}
	want := []*h2Call{a1, b1, a2, b2, a4}
	if !slices.Equal(got, want) || w.pop() != nil {
		t.Fatalf("order %v, want %v", callNames(got, a, b), callNames(want, a, b))
	}
	w.push(b1)
	w.push(a1)
	if all := w.all(); len(all) != 2 || w.len() != 0 || w.pop() != nil {
		t.Fatalf("all: %v, len %d after", all, w.len())
	}
}

func callNames(cs []*h2Call, a, b *h2Session) []string {
	var s []string
	for _, c := range cs {
		who := "c"
		switch c.sess {
		case a:
			who = "a"
		case b:
			who = "b"
		}
		s = append(s, fmt.Sprintf("%s%d", who, c.down))
	}
	return s
}

// TestH2WaitingServedFairly: a provider that runs one stream at a time, one provider connection; one
// consumer has ten slow calls in flight (one at the provider, nine waiting in Stormgate) when another
// consumer makes one call. A freed stream goes to the consumers in turn, so the second consumer's call
// is answered while most of the first one's still wait; in arrival order it waited for all ten. (The
// e2e acceptance: TestH2SlowConsumersCostOthersNothing.)
func TestH2WaitingServedFairly(t *testing.T) {
	prov := startGRPCProvider(t, grpc.MaxConcurrentStreams(1))
	srv, addr := newH2Server(t, prov.Addr().String(), ProtoTriple, func(c *Config) { c.UpstreamConns = 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	greedy := grpcClient(t, addr)
	var done atomic.Int32
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Go(func() {
			msg := fmt.Appendf(nil, "greedy-%d", i)
			if _, err := echo(ctx, greedy, msg, "x-sleep-ms", "30"); err != nil {
				t.Errorf("greedy call %d: %v", i, err)
			}
			done.Add(1)
		})
	}
	waitFor(t, 20*time.Second, "nine calls waiting in Stormgate", func() bool {
		hp := srv.poolList()[0].h2
		hp.mu.Lock()
		defer hp.mu.Unlock()
		return hp.waiting.len() == 9
	})
	if _, err := echo(ctx, grpcClient(t, addr), []byte("polite")); err != nil {
		t.Fatal(err)
	}
	ahead := done.Load()
	wg.Wait()
	if ahead > 3 {
		t.Errorf("%d of the other consumer's 10 calls were answered before this one: it waited its turn behind all", ahead)
	}
	t.Logf("answered after %d of the other consumer's 10 calls", ahead)
}
