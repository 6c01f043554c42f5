package proxy

import (
	"bufio"
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stormgate/stormgate/keepalive"
	"github.com/stormgate/stormgate/peer"
	"github.com/stormgate/stormgate/proxy/dubbo"
)

// freezableProvider answers requests (echo) and heartbeats like a provider until
// frozen: then, like a process under SIGSTOP, it reads nothing and answers nothing
// on any connection, which stay open, until thawed.
type freezableProvider struct {
	ln     net.Listener
	mu     sync.RWMutex // write-locked while frozen: every reader waits for it before each frame
	wg     sync.WaitGroup
	cmu    sync.Mutex
	conn   []net.Conn
	closed bool // set by cleanup: a connection accepted after it is closed at once
}

func newFreezableProvider(t *testing.T) *freezableProvider {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &freezableProvider{ln: ln}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.cmu.Lock()
			if p.closed { // accepted as cleanup swept: its peer may outlive this cleanup
				p.cmu.Unlock()
				c.Close()
				continue
			}
			p.conn = append(p.conn, c)
			p.cmu.Unlock()
			p.wg.Add(1)
			go func() { defer p.wg.Done(); p.serve(c) }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.cmu.Lock()
		p.closed = true
		for _, c := range p.conn {
			c.Close()
		}
		p.cmu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *freezableProvider) freeze() { p.mu.Lock() }
func (p *freezableProvider) thaw()   { p.mu.Unlock() }

func (p *freezableProvider) serve(c net.Conn) {
	br := bufio.NewReader(c)
	for {
		p.mu.RLock() // waits while frozen
		p.mu.RUnlock()
		hdr := make([]byte, dubbo.HeaderLen)
		if _, err := io.ReadFull(br, hdr); err != nil {
			return
		}
		h, err := dubbo.ParseHeader(hdr, 1<<30)
		if err != nil {
			return
		}
		frame := append(hdr, make([]byte, h.BodyLen)...)
		if _, err := io.ReadFull(br, frame[dubbo.HeaderLen:]); err != nil {
			return
		}
		p.mu.RLock() // a frame read just before the freeze is answered after it
		p.mu.RUnlock()
		switch h.Kind() {
		case dubbo.KindEventTwoWay:
			_, _ = c.Write(dubbo.AppendHeartbeatReply(nil, h.ID, h.Serial()))
		case dubbo.KindRequest:
			_, _, arg, _ := dubbo.ParseRequest(frame[dubbo.HeaderLen:])
			_, _ = c.Write(dubbo.AppendValueResponse(nil, h.ID, dubbo.SerialHessian2, arg))
		}
	}
}

// events returns the READONLY/WRITEABLE events the consumer received so far.
func readEvents(c *peer.Client, until byte, d time.Duration) (got []byte) {
	deadline := time.After(d)
	for {
		select {
		case f := <-c.Events():
			if e := f.Event(); e == 'R' || e == 'W' {
				got = append(got, e)
				if e == until {
					return got
				}
			}
		case <-deadline:
			return got
		}
	}
}

