package e2e

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2Provider is an h2c gRPC provider built on x/net's Framer that echoes each request body as its
// answer (grpc-status 0), within Stormgate's flow-control windows. It is also the referee of what
// reaches a provider through Stormgate: every frame must parse (x/net's Framer checks each frame and each
// header block), stream ids must be odd and above every earlier one, no window it announced may be
// exceeded. What breaks a rule is kept in malformed; every PING it receives is kept in pings.
type h2Provider struct {
	ln net.Listener
	wg sync.WaitGroup

	mu        sync.Mutex
	conns     []net.Conn
	malformed []string
	pings     [][8]byte
	opened    int // streams opened (HEADERS on a new stream)
	answered  int // streams answered
	resets    int // RST_STREAMs received
}

// providerWindow is the provider's receive window, per stream and per connection (the protocol's
// default, never enlarged): it hands every byte back at once, so Stormgate may never have more than this
// outstanding.
const providerWindow = 65535

func startH2Provider(t *testing.T) *h2Provider {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return startH2ProviderOn(t, ln)
}

// startH2ProviderOn serves ln (a listener made in a network namespace, say), closing it at the end.
func startH2ProviderOn(t *testing.T, ln net.Listener) *h2Provider {
	t.Helper()
	p := &h2Provider{ln: ln}
	p.wg.Go(func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			p.conns = append(p.conns, nc)
			p.mu.Unlock()
			p.wg.Go(func() { p.serve(nc) })
		}
	})
	t.Cleanup(p.close)
	return p
}

func (p *h2Provider) addr() string { return p.ln.Addr().String() }

func (p *h2Provider) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *h2Provider) bad(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.malformed = append(p.malformed, fmt.Sprintf(format, args...))
}

// report returns what the provider saw.
func (p *h2Provider) report() (malformed []string, pings [][8]byte, answered, resets int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.malformed...), append([][8]byte(nil), p.pings...), p.answered, p.resets
}

// streamCounts is how many streams were opened, answered and reset so far.
func (p *h2Provider) streamCounts() (opened, answered, resets int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.opened, p.answered, p.resets
}

// pstream is one request stream at the provider.
type pstream struct {
	recv    int64  // bytes received and not yet handed back (at most providerWindow)
	body    []byte // the request so far
	out     []byte // the answer's DATA waiting for Stormgate's windows
	send    int64  // Stormgate's window for this stream
	answers bool   // the head went out; out and then the trailers follow
}

// pconn is one connection's state, touched by its serve goroutine only.
type pconn struct {
	p        *h2Provider
	fr       *http2.Framer
	hb       bytes.Buffer
	enc      *hpack.Encoder
	streams  map[uint32]*pstream
	last     uint32
	connRecv int64
	connSend int64
	initWin  int64
	maxFrame int
}

func (p *h2Provider) serve(nc net.Conn) {
	defer nc.Close()
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(nc, preface); err != nil || string(preface) != http2.ClientPreface {
		if err == nil {
			p.bad("client preface %q", preface)
		}
		return
	}
	c := &pconn{p: p, streams: make(map[uint32]*pstream), connSend: 65535, initWin: 65535, maxFrame: 16384}
	c.fr = http2.NewFramer(nc, bufio.NewReader(nc))
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.enc = hpack.NewEncoder(&c.hb)
	c.enc.SetMaxDynamicTableSizeLimit(0) // Stormgate announces a header table size of 0
	if err := c.fr.WriteSettings(http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 1000}); err != nil {
		return
	}
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			var ce http2.ConnectionError
			var se http2.StreamError
			if errors.As(err, &ce) || errors.As(err, &se) {
				p.bad("frame: %v", err)
			}
			return
		}
		if err := c.frame(f); err != nil {
			return
		}
	}
}

