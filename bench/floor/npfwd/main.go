// npfwd is the least a multiplexing Dubbo forwarder on netpoll's connections can cost: the
// forwarding floor for Stormgate's design, next to fwdfloor.c, the floor for any design.
//
//	npfwd --listen 127.0.0.1:PORT --upstream 127.0.0.1:PORT [--upstream-conns 4]
//
// It does what fwdfloor does, on netpoll set up as Stormgate sets it up (proxy.ConfigureNetpoll:
// one poller per core, handlers inline on the pollers, a 256-byte initial input buffer): every
// consumer's requests go to the provider over a few shared upstream connections (consumer fd mod
// --upstream-conns, each a netpoll connection) with the request id rewritten to one of its own, and
// each response goes back to its consumer with the original id restored. A consumer's readable
// event forwards every whole frame in its input in one write(2) to its upstream connection; an
// upstream's readable event sends each response to its consumer in one write(2). Writes are raw
// write(2) calls on the non-blocking sockets, as Stormgate writes (a short write waits in poll(2)
// for room, under the socket's lock). Heartbeats from consumers and from the provider are answered
// here (Java form). A frame split across reads is copied out of netpoll's buffer (netpoll calls a
// handler again while bytes remain). Nothing else: no timers, limits beyond an 8 MiB frame, hold
// queue, metrics or reconnect (it exits when an upstream connection closes).
//
// What it spends per request above fwdfloor is netpoll's connection layer and the Go runtime;
// what Stormgate spends above it is Stormgate's own code.
//
// It prints "READY <port>" once listening and, on SIGUSR1, "ANSWERED <n>": the consumer heartbeats
// it answered (hbfloor's protocol, so bench/suite starts it as it starts the other floors).
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cloudwego/netpoll"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/stormgate/stormgate/bench/floor/internal/floorproto"
	"github.com/stormgate/stormgate/proxy"
)

const (
	hdrLen    = 16
	maxFrame  = 8 << 20
	flagEvent = 0x20
	flagTwo   = 0x40
	flagReq   = 0x80
	pendBits  = 18
	pendMask  = 1<<pendBits - 1
)

// sock is one socket's write side and the frame it has half read.
type sock struct {
	fd   int
	mu   sync.Mutex // serialises writes: responses come from any poller
	gen  atomic.Uint32
	part []byte // a frame split across reads; only the socket's own handler touches it
}

// pend is one request in flight upstream: whose it was, under which id. uid is stored last and
// cleared by the one who takes the entry.
type pend struct {
	uid atomic.Uint64
	fd  int32
	gen uint32
	id  [8]byte
}

var (
	consumers []sock // by fd
	ups       []*sock
	pends     [1 << pendBits]pend
	nextUID   atomic.Uint64
	answered  atomic.Uint64
)

func main() {
	listen := flag.String("listen", "", "IP:PORT to listen on (PORT 0: any)")
	upstream := flag.String("upstream", "", "the provider's IP:PORT")
	nup := flag.Int("upstream-conns", 4, "shared upstream connections (1..64)")
	flag.Parse()
	if *listen == "" || *upstream == "" || *nup < 1 || *nup > 64 {
		fmt.Fprintln(os.Stderr, "usage: npfwd --listen IP:PORT --upstream IP:PORT [--upstream-conns 1..64]")
		os.Exit(2)
	}
	if err := proxy.ConfigureNetpoll(zap.NewNop(), proxy.DefaultNetpollBuffer, 0); err != nil {
		fail(err)
	}
	n, err := floorproto.FDSlots()
	if err != nil {
		fail(err)
	}
	consumers = make([]sock, n)
	for range *nup {
		c, err := netpoll.DialConnection("tcp", *upstream, 5*time.Second)
		if err != nil {
			fail(err)
		}
		u := &sock{fd: c.(netpoll.Conn).Fd()}
		ups = append(ups, u)
		_ = c.AddCloseCallback(func(netpoll.Connection) error { fail(fmt.Errorf("upstream connection closed")); return nil })
		_ = c.SetOnRequest(func(_ context.Context, c netpoll.Connection) error { return onUpstream(u, c) })
	}
	ln, err := netpoll.CreateListener("tcp", *listen)
	if err != nil {
		fail(err)
	}
	loop, err := netpoll.NewEventLoop(onConsumer, netpoll.WithOnConnect(onConnect))
	if err != nil {
		fail(err)
	}
	fail(floorproto.Serve(loop, ln, &answered))
}

// onConnect starts a consumer's state afresh; the new generation makes answers to an earlier
// connection on the same fd go nowhere.
func onConnect(ctx context.Context, conn netpoll.Connection) context.Context {
	fd := conn.(netpoll.Conn).Fd()
	c := &consumers[fd]
	c.fd, c.part = fd, c.part[:0]
	c.gen.Add(1)
	return ctx
}

