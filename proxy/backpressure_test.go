package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stormgate/stormgate/peer"
	"github.com/stormgate/stormgate/proxy/dubbo"
)

// Issue 23 item 2: a consumer with more than limits.max_queued_bytes_per_consumer of
// requests waiting for a provider that serves is not read any more (its socket fills
// and its writes block: TCP slows it alone) until half has drained; then it is read
// again, and every request it sent is answered with its own answer.
func TestConsumerOverItsBoundIsPaused(t *testing.T) {
	const bound, body, offered = 256 << 10, 32 << 10, 400 // 12.5 MiB offered
	prov := newFreezableProvider(t)
	f := newFixture(t, peer.ProviderConfig{}, func(c *Config) {
		c.Upstream = prov.ln.Addr().String()
		c.UpstreamConns = 2
		c.MaxQueuedBytesPerConsumer = bound
		c.MaxQueuedBytesPerUpstream = 64 << 20
		c.UpstreamHungTimeout = 0 // a frozen provider here is slow, not hung
	})
	greedy, err := net.Dial("tcp", f.ln.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer greedy.Close()
	_ = greedy.(*net.TCPConn).SetWriteBuffer(64 << 10)
	prov.freeze()
	frozen := true
	defer func() {
		if frozen {
			prov.thaw()
		}
	}()
	filler := strings.Repeat("x", body)
	wrote := make(chan int, 1)
	go func() {
		var buf []byte
		n := 0
		for ; n < offered; n++ {
			buf = dubbo.AppendRequest(buf[:0], int64(n+1), true, svc, "echo", fmt.Sprintf("%06d%s", n+1, filler))
			_ = greedy.SetWriteDeadline(time.Now().Add(20 * time.Second))
			if _, err := greedy.Write(buf); err != nil {
				break
			}
		}
		wrote <- n
	}()
	waitFor(t, 20*time.Second, "the consumer paused", func() bool { return value(f.srv.m.bp.paused) == 1 })
	// Paused: what it sends waits in the kernel's receive queue of its socket, unread,
	// and what waits in Stormgate stays at the bound (plus one frame). (Before the send
	// queue filled up, the provider's socket buffers took a few MiB.)
	read := f.srv.Stats().Requests
	var ss *session
	f.srv.sessions.each(func(s *session) { ss = s })
	waitFor(t, 20*time.Second, "bytes left unread in the consumer's socket", func() bool {
		n, err := unix.IoctlGetInt(ss.w.fd, unix.SIOCINQ)
		return err == nil && n > 0
	})
	if w := ss.wait.waiting.Load(); w > bound+body+1024 {
		t.Fatalf("%d bytes of the paused consumer wait in Stormgate; the bound is %d", w, bound)
	}
	if again := f.srv.Stats().Requests; again != read {
		t.Fatalf("read %d more requests of a paused consumer", again-read)
	}
	prov.thaw()
	frozen = false
	br := bufio.NewReader(greedy)
	for i := range offered {
		_ = greedy.SetReadDeadline(time.Now().Add(30 * time.Second))
		hdr := make([]byte, dubbo.HeaderLen)
		if _, err := io.ReadFull(br, hdr); err != nil {
			t.Fatalf("answer %d: %v (paused %v)", i, err, value(f.srv.m.bp.paused))
		}
		h, _ := dubbo.ParseHeader(hdr, 1<<30)
		b := make([]byte, h.BodyLen)
		if _, err := io.ReadFull(br, b); err != nil {
			t.Fatal(err)
		}
		v, err := dubbo.ParseValueResponse(b)
		if err != nil || h.Status != dubbo.StatusOK || v != fmt.Sprintf("%06d%s", h.ID, filler) {
			t.Fatalf("answer to %d: status %d, not its own body (%v)", h.ID, h.Status, err)
		}
	}
	if n := <-wrote; n != offered {
		t.Fatalf("the consumer wrote %d of %d requests", n, offered)
	}
	if n := value(f.srv.m.bp.paused); n != 0 {
		t.Fatalf("%v consumers still paused after draining", n)
	}
	if n := value(f.srv.m.bp.pauses); n < 1 {
		t.Fatalf("pauses %v", n)
	}
	t.Logf("read %d requests before the pause; paused %v times", read, value(f.srv.m.bp.pauses))
}

// Issue 23 item 2, the hold queue: while the provider is away, one consumer cannot
// fill the hold queue for everyone: past hold.max_bytes_per_consumer its requests are
// answered (overloaded), and another consumer's are still held.
func TestHeldBytesPerConsumerBound(t *testing.T) {
	f, _, restart := downFixture(t, func(c *Config) { c.HoldMaxBytesPerConsumer = 256 << 10 })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	greedy, polite := f.dial(ctx), f.dial(ctx)
	filler := strings.Repeat("g", 60<<10)
	var held []<-chan callResult
	for i := range 4 { // 4 x 60 KiB: under the bound
		held = append(held, callAsync(ctx, greedy, int64(i+1), fmt.Sprint(i)+filler))
	}
	waitFor(t, 10*time.Second, "four requests held", func() bool { return heldNow(f) == 4 })
	r := <-callAsync(ctx, greedy, 9, "one too many"+filler)
	if r.err != nil || r.resp.Status != dubbo.StatusThreadpoolExhausted {
		t.Fatalf("the request past the bound: %+v %v; want 100 at once", r.resp, r.err)
	}
	other := callAsync(ctx, polite, 1, "polite")
	waitFor(t, 10*time.Second, "the other consumer's request held", func() bool { return heldNow(f) == 5 })
	restart()
	for _, c := range append(held, other) {
		if r := <-c; r.err != nil || r.resp.Status != dubbo.StatusOK {
			t.Fatalf("a held request: %+v %v", r.resp, r.err)
		}
	}
}
