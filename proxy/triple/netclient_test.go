package triple

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// netCall is one gRPC-shaped call of Go's own HTTP/2 client (x/net, which keeps to every window) through
// Stormgate, for the randomized tests: its body written in random pieces at random moments, and given up
// on after giveUp (0: never).
type netCall struct {
	tag    string
	body   []byte // the gRPC message, prefix included
	pieces []int  // the body's pieces, in order
	pauses []time.Duration
	giveUp time.Duration
	start  time.Duration // when the call begins, after the others were started
	client int           // which of the consumer connections
	header http.Header   // request headers beyond gRPC's

	status string // after do: grpc-status (the trailers', or a trailers-only head's), or "error: ..."
	answer []byte
}

// newNetCall draws a call of size message bytes: its pieces and pauses, and whether its consumer gives up
// (one in giveUpOneIn; 0: never).
func newNetCall(rng *rand.Rand, tag string, size, client, giveUpOneIn int) *netCall {
	c := &netCall{tag: tag, client: client, body: grpcFrame(midBodyMsg(tag, size)), header: http.Header{}}
	for left := len(c.body); left > 0; {
		k := min(left, 1+rng.IntN(max(1, len(c.body)/2)))
		c.pieces = append(c.pieces, k)
		c.pauses = append(c.pauses, time.Duration(rng.IntN(3))*time.Millisecond)
		left -= k
	}
	if giveUpOneIn > 0 && rng.IntN(giveUpOneIn) == 0 {
		c.giveUp = time.Duration(1+rng.IntN(20)) * time.Millisecond
	}
	return c
}

// answered reports whether the call got grpc-status 0 and want as its answer.
func (c *netCall) answered(want []byte) bool {
	return c.status == "0" && string(c.answer) == string(want)
}

// do makes the call on cc to Stormgate at addr.
func (c *netCall) do(ctx context.Context, cc *http2.ClientConn, addr string) {
	time.Sleep(c.start) // the calls spread over time, not a wait for anything
	if c.giveUp > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.giveUp)
		defer cancel()
	}
	pr, pw := io.Pipe()
	go func() {
		rest := c.body
		for i, k := range c.pieces {
			time.Sleep(c.pauses[i]) // interleaving, not waiting for anything
			if _, err := pw.Write(rest[:k]); err != nil {
				return
			}
			rest = rest[k:]
		}
		pw.Close()
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/stormgate.Test/Echo", pr)
	if err != nil {
		c.status = "error: " + err.Error()
		return
	}
	req.Header = c.header.Clone()
	req.Header.Set("content-type", "application/grpc")
	req.Header.Set("te", "trailers")
	resp, err := cc.RoundTrip(req)
	if err != nil {
		c.status = "error: " + err.Error()
		return
	}
	c.answer, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	switch {
	case err != nil:
		c.status = "error: " + err.Error()
	case resp.Header.Get("grpc-status") != "": // trailers-only: Stormgate's own answers, early errors
		c.status = resp.Header.Get("grpc-status")
		if m := resp.Header.Get("grpc-message"); m != "" {
			c.status += fmt.Sprintf(" (%s)", m)
		}
	default:
		c.status = resp.Trailer.Get("grpc-status")
		if m := resp.Trailer.Get("grpc-message"); m != "" {
			c.status += fmt.Sprintf(" (%s)", m)
		}
	}
}

// dialNetConsumers opens n consumer connections to Stormgate at addr, before any call: a Transport would
// dial under its first call's context, and a call given up on during the dial would fail every call
// waiting for it.
func dialNetConsumers(t *testing.T, addr string, n int) []*http2.ClientConn {
	t.Helper()
	conns := make([]*http2.ClientConn, n)
	for i := range conns {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if conns[i], err = (&http2.Transport{AllowHTTP: true}).NewClientConn(nc); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conns[i].Close() })
	}
	return conns
}

// runNetCalls makes every call at once, each on its consumer connection of conns, and returns when all
// have ended (within a minute: past it the calls end with their context's error).
func runNetCalls(t *testing.T, addr string, conns []*http2.ClientConn, calls []*netCall) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for _, c := range calls {
		wg.Go(func() { c.do(ctx, conns[c.client], addr) })
	}
	wg.Wait()
}

// netProvider is Go's own HTTP/2 server (x/net's, prior-knowledge h2c, as dubbo-go's Triple provider
// serves) on a loopback listener.
type netProvider struct {
	ln       net.Listener
	accepted atomic.Int64
	mu       sync.Mutex
	conns    map[*net.TCPConn]bool // the connections open now
}

func startNetProvider(t *testing.T, h http.Handler) *netProvider {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	p := &netProvider{ln: ln, conns: map[*net.TCPConn]bool{}}
	h2s := &http2.Server{}
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			p.accepted.Add(1)
			tc := nc.(*net.TCPConn)
			p.mu.Lock()
			p.conns[tc] = true
			p.mu.Unlock()
			go func() {
				h2s.ServeConn(nc, &http2.ServeConnOpts{Handler: h})
				p.mu.Lock()
				delete(p.conns, tc)
				p.mu.Unlock()
			}()
		}
	}()
	return p
}

func (p *netProvider) addr() string { return p.ln.Addr().String() }

// closeAll ends every open connection: with a reset (abort: SO_LINGER 0), or as a dying process's kernel
// closes it.
func (p *netProvider) closeAll(abort bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for nc := range p.conns {
		if abort {
			_ = nc.SetLinger(0)
		}
		nc.Close()
	}
}
