package triple

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stormgate/stormgate/proxy"
	"github.com/stormgate/stormgate/proxy/h2"
)

// h2Protocol is HTTP/2 (Triple, gRPC) as the core's Protocol (proxy/protocol.go): its metrics, and the sets of
// its consumer connections and pools that its server-wide work (an upgrade's quiesce, handover.go)
// walks, so that the core never walks HTTP/2's state.
type h2Protocol struct {
	env        proxy.Env
	m          h2Metrics
	collectors []prometheus.Collector
	quiescing  atomic.Bool // an upgrade's quiesce: calls take no provider stream (handover.go)
	sessions   liveSet[*h2Session]
	pools      liveSet[*h2Pool]
}

// New is HTTP/2 as the Server's protocol beside Dubbo's: what proxy.Options.Protocol takes. The
// Server calls it once, in proxy.New, with its Env.
func New(env proxy.Env) proxy.Protocol { return newH2Protocol(env) }

func newH2Protocol(env proxy.Env) *h2Protocol {
	m, cs := newH2Metrics()
	x := &h2Protocol{env: env, m: m, collectors: cs}
	x.sessions.init()
	x.pools.init()
	return x
}

// Collectors are HTTP/2's own series (stormgate_http2_*).
func (x *h2Protocol) Collectors() []prometheus.Collector { return x.collectors }

// StatusNames are gRPC's status codes (h2.StatusNames).
func (x *h2Protocol) StatusNames() []string { return h2.StatusNames() }

// NotRunReasons are the provider answers that prove a call did not run (h2.NotRunReasons).
func (x *h2Protocol) NotRunReasons() []string { return h2.NotRunReasons() }

// Claims: the HTTP/2 client preface begins with 'P' ("PRI * HTTP/2.0"); the session sniffs the rest.
func (x *h2Protocol) Claims(b byte) bool { return b == 'P' }

// NewUpstream is a provider's HTTP/2 pool; Start dials its connections.
func (x *h2Protocol) NewUpstream(p proxy.Provider) proxy.Upstream { return newH2Pool(p, x) }

// NewDownstream is an HTTP/2 consumer session served by up (an *h2Pool).
func (x *h2Protocol) NewDownstream(c proxy.Consumer, up proxy.Upstream) proxy.Downstream {
	return newH2Session(c, up.(*h2Pool))
}

// liveSet is a set of live objects of a protocol (its sessions, its pools) that server-wide work walks.
type liveSet[T comparable] struct {
	mu sync.Mutex
	m  map[T]struct{}
}

func (l *liveSet[T]) init() { l.m = map[T]struct{}{} }

func (l *liveSet[T]) add(v T) {
	l.mu.Lock()
	l.m[v] = struct{}{}
	l.mu.Unlock()
}

func (l *liveSet[T]) remove(v T) {
	l.mu.Lock()
	delete(l.m, v)
	l.mu.Unlock()
}

// each calls f for every member, without the lock held (f may add or remove).
func (l *liveSet[T]) each(f func(T)) {
	l.mu.Lock()
	vs := make([]T, 0, len(l.m))
	for v := range l.m {
		vs = append(vs, v)
	}
	l.mu.Unlock()
	for _, v := range vs {
		f(v)
	}
}
