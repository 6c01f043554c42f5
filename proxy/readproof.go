package proxy

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// What a dead provider had read, from its kernel: peerdiag.go's proof for a provider connection that
// Go's poller holds (net.Conn: HTTP/2's, h2c). The provider on loopback shares Stormgate's network namespace, and the kernel announces its
// end of the connection when the socket is destroyed, with how much of Stormgate's stream its application
// had read (R). Every call none of whose bytes lie before R (its head was queued at or after R:
// h2Call.upOff) never reached the provider's application, so it was never processed, whatever its
// stream's state: it is sent again (proxy/triple/replay.go, outcome reheld_unseen). A call with a single byte before R
// is not: the provider may have started it.
//
//	| at the connection's end                          | calls sent again
//	|--------------------------------------------------|---------------------------------------------
//	| announced: the application had read R bytes      | those whose head was queued at or after R
//	| announced with counters that contradict what     | none (a SO_LINGER 0 abort zeroes them; an
//	| Stormgate's kernel saw acknowledged, or too soon | announcement this soon may be an older
//	| after connecting                                 | socket's)
//	| no announcement within diagWait                  | none
//	| a provider not on loopback                       | none (the announcement is not ours to see)
//
// Dubbo's FIN and RST rules (peerend.go) are not used here: HTTP/2 interleaves streams, so "the last
// request on the connection" does not name one call.

// ReadProof is one provider connection's part of the proof (plug-in API). Connected at connect, before
// the connection is used; End by its reader when it sees the connection end; ProviderRead after that.
type ReadProof struct {
	env     Env
	diag    *diagSlot
	ackBase uint64 // tcpi_bytes_acked right after connect (the SYN)
	acked   uint64 // at the end: stream bytes the provider's kernel acknowledged
	ended   bool   // acked is set
}

// Connected registers a loopback provider connection that carried nothing yet with the server's watcher
// (diag), its times on clock.
func (p *ReadProof) Connected(env Env, nc net.Conn) {
	p.env = env
	p.control(nc, func(fd int) {
		if !loopbackPeer(fd) {
			return
		}
		info, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
		if err != nil || info.Bytes_acked != 1 || info.Bytes_sent != 0 {
			return
		}
		p.ackBase, p.diag = info.Bytes_acked, env.s.diag.watch(fd, env.s.clock)
	})
}

// End notes, while the socket is still open, what the provider's kernel acknowledged.
func (p *ReadProof) End(nc net.Conn) {
	if p.diag == nil {
		return
	}
	p.control(nc, func(fd int) {
		info, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
		if err == nil && info.Bytes_acked >= p.ackBase {
			p.acked, p.ended = info.Bytes_acked-p.ackBase, true
		}
	})
}

// ProviderRead is how much of the stream the provider's application had read when its socket was
// destroyed (written: what Stormgate's writer wrote), waiting up to diagWait for the announcement, or
// until stop closes (the pool closing: nothing is sent again then, so nothing needs the proof); false
// when nothing is proven. It releases the registration.
func (p *ReadProof) ProviderRead(written uint64, stop <-chan struct{}) (uint64, bool) {
	s := p.diag
	if s == nil {
		return 0, false
	}
	defer p.release()
	if !p.ended {
		return 0, false
	}
	select {
	case <-s.done:
	case <-p.env.After(diagWait):
		return 0, false
	case <-stop:
		return 0, false
	}
	if s.early || s.received < p.acked || s.received > written {
		return 0, false
	}
	return s.received - s.unread, true
}

func (p *ReadProof) release() {
	p.diag.release()
	p.diag = nil
}

// control runs f on nc's socket, if it has one.
func (p *ReadProof) control(nc net.Conn, f func(fd int)) {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return
	}
	_ = raw.Control(func(fd uintptr) { f(int(fd)) })
}
