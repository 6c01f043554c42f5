package proxy

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stormgate/stormgate/peer"
)

const svc = "org.stormgate.Greeter"

func TestEchoThroughProxy(t *testing.T) {
	f := newFixture(t, peer.ProviderConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c := f.dial(ctx)
	resp, err := c.Call(ctx, 1, svc, "echo", "hello")
	if err != nil {
		t.Fatal(err)
	}
	if resp.ID != 1 || resp.Status != 20 || resp.Value != "hello" {
		t.Fatalf("got %+v", resp)
	}
}

// TestThousandConsumersSameIDs is acceptance 2 of the core issue: 1,000 consumer
// connections all using ids 1..N concurrently get exactly their own responses;
// every heartbeat is answered by Stormgate and none reaches the provider, which
// sees exactly M connections.
func TestThousandConsumersSameIDs(t *testing.T) {
	const consumers, perConsumer = 1000, 5
	f := newFixture(t, peer.ProviderConfig{}, func(c *Config) { c.UpstreamConns = 4 })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	clients := make([]*peer.Client, consumers)
	for i := range clients {
		clients[i] = f.dial(ctx)
	}
	waitFor(t, 10*time.Second, "sessions", func() bool { return f.srv.Stats().DownstreamConns == consumers })

	var wg sync.WaitGroup
	var bad, hbOK atomic.Int64
	errs := make(chan error, consumers)
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var cw sync.WaitGroup
			for id := int64(1); id <= perConsumer; id++ {
				cw.Add(1)
				go func() {
					defer cw.Done()
					want := fmt.Sprintf("c%d-r%d", i, id)
					resp, err := c.Call(ctx, id, svc, "echo", want)
					if err != nil {
						errs <- fmt.Errorf("consumer %d id %d: %w", i, id, err)
						return
					}
					if resp.ID != id || resp.Value != want || resp.Status != 20 {
						bad.Add(1)
					}
				}()
			}
			// Heartbeats use ids in the same space as the requests, concurrently.
			resp, err := c.Heartbeat(ctx, 1000+int64(i))
			if err == nil && resp.Status == 20 && resp.ID == 1000+int64(i) {
				hbOK.Add(1)
			}
			cw.Wait()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if bad.Load() != 0 {
		t.Fatalf("%d responses carried the wrong id or payload", bad.Load())
	}
	if hbOK.Load() != consumers {
		t.Fatalf("heartbeats answered: %d of %d", hbOK.Load(), consumers)
	}
	for i, c := range clients {
		st := c.Stats()
		if st.Unexpected != 0 {
			t.Fatalf("consumer %d: unexpected responses=%d", i, st.Unexpected)
		}
	}
	ps := f.provider.Stats()
	// Stormgate's own heartbeats reach the provider (a hang probe when a connection is
	// silent for a while on a loaded machine); consumers' never do.
	if own := f.srv.Stats().HeartbeatsSent; ps.HeartbeatsReceived != own {
		t.Fatalf("provider received %d heartbeats, Stormgate sent %d of its own: consumer heartbeats were forwarded",
			ps.HeartbeatsReceived, own)
	}
	if ps.ConnsOpen != 4 || ps.ConnsAccepted != 4 {
		t.Fatalf("provider saw %d open / %d accepted connections; want 4", ps.ConnsOpen, ps.ConnsAccepted)
	}
	if ps.Requests != consumers*perConsumer {
		t.Fatalf("provider saw %d requests; want %d", ps.Requests, consumers*perConsumer)
	}
	st := f.srv.Stats()
	if st.HeartbeatsDownstream != consumers || st.Responses != consumers*perConsumer || st.UnknownIDs != 0 {
		t.Fatalf("stats: %+v", st)
	}
}
