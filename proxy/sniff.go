package proxy

import (
	"errors"
	"iter"

	"go.uber.org/zap"

	"github.com/stormgate/stormgate/proxy/wire"
)

// A consumer connection's protocol, decided by its first bytes (session.proto).
const (
	protoUnknown uint32 = iota // the first bytes have not decided yet
	protoDubbo                 // Dubbo 2: session.dubbo
	protoH2                    // HTTP/2 (Triple, gRPC): the Downstream of Options.Protocol's
	nProtos
)

// protoIndex is the metric index of a single protocol (a slot's: ProtoDubbo or ProtoTriple).
func protoIndex(p Protocols) uint32 {
	if p == ProtoTriple {
		return protoH2
	}
	return protoDubbo
}

// sniff runs in onRequest until a consumer's first bytes have decided its protocol, that is
// until it sets session.down; false: it took the input (it waits for more, or closed the
// connection). Only a pool whose provider speaks Triple (upstream.protocol) gets here;
// ServeFD makes every other consumer Dubbo at once.
//
//	| first bytes                        | provider speaks      | the connection
//	|------------------------------------|----------------------|------------------------------------------
//	| the HTTP/2 client preface          | Triple               | an HTTP/2 session (proxy/triple/session.go)
//	| a prefix of it ("P", "PRI * ...")  | Triple               | waits for more (copied aside, ≤ 24 bytes)
//	| the Dubbo magic 0xda               | not Dubbo            | closed: protocol_not_served, logged
//	| anything else                      | —                    | Dubbo's (dubboconsumer.go), as before: bad
//	|                                    |                      | magic, the same log line and reply (an
//	|                                    |                      | HTTP/1 request, h2c Upgrade included, gets
//	|                                    |                      | a 400)
func (s *session) sniff(r ByteSource) bool {
	n := r.Len()
	if n == 0 {
		return false
	}
	first, _ := r.Peek(1)
	srv := s.srv
	if up := s.pool.ups[protoH2]; up != nil && srv.protocols[protoH2].Claims(first[0]) {
		// Routes the input there from now on; protoH2 once its greeting is whole (Consumer.Decided).
		s.down = srv.protocols[protoH2].NewDownstream(Consumer{s}, up)
		return true
	}
	if s.pool.ups[protoDubbo] == nil && srv.protocols[protoDubbo].Claims(first[0]) {
		s.decided(protoDubbo)
		srv.log.Warn("closing a Dubbo consumer: this sidecar's provider speaks Triple only (upstream.protocol: triple)",
			zap.Stringer("peer", s.remote))
		_ = r.Skip(n)
		s.closeWith(CloseNotServed)
		return false
	}
	s.speakDubbo()
	s.decided(protoDubbo)
	if s.pool.readonlySent.Load() || srv.announced.Load() {
		s.dubbo.sendEvent(wire.EventReadonly) // what ServeFD sends a Dubbo consumer that connects during a drain
	}
	return true
}

// speakDubbo makes Dubbo the connection's protocol (also for bytes nobody claims: Dubbo's
// malformed-input answer is the one they get); before proto says so, and from the handler
// or before the handler is set.
func (s *session) speakDubbo() {
	s.down = s.srv.protocols[protoDubbo].NewDownstream(Consumer{s}, &s.pool.dubbo)
}

// eachProtocol is the Server's protocols with their indexes, Dubbo's first.
func (s *Server) eachProtocol() iter.Seq2[uint32, Protocol] {
	return func(yield func(uint32, Protocol) bool) {
		for i, pr := range s.protocols {
			if pr != nil && !yield(uint32(i), pr) {
				return
			}
		}
	}
}

// names reports whether the set (upstream.protocol) names the protocol of index i.
func (p Protocols) names(i uint32) bool {
	return i == protoDubbo && p.Dubbo() || i == protoH2 && p.Triple()
}

// decided records the protocol a consumer's first bytes decided (HTTP/2: once its whole preface came,
// so that foreign bytes beginning with 'P' are never counted as Triple), and moves the connection from
// the unknown series of stormgate_downstream_connections to p's. It runs in onRequest, which never
// runs beside onClosed: the gauge the close path decrements is the one counted here.
func (s *session) decided(p uint32) {
	s.proto.Store(p)
	s.srv.m.downConns[protoUnknown].Dec()
	s.srv.m.downConns[p].Inc()
}

// notThisCodec is the codec's error for the bytes b when they cannot start one of its frames (an
// error that matches wire.ErrBadMagic, a *wire.ForeignError where the codec says what the bytes look
// like); nil when they may.
func (s *Server) notThisCodec(b []byte) error {
	if _, err := s.codec.ParseHeader(b, 0); errors.Is(err, wire.ErrBadMagic) {
		return err
	}
	return nil
}
