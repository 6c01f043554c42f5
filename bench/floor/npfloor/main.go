// npfloor is the least a netpoll-based heartbeat responder can cost: the floor for
// Stormgate's design, next to hbfloor.c, the floor for any design.
//
//	npfloor --listen 127.0.0.1:PORT   (PORT 0: any; prints "READY <port>" once listening)
//
// It speaks hbfloor's protocol (SIGUSR1 prints "ANSWERED <n>"), so bench/suite can run it in
// hbfloor's place. netpoll is set up as Stormgate sets it up (proxy.ConfigureNetpoll: one
// poller per core, handlers inline on the pollers, a 256-byte initial input buffer); each
// readable connection's handler answers every heartbeat in its input with the Java-exact reply
// in one write(2), keeping a header split across reads as hbfloor does. Nothing
// else: no timers, limits, metrics, hold queue or upstream. What it spends per heartbeat above
// hbfloor is netpoll's connection layer and the Go runtime, which no code of Stormgate's can
// remove while consumer connections are netpoll connections.
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"github.com/cloudwego/netpoll"
	"golang.org/x/sys/unix"

	"github.com/stormgate/stormgate/bench/floor/internal/floorproto"
	"github.com/stormgate/stormgate/proxy"
	"go.uber.org/zap"
)

const (
	hdrLen    = 16
	flagEvent = 0x20
	flagTwo   = 0x40
	flagReq   = 0x80
)

var answered atomic.Uint64

func main() {
	listen := flag.String("listen", "", "IP:PORT to listen on")
	flag.Parse()
	if *listen == "" {
		fmt.Fprintln(os.Stderr, "usage: npfloor --listen IP:PORT")
		os.Exit(2)
	}
	if err := proxy.ConfigureNetpoll(zap.NewNop(), proxy.DefaultNetpollBuffer, 0); err != nil {
		fail(err)
	}
	ln, err := netpoll.CreateListener("tcp", *listen)
	if err != nil {
		fail(err)
	}
	n, err := floorproto.FDSlots()
	if err != nil {
		fail(err)
	}
	states = make([]connState, n)
	loop, err := netpoll.NewEventLoop(onRequest, netpoll.WithOnConnect(onConnect))
	if err != nil {
		fail(err)
	}
	fail(floorproto.Serve(loop, ln, &answered))
}

// connState is what a connection's handler keeps between events, as hbfloor keeps it: a header
// split across reads and the body bytes still to skip. Bytes must never be left in netpoll's
// input buffer (netpoll calls a handler again while any remain), so a partial header is copied
// out. Indexed by fd; a poller handles one fd at a time.
type connState struct {
	hdr  [hdrLen]byte
	hlen int
	skip int
}

var states []connState

// onConnect forgets what an earlier connection on the same fd left.
func onConnect(ctx context.Context, conn netpoll.Connection) context.Context {
	states[conn.(netpoll.Conn).Fd()] = connState{}
	return ctx
}

// onRequest answers every heartbeat whose header is complete, in one write(2) per event.
func onRequest(_ context.Context, conn netpoll.Connection) error {
	fd := conn.(netpoll.Conn).Fd()
	st := &states[fd]
	r := conn.Reader()
	var out [64 * 17]byte
	n := 0
	for r.Len() > 0 {
		if st.skip > 0 {
			k := min(st.skip, r.Len())
			_ = r.Skip(k)
			st.skip -= k
			continue
		}
		k := min(hdrLen-st.hlen, r.Len())
		p, _ := r.Next(k)
		st.hlen += copy(st.hdr[st.hlen:], p)
		if st.hlen < hdrLen {
			break
		}
		st.hlen = 0
		h := st.hdr[:]
		if h[0] != 0xda || h[1] != 0xbb {
			_ = r.Skip(r.Len())
			_ = r.Release()
			return drop(conn)
		}
		st.skip = int(binary.BigEndian.Uint32(h[12:16]))
		if h[2]&(flagReq|flagTwo|flagEvent) == flagReq|flagTwo|flagEvent {
			if n == len(out) {
				if !write(fd, out[:n]) {
					_ = r.Skip(r.Len())
					_ = r.Release()
					return drop(conn)
				}
				n = 0
			}
			reply := out[n : n+17]
			reply[0], reply[1], reply[2], reply[3] = 0xda, 0xbb, 0x20|h[2]&0x1f, 20
			copy(reply[4:12], h[4:12])
			binary.BigEndian.PutUint32(reply[12:16], 1)
			reply[16] = 'N'
			n += 17
		}
	}
	_ = r.Release()
	if n > 0 && !write(fd, out[:n]) {
		return drop(conn)
	}
	return nil
}

// write is one raw write(2) on the non-blocking socket, as Stormgate writes; a short write
// closes the connection (heartbeating consumers never fill a socket).
func write(fd int, b []byte) bool {
	w, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if e != 0 || int(w) != len(b) {
		return false
	}
	answered.Add(uint64(len(b) / 17))
	return true
}

// drop shuts the socket down; netpoll's poller closes it after the handler (a close from
// inside an inline handler would deadlock, docs/design.md §1).
func drop(conn netpoll.Connection) error {
	return unix.Shutdown(conn.(netpoll.Conn).Fd(), unix.SHUT_RDWR)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "npfloor:", err)
	os.Exit(1)
}
