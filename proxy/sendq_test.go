package proxy

import (
	"bytes"
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stormgate/stormgate/keepalive"
	"github.com/stormgate/stormgate/peer"
	"github.com/stormgate/stormgate/proxy/dubbo"
)

// qe is a queued request of session s with an n-byte frame whose first byte is tag.
func qe(s *session, n int, tag byte, arrived int64) queued {
	f := bytes.Repeat([]byte{tag}, n)
	return queued{request: request{sess: s, arrived: arrived}, frame: f}
}

// A consumer with small requests is served within its first turn, however much a
// neighbour with large frames has queued, and over many rounds each consumer gets
// its share in bytes.
func TestSendQueueRoundRobin(t *testing.T) {
	greedy, polite, third := &session{}, &session{}, &session{}
	var q sendQueue
	for i := range 20 {
		q.push(qe(greedy, 256<<10, 'g', int64(i+1)))
	}
	for i := range 40 {
		q.push(qe(polite, 1<<10, 'p', int64(100+i)))
		q.push(qe(third, 2<<10, 't', int64(200+i)))
	}
	if q.len() != 100 || q.weight() != 20*(256<<10)+40*(3<<10) {
		t.Fatalf("len %d bytes %d", q.len(), q.weight())
	}
	if o, ok := q.oldest(); !ok || o != 1 {
		t.Fatalf("oldest %d %v", o, ok)
	}
	// Bytes of other consumers popped before each of polite's requests.
	var before, worst int
	var order []byte
	for {
		e, ok := q.pop()
		if !ok {
			break
		}
		order = append(order, e.frame[0])
		if e.sess == polite {
			worst = max(worst, before)
			before = 0
		} else {
			before += len(e.frame)
		}
	}
	if len(order) != 100 || q.len() != 0 || q.weight() != 0 || len(q.flows) != 0 {
		t.Fatalf("popped %d, left len %d bytes %d flows %d", len(order), q.len(), q.weight(), len(q.flows))
	}
	// A polite request waits behind at most one large frame and a quantum of the third.
	if limit := 256<<10 + sendQuantum; worst > limit {
		t.Fatalf("a small request waited behind %d bytes of others (limit %d); order %s", worst, limit, order)
	}
	if i := bytes.IndexByte(order, 'g'); i < 8 {
		t.Fatalf("the large frames went first: order %s", order)
	}
}

func TestSendQueueRemoveIfAndTakeAll(t *testing.T) {
	a, b := &session{}, &session{}
	var q sendQueue
	for i := range 6 {
		q.push(qe(a, 10, byte('0'+i), int64(10+i)))
		q.push(qe(b, 20, byte('a'+i), int64(20+i)))
	}
	gone := q.removeIf(func(e *queued) bool { return e.sess == a && e.frame[0]%2 == 0 || e.sess == b })
	if len(gone) != 9 || q.len() != 3 || q.weight() != 30 || len(q.active) != 1 || q.flows[b] != nil {
		t.Fatalf("removed %d, left len %d bytes %d active %d", len(gone), q.len(), q.weight(), len(q.active))
	}
	var left []byte
	q.each(func(e *queued) { left = append(left, e.frame[0]) })
	if string(left) != "135" {
		t.Fatalf("left %q, want 135 in order", left)
	}
	if o, _ := q.oldest(); o != 11 {
		t.Fatalf("oldest %d, want 11", o)
	}
	if all := q.takeAll(); len(all) != 3 || q.len() != 0 || q.weight() != 0 {
		t.Fatalf("takeAll %d, left %d", len(all), q.len())
	}
	if _, ok := q.pop(); ok {
		t.Fatal("popped from an empty queue")
	}
}

// Issue 22: a request waiting in a connection's send queue behind a provider that
// reads nothing is answered at its consumer's deadline less the margin, and never
// reaches the provider when it reads again.
func TestQueuedRequestNeverSentPastItsDeadline(t *testing.T) {
	var gate sync.RWMutex
	seen := map[string]int{}
	var mu sync.Mutex
	prov := newScriptedProvider(t, func(c net.Conn, h dubbo.Header, frame []byte) {
		gate.RLock() // the reader stops here while the gate is shut: nothing more is read
		gate.RUnlock()
		arg := argOf(t, frame)
		mu.Lock()
		seen[arg[:min(len(arg), 8)]]++
		mu.Unlock()
		_, _ = c.Write(dubbo.AppendValueResponse(nil, h.ID, dubbo.SerialHessian2, arg[:min(len(arg), 8)]))
	})
	clk := keepalive.NewManualClock(time.Unix(1_000_000, 0))
	f := newFixtureWith(t, peer.ProviderConfig{}, Options{Clock: clk}, func(c *Config) {
		c.Upstream = prov.addr()
		c.UpstreamConns = 1
		c.MaxQueuedBytesPerUpstream = 64 << 20 // everything waits in the send queue, nothing in the hold queue
		c.MaxQueuedBytesPerConsumer = 0        // and the consumer is read whatever it has waiting
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := f.dial(ctx)
	gate.Lock()
	shut := true
	defer func() {
		if shut {
			gate.Unlock() // a failed test must not leave the provider's readers blocked
		}
	}()
	// Fill the provider's socket and Stormgate's writer: 32 requests of 512 KiB, no timeout.
	var fill []<-chan callResult
	const fills = 20 // 10 MiB: more than the kernel's buffers
	for i := range fills {
		fill = append(fill, callAsync(ctx, cl, int64(100+i), "fill-"+strings.Repeat("x", 512<<10)))
	}
	// Stable once the writer waits for a socket the provider does not drain, with
	// requests left in the send queue.
	waitFor(t, 20*time.Second, "every fill request read, requests queued", func() bool {
		return f.srv.Stats().Requests == fills && f.srv.queuedRequests() > 0
	})
	late := callTimeoutAsync(ctx, cl, 1, "late", 500*time.Millisecond)
	waitFor(t, 10*time.Second, "the request queued", func() bool { return f.srv.queuedID(1) })
	f.step(399 * time.Millisecond)
	select {
	case r := <-late:
		t.Fatalf("answered before its deadline less the margin: %+v %v", r.resp, r.err)
	default:
	}
	f.step(time.Millisecond)
	if r := <-late; r.err != nil || r.resp.Status != dubbo.StatusServerTimeout {
		t.Fatalf("answer %+v %v; want 31, not sent", r.resp, r.err)
	}
	gate.Unlock()
	shut = false
	for _, r := range fill {
		if r := <-r; r.err != nil || r.resp.Status != dubbo.StatusOK {
			t.Fatalf("a fill request: %+v %v", r.resp, r.err)
		}
	}
	wantEcho(t, ctx, cl, 2, "after", 0)
	mu.Lock()
	defer mu.Unlock()
	if seen["late"] != 0 || seen["fill-xxx"] != fills || seen["after"] != 1 {
		t.Fatalf("the provider saw %v; want the %d fills and after, never late", seen, fills)
	}
}
