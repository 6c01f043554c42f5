package proxy

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stormgate/stormgate/keepalive"
	"github.com/stormgate/stormgate/peer"
	"github.com/stormgate/stormgate/proxy/dubbo"
)

// TestBadInputClosesOnlyOffender is acceptance 3 of the core issue: each kind of
// malformed input closes the offending consumer only, is counted, and never
// reaches the shared provider connections.
func TestBadInputClosesOnlyOffender(t *testing.T) {
	f := newFixture(t, peer.ProviderConfig{}, func(c *Config) { c.MaxFrameBytes = 64 << 10 })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	good := make([]*peer.Client, 20)
	for i := range good {
		good[i] = f.dial(ctx)
	}
	valid := dubbo.AppendRequest(nil, 7, true, svc, "echo", "x")
	cases := []struct {
		name      string
		reason    CloseReason
		input     []byte
		wantReply bool // BAD_REQUEST with the frame's id before closing
	}{
		{"bad magic", CloseBadMagic, []byte{0xca, 0xfe, 0xc2, 0, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 1, 'N'}, false},
		{"oversize", CloseOversize, []byte{0xda, 0xbb, 0xc2, 0, 0, 0, 0, 0, 0, 0, 0, 9, 0x7f, 0, 0, 0}, true},
		{"negative length", CloseBadLength, []byte{0xda, 0xbb, 0xc2, 0, 0, 0, 0, 0, 0, 0, 0, 9, 0xff, 0xff, 0xff, 0xf0}, true},
		{"garbage mid-stream", CloseBadMagic, append(append([]byte{}, valid...), []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")...), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := f.srv.Stats().Closed[tc.reason.String()]
			nc, err := net.Dial("tcp", f.ln.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			if _, err := nc.Write(tc.input); err != nil {
				t.Fatal(err)
			}
			_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
			var got []byte
			buf := make([]byte, 4096)
			for {
				n, err := nc.Read(buf)
				got = append(got, buf[:n]...)
				if err != nil {
					if ne, ok := err.(net.Error); ok && ne.Timeout() {
						t.Fatalf("offender was not closed within 5s")
					}
					break // EOF or reset: closed
				}
			}
			// Any valid frame before the garbage is still answered; then a BAD_REQUEST if an id was known.
			var statuses []byte
			for len(got) >= dubbo.HeaderLen {
				h, n, err := dubbo.Split(got, 0)
				if err != nil || n == 0 {
					t.Fatalf("reply stream: %v (n=%d) % x", err, n, got)
				}
				statuses = append(statuses, h.Status)
				got = got[n:]
			}
			if tc.wantReply {
				if len(statuses) != 1 || statuses[0] != dubbo.StatusBadRequest {
					t.Fatalf("want one BAD_REQUEST reply, got statuses %v", statuses)
				}
			} else {
				for _, s := range statuses {
					if s == dubbo.StatusBadRequest {
						t.Fatalf("unexpected BAD_REQUEST for %s", tc.name)
					}
				}
			}
			waitFor(t, 2*time.Second, "close counted", func() bool { return f.srv.Stats().Closed[tc.reason.String()] == before+1 })
			// Everyone else is unaffected.
			for i, c := range good {
				resp, err := c.Call(ctx, int64(100+i), svc, "echo", "still here")
				if err != nil || resp.Value != "still here" {
					t.Fatalf("good consumer %d after %s: %v %+v", i, tc.name, err, resp)
				}
			}
			if ps := f.provider.Stats(); ps.ConnsAccepted != 4 || ps.BadFrames != 0 || ps.BadRequests != 0 {
				t.Fatalf("provider affected: %+v", ps)
			}
		})
	}
}

// TestTruncatedFrameAtClose: a consumer that closes in the middle of a frame is
// counted as truncated and nothing reaches the provider.
func TestTruncatedFrameAtClose(t *testing.T) {
	f := newFixture(t, peer.ProviderConfig{})
	nc, err := net.Dial("tcp", f.ln.addr)
	if err != nil {
		t.Fatal(err)
	}
	frame := dubbo.AppendRequest(nil, 1, true, svc, "echo", "hello")
	if _, err := nc.Write(frame[:len(frame)-3]); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Second, "session", func() bool { return f.srv.Stats().DownstreamConns == 1 })
	nc.Close()
	waitFor(t, 2*time.Second, "truncated close counted", func() bool { return f.srv.Stats().Closed[CloseTruncated.String()] == 1 })
	if ps := f.provider.Stats(); ps.Requests != 0 {
		t.Fatalf("provider saw %d requests", ps.Requests)
	}
}

// TestSlowConsumerClosedWithoutStallingOthers: a consumer that never reads its
// responses is closed when its queue passes the limit; others keep their latency.
func TestSlowConsumerClosedWithoutStallingOthers(t *testing.T) {
	f := newFixture(t, peer.ProviderConfig{}, func(c *Config) { c.MaxQueuedBytesPerConn = 256 << 10 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	other := f.dial(ctx)

	slow, err := net.Dial("tcp", f.ln.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	_ = slow.(*net.TCPConn).SetReadBuffer(4096)
	// Ask for 64 KiB responses and never read them.
	go func() {
		var buf []byte
		for id := int64(1); id <= 120; id++ {
			buf = dubbo.AppendRequest(buf[:0], id, true, svc, "big", "65536")
			if _, err := slow.Write(buf); err != nil {
				return
			}
		}
	}()
	deadline := time.Now().Add(20 * time.Second)
	for f.srv.Stats().Closed[CloseSlowReader.String()] == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("slow consumer not closed; stats %+v", f.srv.Stats())
		}
		start := time.Now()
		resp, err := other.Call(ctx, time.Now().UnixNano(), svc, "echo", "ping")
		if err != nil || resp.Value != "ping" {
			t.Fatalf("other consumer: %v %+v", err, resp)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("other consumer stalled for %v", d)
		}
	}
}

// TestIdleConsumerClosed: nothing read for the idle timeout closes a consumer; a
// heartbeating one stays.
func TestIdleConsumerClosed(t *testing.T) {
	clk := keepalive.NewManualClock(time.Unix(1_000_000, 0))
	f := newFixtureWith(t, peer.ProviderConfig{}, Options{Clock: clk}) // downstream_idle_timeout 180s
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	idle := f.dial(ctx)
	busy := f.dial(ctx)
	waitFor(t, 5*time.Second, "both consumers", func() bool { return f.srv.Stats().DownstreamConns == 2 })
	// Ten minutes on the server's clock; the busy consumer heartbeats every 30 s (a
	// dubbo-go client's period), the idle one sends nothing.
	for id := int64(1); id <= 20; id++ {
		if _, err := busy.Heartbeat(ctx, id); err != nil {
			t.Fatalf("busy consumer: %v", err)
		}
		f.advance(30*time.Second, 30*time.Second, false)
	}
	select {
	case <-idle.Closed():
	case <-time.After(5 * time.Second):
		t.Fatal("idle consumer not closed")
	}
	select {
	case <-busy.Closed():
		t.Fatal("busy consumer was closed")
	default:
	}
	if n := f.srv.Stats().Closed[CloseIdle.String()]; n != 1 {
		t.Fatalf("idle closes counted: %d", n)
	}
}
