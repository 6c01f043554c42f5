package proxy

import (
	"context"
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// The core→protocol half of the plug-in API (design §14.6, step 5b): what the core calls in a protocol.
// plugin.go is the other half, what a protocol calls in the core. HTTP/2 (proxy/triple/protocol.go)
// implements all three, and so does Dubbo, in this package over the codec: dubboprotocol.go,
// dubboconsumer.go (its consumer side) and dubboupstream.go (its provider connections). The Server holds
// both protocols by index (Server.protocols; sniff.go), and the core calls them through these interfaces
// for what each does in its own way:
//
//	| the core's                    | holds                 | calls it at
//	|-------------------------------|-----------------------|------------------------------------------------
//	| Server (one)                  | Protocol              | New (collectors), a consumer's first bytes
//	|                               |                       | (Claims, NewDownstream), a pool's start
//	|                               |                       | (NewUpstream), an upgrade (Quiesce, Resume,
//	|                               |                       | Restore)
//	| session (a consumer)          | Downstream, once its  | its input, its close, the drain's two steps,
//	|                               | first bytes decide    | a change of the consumer timeouts, a freeze
//	| pool (a provider address)     | an Upstream for each  | start, resize, readiness and hang counts, the
//	|                               | protocol upstream.    | sweep, settings changes, per-method totals,
//	|                               | protocol names (pool. | close
//	|                               | ups): Dubbo's own     |
//	|                               | (dubboUpstream), the  |
//	|                               | plug-in's             |
//
// Each protocol keeps its own sets of downstreams and upstreams for its server-wide work (the quiesce);
// the core never walks a protocol's state.

// Protocol is one protocol, server-wide.
type Protocol interface {
	// Collectors are the protocol's own metrics; the core registers them with its own.
	Collectors() []prometheus.Collector
	// StatusNames are the statuses its calls end with, indexed as it passes them to Env.Status (the
	// status label of the per-method series).
	StatusNames() []string
	// NotRunReasons are the reasons its provider answers can give for a call they did not run
	// (stormgate_not_executed_total{reason}), as Env.CountNotRun names them.
	NotRunReasons() []string
	// Claims reports whether a consumer connection whose first byte is b may speak this protocol
	// (NewDownstream's Downstream then sees every byte, and may still find it foreign: Consumer.Foreign).
	Claims(b byte) bool
	// NewUpstream starts the protocol's side of a provider's pool (upstream.protocol names it); Start
	// runs its connections.
	NewUpstream(p Provider) Upstream
	// NewDownstream takes a consumer connection the protocol claimed, served by up's provider. Its
	// Input gets every byte from the first one on.
	NewDownstream(c Consumer, up Upstream) Downstream
	// Restore rebuilds a consumer connection from an upgrade's snapshot (SessionSnapshot.H2).
	Restore(c Consumer, up Upstream, st *SessionSnapshot, now int64) (Downstream, error)
	// Quiesce brings the protocol to rest before an upgrade's freeze (no call on a provider connection),
	// within ctx and its own budget; with endOpen it ends the calls that do not come to rest. An error
	// says what was open, with the protocol resumed.
	Quiesce(ctx context.Context, endOpen bool) error
	// Resume undoes Quiesce: calls take provider connections again.
	Resume()
}

// Downstream is a protocol's side of one consumer connection. Input and Closed run on the connection's
// handler (netpoll's), never at once; the rest from any goroutine.
type Downstream interface {
	// Input takes what the consumer sent.
	Input(r ByteSource, now int64)
	// Closed says the connection closed (onClosed): every call still open on it ends. cutShort: the
	// consumer closed in the middle of one of the protocol's units (a frame), which counts as
	// truncated when nothing else gave a reason.
	Closed() (cutShort bool)
	// Announce tells the consumer that Stormgate is draining (Server.Announce): it should open its next
	// calls elsewhere, while those under way are served.
	Announce()
	// Drain is the drain proper (Server.Drain): the last call Stormgate will serve is fixed.
	Drain()
	// TimeoutsChanged says keepalive.downstream_idle_timeout or limits.frame_read_timeout changed: the
	// connection's own timers re-arm from the new values.
	TimeoutsChanged()
	// Snapshot copies the connection, at rest, into st for an upgrade; in is what it read and did not
	// handle. ok false: it does not cross (it is ending).
	Snapshot(st *SessionSnapshot, in []byte, now int64) (ok bool, err error)
}

// Upstream is a protocol's side of one provider's pool: Dubbo's (dubboUpstream) or a plug-in's
// (Protocol.NewUpstream). Safe from any goroutine.
type Upstream interface {
	// Start runs n connections (upstream.connections); Resize changes n live.
	Start(n int)
	Resize(n int)
	// Opened is how many calls took a provider connection, ever (the warm-up ramp's rate meter).
	Opened() uint64
	// Conns counts its connections that take calls, and those hung (upstream.hung_timeout).
	Conns() (ready, hung int)
	// CheckHung runs the pool's once-a-second sweep at now; it returns how many calls still need it.
	CheckHung(now int64, cfg *Config) int
	// SettingsChanged re-arms what the settings change from old to cfg moves.
	SettingsChanged(old, cfg *Config)
	// Calls is its per-method counts.
	Calls() *MethodShard
	// Close ends every connection and call, and returns once its goroutines have.
	Close()
}

// ErrNotAtRest is what Downstream.Snapshot's error wraps when its connection moved after the quiesce
// found everything at rest (a frame read just before the pollers parked): Freeze thaws and quiesces
// again.
var ErrNotAtRest = errors.New("an HTTP/2 connection is not at rest")

// noProtocol is the Server's Protocol when Options.Protocol is nil: it claims no consumer, and New has
// refused a Config that would make it an Upstream (upstream.protocol: triple or both).
type noProtocol struct{}

func (noProtocol) Collectors() []prometheus.Collector { return nil }
func (noProtocol) StatusNames() []string              { return nil }
func (noProtocol) NotRunReasons() []string            { return nil }
func (noProtocol) Claims(byte) bool                   { return false }
func (noProtocol) NewUpstream(Provider) Upstream      { panic("proxy: no protocol beside Dubbo's") }
func (noProtocol) NewDownstream(Consumer, Upstream) Downstream {
	panic("proxy: no protocol beside Dubbo's")
}
func (noProtocol) Restore(Consumer, Upstream, *SessionSnapshot, int64) (Downstream, error) {
	return nil, errors.New("proxy: the snapshot has an HTTP/2 consumer and this Server no protocol for it (Options.Protocol)")
}
func (noProtocol) Quiesce(context.Context, bool) error { return nil }
func (noProtocol) Resume()                             {}
