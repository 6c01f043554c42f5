package proxy

import (
	"bufio"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"

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
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
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
			wg.Add(1)
			go func() { defer wg.Done(); p.serve(c) }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		wg.Wait()
	})
	return p
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
