package proxy

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
)

// dubboProtocol is Dubbo 2 as a Protocol (protocol.go), over the codec Options.Codec: its consumer side
// is dubboConsumer (inside each session), its provider side dubboUpstream (inside each pool). Both still
// live in this package and reach the core's inside (the hold queue's Dubbo lanes, the pending books, the
// provider connections' send queues); what the core asks of Dubbo goes through these interfaces, as it
// does for the protocol beside it (Options.Protocol).
//
//	| Protocol          | Dubbo
//	|-------------------|--------------------------------------------------------------------------------
//	| Collectors        | none of its own: the core's series are Dubbo's (and count the other protocol's
//	|                   | beside them, by their protocol label)
//	| StatusNames       | the codec's (wire.Codec.StatusNames)
//	| NotRunReasons     | the codec's not-executed answers (wire.Codec.NotExecutedReasons)
//	| Claims            | a byte the codec's frames begin with (the magic): sniff.go closes such a consumer
//	|                   | when the provider does not speak Dubbo; bytes nobody claims are Dubbo's too, its
//	|                   | malformed-input answer (bad magic; an HTTP/1 request's 400)
//	| NewUpstream       | the pool's own dubboUpstream
//	| NewDownstream     | the session's own dubboConsumer
//	| Restore           | the unfinished frame's body still to skip (dubboConsumer.restore)
//	| Quiesce, Resume   | nothing: a Dubbo connection crosses with its books at any moment (handover.go)
type dubboProtocol struct{ s *Server }

func (dubboProtocol) Collectors() []prometheus.Collector { return nil }
func (d dubboProtocol) StatusNames() []string            { return d.s.codec.StatusNames() }
func (d dubboProtocol) NotRunReasons() []string          { return d.s.codec.NotExecutedReasons() }
func (d dubboProtocol) Claims(b byte) bool               { return d.s.notThisCodec([]byte{b}) == nil }
func (dubboProtocol) NewUpstream(p Provider) Upstream    { return &p.p.dubbo }
func (dubboProtocol) NewDownstream(c Consumer, _ Upstream) Downstream {
	return &c.s.dubbo
}

func (dubboProtocol) Restore(c Consumer, _ Upstream, st *SessionSnapshot, _ int64) (Downstream, error) {
	c.s.dubbo.restore(st)
	return &c.s.dubbo, nil
}

func (dubboProtocol) Quiesce(context.Context, bool) error { return nil }
func (dubboProtocol) Resume()                             {}