// frames calls handle for every whole frame in r's input, copying a frame split across reads
// out of netpoll's buffer into s.part. handle may rewrite the frame in place. It returns false
// on a frame that is not Dubbo or is too large.
func frames(s *sock, r netpoll.Reader, handle func([]byte)) bool {
	defer func() { _ = r.Release() }()
	for r.Len() > 0 {
		if len(s.part) == 0 && r.Len() >= hdrLen {
			h, _ := r.Peek(hdrLen)
			n, ok := frameLen(h)
			if !ok {
				return false
			}
			if r.Len() >= n {
				f, _ := r.Next(n)
				handle(f)
				continue
			}
		}
		want := hdrLen
		if len(s.part) >= hdrLen {
			n, ok := frameLen(s.part)
			if !ok {
				return false
			}
			want = n
		}
		p, _ := r.Next(min(want-len(s.part), r.Len()))
		s.part = append(s.part, p...)
		if len(s.part) >= hdrLen {
			if n, ok := frameLen(s.part); !ok {
				return false
			} else if len(s.part) == n {
				handle(s.part)
				s.part = s.part[:0]
			}
		}
	}
	return true
}

func frameLen(h []byte) (int, bool) {
	n := binary.BigEndian.Uint32(h[12:16])
	return hdrLen + int(n), h[0] == 0xda && h[1] == 0xbb && n <= maxFrame
}

// heartbeatReply appends the Java-exact answer to the heartbeat request h.
func heartbeatReply(out, h []byte) []byte {
	var r [17]byte
	r[0], r[1], r[2], r[3] = 0xda, 0xbb, flagEvent|h[2]&0x1f, 20
	copy(r[4:12], h[4:12])
	binary.BigEndian.PutUint32(r[12:16], 1)
	r[16] = 'N'
	return append(out, r[:]...)
}

// onConsumer forwards every whole request in a consumer's input to its upstream connection in
// one write and answers its heartbeats in another.
func onConsumer(_ context.Context, conn netpoll.Connection) error {
	c := &consumers[conn.(netpoll.Conn).Fd()]
	gen := c.gen.Load()
	up := ups[c.fd%len(ups)]
	var upb, hbb []byte
	ok := frames(c, conn.Reader(), func(f []byte) {
		switch fl := f[2]; {
		case fl&flagReq == 0: // a response: consumers get no requests from here
		case fl&flagEvent != 0:
			if fl&flagTwo != 0 {
				hbb = heartbeatReply(hbb, f)
			}
		default:
			uid := nextUID.Add(1)
			if fl&flagTwo != 0 {
				p := &pends[uid&pendMask]
				p.fd, p.gen = int32(c.fd), gen
				copy(p.id[:], f[4:12])
				p.uid.Store(uid)
			}
			binary.BigEndian.PutUint64(f[4:12], uid)
			upb = append(upb, f...)
		}
	})
	if len(upb) > 0 && !write(up, upb) {
		fail(fmt.Errorf("writing upstream failed"))
	}
	if len(hbb) > 0 {
		if !write(c, hbb) {
			ok = false
		}
		answered.Add(uint64(len(hbb) / 17))
	}
	if !ok {
		return unix.Shutdown(c.fd, unix.SHUT_RDWR) // netpoll's poller closes it after the handler
	}
	return nil
}

// onUpstream sends each response in an upstream connection's input to its consumer with the
// consumer's id back, and answers the provider's heartbeats.
func onUpstream(u *sock, conn netpoll.Connection) error {
	var hbb []byte
	ok := frames(u, conn.Reader(), func(f []byte) {
		switch fl := f[2]; {
		case fl&flagReq != 0:
			if fl&flagEvent != 0 && fl&flagTwo != 0 {
				hbb = heartbeatReply(hbb, f)
			}
		case fl&flagEvent != 0: // an answer to a heartbeat: none are sent
		default:
			uid := binary.BigEndian.Uint64(f[4:12])
			p := &pends[uid&pendMask]
			if !p.uid.CompareAndSwap(uid, 0) {
				return
			}
			c := &consumers[p.fd]
			if c.gen.Load() != p.gen {
				return // the consumer is gone
			}
			copy(f[4:12], p.id[:])
			if !write(c, f) {
				_ = unix.Shutdown(c.fd, unix.SHUT_RDWR)
			}
		}
	})
	if !ok || len(hbb) > 0 && !write(u, hbb) {
		fail(fmt.Errorf("upstream: bad frame or write failed"))
	}
	return nil
}

// write is raw write(2) calls on the non-blocking socket, as Stormgate writes; on a full socket it
// waits for room in poll(2), under the socket's lock. It returns false on an error.
func write(s *sock, b []byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(b) > 0 {
		w, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(s.fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
		switch e {
		case 0:
			b = b[w:]
		case unix.EAGAIN:
			fds := []unix.PollFd{{Fd: int32(s.fd), Events: unix.POLLOUT}}
			if _, err := unix.Poll(fds, 1000); err != nil && err != unix.EINTR {
				return false
			}
		case unix.EINTR:
		default:
			return false
		}
	}
	return true
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "npfwd:", err)
	os.Exit(1)
}
