package proxy

import (
	"errors"

	"go.uber.org/zap"

	"github.com/stormgate/stormgate/proxy/wire"
)

// A consumer connection's protocol, decided by its first bytes (session.proto).
const (
	protoUnknown uint32 = iota // the first bytes have not decided yet
	protoDubbo                 // Dubbo 2: session.consume
	protoH2                    // HTTP/2 (Triple, gRPC): session.down (Server.plugin)
	nProtos
)

// protoIndex is the metric index of a single protocol (a slot's: ProtoDubbo or ProtoTriple).
func protoIndex(p Protocols) uint32 {
	if p == ProtoTriple {
		return protoH2
	}
	return protoDubbo
}

// otherProtocol runs in onRequest until a consumer's first bytes have decided its protocol,
// and for every later event of an HTTP/2 consumer. It reports whether it took the input
// (false: the Dubbo path reads it, as it did before Triple). Only a pool whose provider
// speaks Triple (upstream.protocol) gets here; ServeFD marks every other consumer Dubbo.
//
//	| first bytes                        | provider speaks      | the connection
//	|------------------------------------|----------------------|------------------------------------------
//	| the HTTP/2 client preface          | Triple               | an HTTP/2 session (proxy/triple/session.go)
//	| a prefix of it ("P", "PRI * ...")  | Triple               | waits for more (copied aside, ≤ 24 bytes)
//	| the Dubbo magic 0xda               | not Dubbo            | closed: protocol_not_served, logged
//	| anything else                      | —                    | the Dubbo path, as before: bad magic, the
//	|                                    |                      | same log line and reply (an HTTP/1 request,
//	|                                    |                      | h2c Upgrade included, gets a 400)
func (s *session) otherProtocol(r ByteSource) bool {
	if s.down != nil {
		s.down.Input(r, s.srv.now())
		return true
	}
	n := r.Len()
	if n == 0 {
		return true
	}
	first, _ := r.Peek(1)
	if s.pool.up != nil && s.srv.plugin.Claims(first[0]) {
		// Routes the input there from now on; protoH2 once its greeting is whole (Consumer.Decided).
		s.down = s.srv.plugin.NewDownstream(Consumer{s}, s.pool.up)
		s.down.Input(r, s.srv.now())
		return true
	}
	s.decided(protoDubbo)
	if !s.srv.cfg.Load().Protocols.Dubbo() && s.srv.notThisCodec(first) == nil {
		s.srv.log.Warn("closing a Dubbo consumer: this sidecar's provider speaks Triple only (upstream.protocol: triple)",
			zap.Stringer("peer", s.remote))
		_ = r.Skip(n)
		s.closeWith(CloseNotServed)
		return true
	}
	if s.pool.readonlySent.Load() || s.srv.announced.Load() {
		s.sendEvent(wire.EventReadonly) // what ServeFD sends a Dubbo consumer that connects during a drain
	}
	return false
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
