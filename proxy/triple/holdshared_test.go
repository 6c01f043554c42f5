package triple

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stormgate/stormgate/internal/testkit"
	"github.com/stormgate/stormgate/peer"
	"github.com/stormgate/stormgate/proxy"
)

// TestHoldQueueSharedByProtocols (issue 26 item 7, step 3b): one hold queue per provider serves both
// protocols, so hold.max_requests bounds Dubbo's held requests and HTTP/2's calls waiting for a stream
// together, and stormgate_held_requests counts both. The provider (Dubbo and h2c on one port) is away:
// three Dubbo requests are held; of three Triple calls one finds room and two are refused (UNAVAILABLE,
// the hold queue is full). When the provider comes, the four held ones are answered, each its own.
// Before, each protocol had its own queue bounded by hold.max_requests: all six waited, and the gauge
// counted the Dubbo three.
func TestHoldQueueSharedByProtocols(t *testing.T) {
	addr := testkit.AwayAddr(t)
	srv, sidecar := startH2Server(t, addr, proxy.ProtoDubbo|proxy.ProtoTriple, proxy.Options{}, func(c *proxy.Config) {
		c.UpstreamConns = 1
		c.HoldMaxRequests = 4
		c.HoldTimeout = 60 * time.Second
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dc, err := peer.Dial(ctx, sidecar, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			arg := fmt.Sprintf("dubbo-%d", i)
			if r, err := dc.Call(ctx, int64(i+1), svc, "echo", arg); err != nil || r.Value != arg {
				t.Errorf("Dubbo call %d: %+v %v", i, r, err)
			}
		})
	}
	waitFor(t, 20*time.Second, "three Dubbo requests held", func() bool { return metric(t, srv, "stormgate_held_requests") == 3 })

	var ok, refused atomic.Int32
	for i := range 3 {
		wg.Go(func() {
			o := unaryH2(ctx, h2cTransport(sidecar), fmt.Appendf(nil, "triple-%d", i))
			switch {
			case o.ok:
				ok.Add(1)
			case o.unavailable && strings.Contains(o.detail, "hold queue is full"):
				refused.Add(1)
			default:
				t.Errorf("Triple call %d: %+v", i, o)
			}
		})
	}
	waitFor(t, 20*time.Second, "one Triple call held and two refused", func() bool {
		return refused.Load() == 2 && metric(t, srv, "stormgate_held_requests") == 4
	})

	startBothProviderAt(t, ctx, addr)
	wg.Wait()
	if ok.Load() != 1 {
		t.Errorf("%d Triple calls answered by the provider, want the one held", ok.Load())
	}
	waitFor(t, 10*time.Second, "the hold queue empty", func() bool {
		return metric(t, srv, "stormgate_held_requests") == 0 && poolOf(srv).prov.Hold().Bytes() == 0
	})
}

// TestH2WaitingBoundedByHoldBytes: HTTP/2 calls waiting for a provider stream count their bytes (head and
// the DATA kept while they wait) in hold.max_bytes, as held Dubbo requests do. With the provider away and
// hold.max_bytes 100,000, a 60,000-byte call waits and a second one is refused when its DATA would go past
// the bound; the first is answered, its own bytes, when the provider comes. Before, HTTP/2's waiting calls
// were bounded by count alone.
func TestH2WaitingBoundedByHoldBytes(t *testing.T) {
	addr := testkit.AwayAddr(t)
	srv, sidecar := startH2Server(t, addr, proxy.ProtoTriple, proxy.Options{}, func(c *proxy.Config) {
		c.UpstreamConns = 1
		c.HoldMaxBytes = 100_000
		c.HoldTimeout = 60 * time.Second
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	first := bytes.Repeat([]byte("first-"), 10_000)
	var wg sync.WaitGroup
	wg.Go(func() {
		if o := unaryH2(ctx, h2cTransport(sidecar), first); !o.ok {
			t.Errorf("the first call: %+v", o)
		}
	})
	waitFor(t, 20*time.Second, "the first call held with its body", func() bool {
		return metric(t, srv, "stormgate_held_requests") == 1 && poolOf(srv).prov.Hold().Bytes() > len(first)
	})
	o := unaryH2(ctx, h2cTransport(sidecar), bytes.Repeat([]byte("second"), 10_000))
	if !o.unavailable || !strings.Contains(o.detail, "hold.max_bytes") {
		t.Errorf("the second call, past hold.max_bytes: %+v, want UNAVAILABLE naming hold.max_bytes", o)
	}
	startGRPCProviderAt(t, addr)
	wg.Wait()
	waitFor(t, 10*time.Second, "the hold queue empty", func() bool {
		return metric(t, srv, "stormgate_held_requests") == 0 && poolOf(srv).prov.Hold().Bytes() == 0
	})
}