// Issue 22 item 3: a provider that stops (SIGSTOP) is not hidden behind locally
// answered heartbeats. With the default keepalive.upstream_hung_timeout (5 s): its
// connections take no new requests, the provider is hung (READONLY to consumers,
// Hung() for /readyz, stormgate_upstream_hung) within 10 s, requests wait in the hold
// queue up to their consumers' deadlines, and all of it ends when it answers again.
func TestHungProviderIsVisible(t *testing.T) {
	prov := newFreezableProvider(t)
	clk := keepalive.NewManualClock(time.Unix(1_000_000, 0))
	f := newFixtureWith(t, peer.ProviderConfig{}, Options{Clock: clk}, func(c *Config) {
		c.Upstream = prov.ln.Addr().String()
		c.UpstreamConns = 2
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := f.dial(ctx)
	wantEcho(t, ctx, cl, 1, "before", 0)

	prov.freeze()
	stuck := callTimeoutAsync(ctx, cl, 2, "stuck", 60*time.Second)
	waitFor(t, 10*time.Second, "the request sent", func() bool { return f.srv.upstreamPending() == 1 })
	var hungAt time.Duration
	for at := time.Duration(0); at < 10*time.Second && f.srv.Hung() == ""; at += time.Second {
		f.step(time.Second)
		hungAt = at + time.Second
	}
	if f.srv.Hung() == "" {
		t.Fatal("a stopped provider was not seen hung within 10 s")
	}
	t.Logf("hung after %v on the clock: %s", hungAt, f.srv.Hung())
	if ev := readEvents(cl, 'R', 5*time.Second); !strings.Contains(string(ev), "R") {
		t.Fatalf("consumer events %q, want READONLY", ev)
	}
	if n := value(f.srv.m.hangs); n != 1 {
		t.Fatalf("stormgate_provider_hangs_total %v, want 1", n)
	}
	// A new request is held, not piled into the stopped provider.
	held := callTimeoutAsync(ctx, cl, 3, "held", 30*time.Second)
	waitFor(t, 10*time.Second, "the new request held", func() bool { return heldNow(f) == 1 })

	prov.thaw()
	for _, r := range []<-chan callResult{stuck, held} {
		if r := <-r; r.err != nil || r.resp.Status != dubbo.StatusOK {
			t.Fatalf("after the thaw: %+v %v", r.resp, r.err)
		}
	}
	waitFor(t, 10*time.Second, "not hung any more", func() bool { return f.srv.Hung() == "" && f.readyConns() == 2 })
	if ev := readEvents(cl, 'W', 5*time.Second); !strings.Contains(string(ev), "W") {
		t.Fatalf("consumer events %q, want WRITEABLE", ev)
	}
	wantEcho(t, ctx, cl, 4, "after", 0)
}

// A provider that is merely slow (a method that runs long while its I/O thread
// answers heartbeats) is never hung.
func TestSlowMethodIsNotAHang(t *testing.T) {
	release := make(chan struct{})
	prov := newScriptedProvider(t, func(c net.Conn, h dubbo.Header, frame []byte) {
		arg := argOf(t, frame)
		go func() { // the business thread; the reader goes on answering heartbeats
			<-release
			_, _ = c.Write(dubbo.AppendValueResponse(nil, h.ID, dubbo.SerialHessian2, arg))
		}()
	})
	clk := keepalive.NewManualClock(time.Unix(1_000_000, 0))
	f := newFixtureWith(t, peer.ProviderConfig{}, Options{Clock: clk}, func(c *Config) { c.Upstream = prov.addr() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res := callTimeoutAsync(ctx, f.dial(ctx), 1, "slow", 60*time.Second)
	waitFor(t, 10*time.Second, "the request sent", func() bool { return f.srv.upstreamPending() == 1 })
	for range 30 {
		f.step(time.Second)
		// Each probe's answer must be read before the clock moves on, as it would be.
		waitFor(t, 10*time.Second, "probes answered", func() bool { return f.srv.upstreamPending() == 1 })
		if h := f.srv.Hung(); h != "" {
			t.Fatalf("a slow method made the provider hung: %s", h)
		}
	}
	close(release)
	if r := <-res; r.err != nil || r.resp.Value != "slow" {
		t.Fatalf("%+v %v", r.resp, r.err)
	}
}

// HangRule's table, on a 4 s timeout: probe after 2 s of silence, hung 2 s after the probe once silent
// for 4 s, and a read after the probe clears it.
func TestHangRule(t *testing.T) {
	const s = int64(time.Second)
	for _, c := range []struct {
		name                 string
		now, lastRead, probe int64
		want                 HangVerdict
		wantProbe            int64
	}{
		{"quiet for less than half", 1 * s, 0, 0, HangWait, 0},
		{"quiet for half: probe", 2 * s, 0, 0, HangProbe, 0},
		{"probe out, not long enough", 3 * s, 0, 2 * s, HangWait, 2 * s},
		{"probe unanswered, silent for all", 4 * s, 0, 2 * s, HangHung, 2 * s},
		{"heard after the probe, then quiet for half again: probe", 5 * s, 2 * s, 1 * s, HangProbe, 0},
		{"heard since the probe", 5 * s, 3*s + 1, 3 * s, HangWait, 0},
	} {
		probe := c.probe
		if got := HangRule(c.now, c.lastRead, &probe, 4*s); got != c.want || probe != c.wantProbe {
			t.Errorf("%s: %v, probeAt %d; want %v, %d", c.name, got, probe, c.want, c.wantProbe)
		}
	}
}
