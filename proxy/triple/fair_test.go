package triple

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stormgate/stormgate/internal/testkit"
	"github.com/stormgate/stormgate/proxy"
	"google.golang.org/grpc"
)

// TestH2WaitingServedFairly: a provider that runs one stream at a time, one provider connection; one
// consumer has ten slow calls in flight (one at the provider, nine waiting in Stormgate) when another
// consumer makes one call. A freed stream goes to the consumers in turn, so the second consumer's call
// is answered while most of the first one's still wait; in arrival order it waited for all ten. (The
// e2e acceptance: TestH2SlowConsumersCostOthersNothing.)
func TestH2WaitingServedFairly(t *testing.T) {
	prov := startGRPCProvider(t, grpc.MaxConcurrentStreams(1))
	srv, addr := newH2Server(t, prov.Addr().String(), proxy.ProtoTriple, func(c *proxy.Config) { c.UpstreamConns = 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	greedy := testkit.GRPCClient(t, addr)
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
		hp := poolOf(srv)
		hp.mu.Lock()
		defer hp.mu.Unlock()
		return hp.prov.Hold().CallsWaiting() == 9
	})
	if _, err := echo(ctx, testkit.GRPCClient(t, addr), []byte("polite")); err != nil {
		t.Fatal(err)
	}
	ahead := done.Load()
	wg.Wait()
	if ahead > 3 {
		t.Errorf("%d of the other consumer's 10 calls were answered before this one: it waited its turn behind all", ahead)
	}
	t.Logf("answered after %d of the other consumer's 10 calls", ahead)
}
