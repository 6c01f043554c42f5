// Package h2count is a TCP relay that counts the HTTP/2 frames passing through it, for the interop tests: put in
// front of a Triple or gRPC provider, it tells how many connections and PING frames reached the provider (issue
// 26 acceptance 1: through Stormgate, at most M connections and 0 consumer PINGs). It forwards every byte
// unchanged in both directions and reads frame headers only (the 24-byte client preface, then 9-byte headers
// whose payloads it skips); it never decodes HPACK. It is test equipment, not part of Stormgate.
package h2count

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
)

const (
	prefaceLen  = 24 // "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
	frameHdrLen = 9
	typePing    = 0x6
	flagAck     = 0x1
)

// Counts are the totals seen so far.
type Counts struct {
	Conns      int64 // connections relayed to the target
	Frames     int64 // frames from the clients (toward the target)
	Pings      int64 // PING frames without ACK from the clients: the keepalives that reached the target
	PingAcks   int64 // PING ACKs from the clients (answers to the target's own PINGs)
	PingsBack  int64 // PING frames without ACK from the target toward the clients
	BadPreface int64 // client connections that did not start with the HTTP/2 preface
}

// Relay listens on a loopback port and relays each connection to Target.
type Relay struct {
	Target string
	ln     net.Listener
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool

	connCount, frames, pings, pingAcks, pingsBack, badPreface atomic.Int64
}

// Listen starts a relay on 127.0.0.1 (a free port) toward target.
func Listen(target string) (*Relay, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &Relay{Target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	r.wg.Add(1)
	go r.accept()
	return r, nil
}

// Addr is the relay's listening address.
func (r *Relay) Addr() string { return r.ln.Addr().String() }

// Counts returns the totals so far.
func (r *Relay) Counts() Counts {
	return Counts{Conns: r.connCount.Load(), Frames: r.frames.Load(), Pings: r.pings.Load(),
		PingAcks: r.pingAcks.Load(), PingsBack: r.pingsBack.Load(), BadPreface: r.badPreface.Load()}
}

// Close stops accepting, closes every relayed connection and waits for the relay's goroutines.
func (r *Relay) Close() error {
	err := r.ln.Close()
	r.mu.Lock()
	r.closed = true
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
	return err
}

func (r *Relay) track(c net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		c.Close()
		return false
	}
	r.conns[c] = struct{}{}
	return true
}

func (r *Relay) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		if !r.track(c) {
			return
		}
		r.wg.Add(1)
		go r.relay(c)
	}
}

func (r *Relay) relay(client net.Conn) {
	defer r.wg.Done()
	defer client.Close()
	up, err := net.Dial("tcp", r.Target)
	if err != nil {
		return
	}
	if !r.track(up) {
		return
	}
	defer up.Close()
	r.connCount.Add(1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.copy(up, client, true)
		if tc, ok := up.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}()
	r.copy(client, up, false)
	if tc, ok := client.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	<-done
}

// copy forwards src to dst unchanged, counting frames on the way. fromClient: src is the client side (it starts
// with the preface).
func (r *Relay) copy(dst io.Writer, src io.Reader, fromClient bool) {
	p := parser{preface: 0}
	if fromClient {
		p.preface = prefaceLen
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.feed(buf[:n], func(typ, flags byte) {
				switch {
				case !fromClient:
					if typ == typePing && flags&flagAck == 0 {
						r.pingsBack.Add(1)
					}
				case typ == typePing && flags&flagAck == 0:
					r.frames.Add(1)
					r.pings.Add(1)
				case typ == typePing:
					r.frames.Add(1)
					r.pingAcks.Add(1)
				default:
					r.frames.Add(1)
				}
			})
			if p.bad && fromClient && !p.reported {
				p.reported = true
				r.badPreface.Add(1)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF, or the other side closed
		}
	}
}

// parser follows frame boundaries across reads.
type parser struct {
	preface  int    // preface bytes still to skip (checked)
	hdr      []byte // partial frame header
	skip     int    // payload bytes still to skip
	bad      bool   // the stream did not start with the preface: stop parsing
	reported bool
}

func (p *parser) feed(b []byte, frame func(typ, flags byte)) {
	const want = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
	for len(b) > 0 && !p.bad {
		switch {
		case p.preface > 0:
			i := prefaceLen - p.preface
			n := min(p.preface, len(b))
			if string(b[:n]) != want[i:i+n] {
				p.bad = true
				return
			}
			p.preface -= n
			b = b[n:]
		case p.skip > 0:
			n := min(p.skip, len(b))
			p.skip -= n
			b = b[n:]
		default:
			n := min(frameHdrLen-len(p.hdr), len(b))
			p.hdr = append(p.hdr, b[:n]...)
			b = b[n:]
			if len(p.hdr) == frameHdrLen {
				p.skip = int(p.hdr[0])<<16 | int(p.hdr[1])<<8 | int(p.hdr[2])
				frame(p.hdr[3], p.hdr[4])
				p.hdr = p.hdr[:0]
			}
		}
	}
}
