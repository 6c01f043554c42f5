package loadgen

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// responder is a minimal Dubbo 2 provider for tests: it answers heartbeats (Java form) and requests,
// and can misbehave on purpose.
type responder struct {
	t  *testing.T
	ln net.Listener

	// Behavior, set before the first connection.
	withhold   bool                         // never answer requests (heartbeats are still answered)
	rstOnFirst bool                         // RST the connection (SO_LINGER 0) at its first request
	stallAt    int64                        // at this request number (1-based, across connections), stall...
	stall      time.Duration                // ...every connection's replies until stall has passed
	events     bool                         // on accept: send a heartbeat request, READONLY, WRITEABLE
	reply      func(n int64) (byte, []byte) // status and body for request n; nil = OK echo

	requests     atomic.Int64
	heartbeats   atomic.Int64
	hbRepliesOK  atomic.Int64 // Java-exact replies to our heartbeat requests
	hbRepliesBad atomic.Int64
	stallUntil   atomic.Int64 // unix nanos
	wg           sync.WaitGroup
	mu           sync.Mutex
	conns        []net.Conn
}

func startResponder(t *testing.T, configure func(*responder)) *responder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &responder{t: t, ln: ln}
	if configure != nil {
		configure(p)
	}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

func (p *responder) addr() string { return p.ln.Addr().String() }

func (p *responder) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *responder) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.conns = append(p.conns, c)
		p.mu.Unlock()
		p.wg.Go(func() { p.serve(c) })
	}
}

var okBody = []byte{0x91, 0x05, 'h', 'e', 'l', 'l', 'o'}

// The responder builds its bytes by hand, independently of proxy/dubbo, so that a codec bug cannot
// cancel itself out in these tests.
const (
	hdrLen      = 16
	flagRequest = 0x80
	flagTwoWay  = 0x40
	flagEvent   = 0x20
	serialMask  = 0x1f
	serialHess2 = 2
	statusOK    = 20
)

func appendHeader(dst []byte, flags, status byte, id int64, bodyLen int) []byte {
	dst = append(dst, 0xda, 0xbb, flags, status)
	dst = binary.BigEndian.AppendUint64(dst, uint64(id))
	return binary.BigEndian.AppendUint32(dst, uint32(bodyLen))
}

// javaHeartbeatReply is da bb 22 14 <id> 00 00 00 01 4e.
func javaHeartbeatReply(id int64) []byte {
	return append(appendHeader(nil, flagEvent|serialHess2, statusOK, id, 1), 'N')
}

func (p *responder) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	if p.events {
		var b []byte
		b = appendHeader(b, flagRequest|flagTwoWay|flagEvent|serialHess2, 0, 7001, 1)
		b = append(b, 'N')
		b = appendHeader(b, flagRequest|flagEvent|serialHess2, 0, 7002, 2)
		b = append(b, 0x01, 'R')
		b = appendHeader(b, flagRequest|flagEvent|serialHess2, 0, 7003, 2)
		b = append(b, 0x01, 'W')
		if _, err := c.Write(b); err != nil {
			return
		}
	}
	hdr := make([]byte, hdrLen)
	for {
		if _, err := io.ReadFull(br, hdr); err != nil {
			return
		}
		flags, id := hdr[2], int64(binary.BigEndian.Uint64(hdr[4:12]))
		body := make([]byte, binary.BigEndian.Uint32(hdr[12:16]))
		if _, err := io.ReadFull(br, body); err != nil {
			return
		}
		var out []byte
		switch {
		case flags&flagRequest == 0: // a reply to our heartbeat request 7001
			want := javaHeartbeatReply(7001)
			if bytes.Equal(append(hdr, body...), want) {
				p.hbRepliesOK.Add(1)
			} else {
				p.hbRepliesBad.Add(1)
			}
			continue
		case flags&flagEvent != 0:
			p.heartbeats.Add(1)
			out = append(appendHeader(nil, flagEvent|flags&serialMask, statusOK, id, 1), 'N')
		default:
			n := p.requests.Add(1)
			if p.rstOnFirst {
				_ = c.(*net.TCPConn).SetLinger(0)
				return
			}
			if n == p.stallAt {
				p.stallUntil.Store(time.Now().Add(p.stall).UnixNano())
			}
			if p.withhold {
				continue
			}
			status, rb := byte(statusOK), okBody
			if p.reply != nil {
				status, rb = p.reply(n)
			}
			out = append(appendHeader(nil, flags&serialMask, status, id, len(rb)), rb...)
		}
		if d := time.Until(time.Unix(0, p.stallUntil.Load())); d > 0 {
			time.Sleep(d) // the misbehavior under test: this provider stalls
		}
		if _, err := c.Write(out); err != nil {
			return
		}
	}
}
