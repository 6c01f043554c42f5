package proxy

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stormgate/stormgate/peer"
	"github.com/stormgate/stormgate/proxy/dubbo"
)

// TestHeldForAFullQueueLeaveWhenItDrains: a request held because every provider
// connection's queue was full (upstream.max_queued_bytes) while the provider serves
// leaves the hold queue once a queue has room again, with no other request arriving
// to push it. Before, nothing dispatched the hold queue when a connection's queue
// drained: with the consumers paused by backpressure (or simply done sending) the
// held requests waited out hold.timeout and were answered with errors; the netpoll2
// helper saw bulk senders stall for 1.5 s and more, then fail with status 35.
func TestHeldForAFullQueueLeaveWhenItDrains(t *testing.T) {
	gate := make(chan struct{})
	prov := newScriptedProvider(t, func(c net.Conn, h dubbo.Header, frame []byte) {
		if h.Kind() != dubbo.KindRequest {
			return
		}
		<-gate // the provider reads nothing more until the test opens the gate
		_, _ = c.Write(dubbo.AppendValueResponse(nil, h.ID, dubbo.SerialHessian2, argOf(t, frame)))
	})
	f := newFixture(t, peer.ProviderConfig{}, func(c *Config) {
		c.Upstream = prov.addr()
		c.UpstreamConns = 1
		c.MaxQueuedBytesPerUpstream = 64 << 10
		c.MaxQueuedBytesPerConsumer = 0 // every request is read: only the connection's queue bounds them
		c.HoldTimeout = time.Hour       // an expiry would take the requests away, not the drain
		c.MaxRequestAge = time.Hour
		c.UpstreamInterval = time.Hour
		c.UpstreamHungTimeout = 0
		c.WriteTimeout = 0
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Enough bytes to fill the kernel's buffers on both ends, the connection's queue,
	// and then the hold queue.
	const consumers, each, size = 8, 8, 128 << 10
	var wg sync.WaitGroup
	errs := make(chan error, consumers*each)
	for i := range consumers {
		c := f.dial(ctx)
		for j := range each {
			wg.Add(1)
			go func() {
				defer wg.Done()
				arg := fmt.Sprintf("%d-%d-", i, j) + strings.Repeat("b", size)
				resp, err := c.Call(ctx, int64(j+1), svc, "echo", arg)
				switch {
				case err != nil:
					errs <- fmt.Errorf("consumer %d call %d: %v", i, j, err)
				case resp.Status != dubbo.StatusOK:
					errs <- fmt.Errorf("consumer %d call %d: status %d", i, j, resp.Status)
				}
			}()
		}
	}
	waitFor(t, 30*time.Second, "requests held for a full queue", func() bool { return f.srv.Stats().Held > 0 })
	close(gate) // the provider reads again; no request arrives from now on
	wg.Wait()
	close(errs)
	n := 0
	for err := range errs {
		if n++; n <= 3 {
			t.Error(err)
		}
	}
	if n > 0 {
		t.Fatalf("%d of %d calls failed (stats %+v)", n, consumers*each, f.srv.Stats())
	}
}
