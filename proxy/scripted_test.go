package proxy

import (
	"bufio"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stormgate/stormgate/proxy/dubbo"
)

// scriptedProvider is a provider whose every answer the test writes: it reads
// whole frames from each connection and hands them to onFrame, which runs on that
// connection's reader goroutine and may write anything to the connection.
type scriptedProvider struct {
	ln       net.Listener
	accepted atomic.Int64
	onFrame  func(c net.Conn, h dubbo.Header, frame []byte)

	mu      sync.Mutex
	conns   []net.Conn
	stopped bool

	wg sync.WaitGroup // the accept loop and every connection's reader
}

func newScriptedProvider(t *testing.T, onFrame func(c net.Conn, h dubbo.Header, frame []byte)) *scriptedProvider {
	t.Helper()
	return newScriptedProviderOn(t, "127.0.0.1:0", onFrame)
}

// newScriptedProviderOn is newScriptedProvider listening on addr (a restarted provider).
func newScriptedProviderOn(t *testing.T, addr string, onFrame func(c net.Conn, h dubbo.Header, frame []byte)) *scriptedProvider {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	p := &scriptedProvider{ln: ln, onFrame: onFrame}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.accepted.Add(1)
			p.mu.Lock()
			if p.stopped { // accepted just before stop closed the listener: a process that exits closes it too
				p.mu.Unlock()
				c.Close()
				continue
			}
			p.conns = append(p.conns, c)
			p.mu.Unlock()
			p.wg.Add(1)
			go func() { defer p.wg.Done(); p.serve(c) }()
		}
	}()
	t.Cleanup(p.close)
	return p
}

// close stops the provider and waits for its goroutines. It goes through stop, so
// a connection the accept loop holds but has not yet recorded is closed too: the
// peer (a sidecar's pool, closed by a later cleanup) would otherwise keep its
// reader blocked for ever.
func (p *scriptedProvider) close() {
	p.stop()
	p.wg.Wait()
}

func (p *scriptedProvider) addr() string { return p.ln.Addr().String() }

// stop closes the listener and every connection, as a provider process that exits.
func (p *scriptedProvider) stop() {
	p.ln.Close()
	p.mu.Lock()
	p.stopped = true
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
}

func (p *scriptedProvider) serve(c net.Conn) {
	br := bufio.NewReaderSize(c, 64<<10)
	for {
		hdr := make([]byte, dubbo.HeaderLen)
		if _, err := io.ReadFull(br, hdr); err != nil {
			return
		}
		h, err := dubbo.ParseHeader(hdr, 1<<30)
		if err != nil {
			return
		}
		frame := make([]byte, h.FrameLen())
		copy(frame, hdr)
		if _, err := io.ReadFull(br, frame[dubbo.HeaderLen:]); err != nil {
			return
		}
		if h.Kind() == dubbo.KindEventTwoWay { // heartbeats: answered, never shown to the script
			_, _ = c.Write(dubbo.AppendHeartbeatReply(nil, h.ID, h.Serial()))
			continue
		}
		p.onFrame(c, h, frame)
	}
}

// argOf returns the first string argument of a request frame made by dubbo.AppendRequest.
func argOf(t *testing.T, frame []byte) string {
	_, _, arg, err := dubbo.ParseRequest(frame[dubbo.HeaderLen:])
	if err != nil {
		t.Errorf("provider could not parse a request: %v", err)
	}
	return arg
}

// TestScriptedProviderCloseEndsLateConnections: a connection accepted just as the
// provider closes is closed with it, so close returns while the peer still holds
// its end open. (Before the fix, cleanup closed only recorded connections and a
// make test run hung for 11 minutes in it.)
func TestScriptedProviderCloseEndsLateConnections(t *testing.T) {
	for i := 0; i < 200; i++ {
		p := newScriptedProvider(t, func(net.Conn, dubbo.Header, []byte) {})
		c, err := net.Dial("tcp", p.addr())
		if err != nil {
			t.Fatal(err)
		}
		closed := make(chan struct{})
		go func() { p.close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: close still waiting after 10 s for a connection it never closed", i)
		}
		c.Close()
	}
}