func (c *pconn) frame(f http2.Frame) error {
	p := c.p
	id := f.Header().StreamID
	switch f := f.(type) {
	case *http2.MetaHeadersFrame:
		s := c.streams[id]
		if s == nil {
			if id%2 == 0 || id <= c.last {
				p.bad("HEADERS opening stream %d after stream %d", id, c.last)
				return nil
			}
			if path := f.PseudoValue("path"); path != "/stormgate.Test/Echo" {
				p.bad("stream %d: :path %q", id, path)
			}
			c.last = id
			s = &pstream{send: c.initWin}
			c.streams[id] = s
			p.mu.Lock()
			p.opened++
			p.mu.Unlock()
		}
		if f.StreamEnded() {
			return c.answer(id, s)
		}
	case *http2.DataFrame:
		s := c.streams[id]
		n := int64(f.Length)
		c.connRecv += n
		if c.connRecv > providerWindow {
			p.bad("connection window exceeded: %d bytes outstanding", c.connRecv)
		}
		if n > 0 {
			c.connRecv -= n
			if err := c.fr.WriteWindowUpdate(0, uint32(n)); err != nil {
				return err
			}
		}
		if s == nil {
			if id > c.last {
				p.bad("DATA on idle stream %d", id)
			}
			return nil // a stream answered already, or reset: nothing more should come, but RST may cross
		}
		if s.recv += n; s.recv > providerWindow {
			p.bad("stream %d window exceeded: %d bytes outstanding", id, s.recv)
		}
		s.body = append(s.body, f.Data()...)
		if f.StreamEnded() {
			return c.answer(id, s)
		}
		if n > 0 {
			s.recv -= n
			return c.fr.WriteWindowUpdate(id, uint32(n))
		}
	case *http2.RSTStreamFrame:
		delete(c.streams, id)
		p.mu.Lock()
		p.resets++
		p.mu.Unlock()
	case *http2.SettingsFrame:
		if f.IsAck() {
			return nil
		}
		if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
			d := int64(v) - c.initWin
			c.initWin = int64(v)
			for _, s := range c.streams {
				s.send += d
			}
		}
		if v, ok := f.Value(http2.SettingMaxFrameSize); ok {
			c.maxFrame = int(v)
		}
		if err := c.fr.WriteSettingsAck(); err != nil {
			return err
		}
		return c.flushAll()
	case *http2.WindowUpdateFrame:
		if id == 0 {
			c.connSend += int64(f.Increment)
		} else if s := c.streams[id]; s != nil {
			s.send += int64(f.Increment)
		}
		return c.flushAll()
	case *http2.PingFrame:
		if f.IsAck() {
			return nil
		}
		p.mu.Lock()
		p.pings = append(p.pings, f.Data)
		p.mu.Unlock()
		return c.fr.WritePing(true, f.Data)
	case *http2.GoAwayFrame:
		p.bad("GOAWAY %v from Stormgate", f.ErrCode)
	}
	return nil
}

// answer sends the head of a stream's answer and as much of its body (the request's, echoed) as the
// windows allow; the rest and the trailers follow as the windows open.
func (c *pconn) answer(id uint32, s *pstream) error {
	s.answers, s.out = true, s.body
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, EndHeaders: true,
		BlockFragment: c.block(":status", "200", "content-type", "application/grpc")}); err != nil {
		return err
	}
	return c.flush(id, s)
}

func (c *pconn) flushAll() error {
	for id, s := range c.streams {
		if s.answers {
			if err := c.flush(id, s); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *pconn) flush(id uint32, s *pstream) error {
	for len(s.out) > 0 {
		n := min(int64(len(s.out)), s.send, c.connSend, int64(c.maxFrame))
		if n <= 0 {
			return nil
		}
		if err := c.fr.WriteData(id, false, s.out[:n]); err != nil {
			return err
		}
		s.out, s.send, c.connSend = s.out[n:], s.send-n, c.connSend-n
	}
	delete(c.streams, id)
	c.p.mu.Lock()
	c.p.answered++
	c.p.mu.Unlock()
	return c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, EndHeaders: true, EndStream: true,
		BlockFragment: c.block("grpc-status", "0")})
}

// block encodes a header block (name, value, ...) for this connection's encoder.
func (c *pconn) block(kv ...string) []byte {
	c.hb.Reset()
	for i := 0; i+1 < len(kv); i += 2 {
		_ = c.enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	return bytes.Clone(c.hb.Bytes())
}
