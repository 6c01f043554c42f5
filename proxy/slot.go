package proxy

import (
	"context"

	"github.com/stormgate/stormgate/keepalive"
)

// A slot is one of a pool's upstream.connections places for a provider connection. Both
// protocols keep their slots up with the same loop (RunSlot) and the same rules:
//
//	| event                               | what the slot does
//	|-------------------------------------|-----------------------------------------------------------
//	| the dial fails                      | counted by errno (dialLog), then full-jitter backoff from
//	|                                     | upstream.backoff_base, doubling up to backoff_max, re-read
//	|                                     | live (Server.waitBackoff); Dubbo also ends a provider drain
//	|                                     | whose provider is gone (DialFailed)
//	| connected                           | the backoff resets; a reconnect is counted after the first
//	| the connection ends                 | forgotten, then a jittered pause and a redial
//	| the provider's GOAWAY (HTTP/2)      | as if it ended, while the old connection finishes its streams
//	|                                     | on its own (RFC 9113 §6.8), so new calls need not wait for them
//	| the slot retires (a smaller         | no new requests; the connection closes after its last one, and
//	| upstream.connections)               | the loop stops (each protocol's resize)
//	| a handover freezes the pool (Dubbo) | the loop stops and leaves the connection as it is; the next
//	|                                     | loop adopts it (SlotKind.Current)
//	| the pool closes                     | the loop stops; the connection closes
//
// What differs between the protocols is behind SlotKind: how a connection is dialed and served,
// what "ended" means, and what retiring and freezing do to it.
type SlotKind[C any] interface {
	// Protocol is the protocol whose connections the slot keeps (ProtoDubbo or ProtoTriple): the
	// protocol label of the slot's metrics.
	Protocol() Protocols
	// Current is a connection the slot holds already (adopted from a handover), if any.
	Current() (C, bool)
	// Dial opens a new connection and makes it ready to serve. RunSlot counts and logs a failure.
	Dial(ctx context.Context, idx int) (C, error)
	// DialFailed runs after a failed dial is logged, before the backoff.
	DialFailed()
	// Install makes c the slot's connection; false: the slot stopped meanwhile (retired, frozen),
	// and install has closed c.
	Install(c C) bool
	// Serve starts serving c: ended is closed when c is gone, away when the slot may redial while
	// c finishes on its own (nil: never).
	Serve(ctx context.Context, c C) (ended, away <-chan struct{})
	// Stop runs when ctx ended while c served (the pool closed, the slot retired, a freeze).
	Stop(c C)
	// Forget takes c out of the slot once it ended or went away, and logs why if it should.
	Forget(c C)
	// Retired reports whether a resize retired the slot.
	Retired() bool
}

// RunSlot keeps one slot's connection up: dial, serve until it ends, back off with full jitter,
// redial; until ctx ends or the slot retires. Backoff is exponential with full jitter, so a
// fleet of sidecars never redials in step.
func RunSlot[C any](ctx context.Context, pr Provider, idx int, k SlotKind[C]) {
	p := pr.p
	srv := p.srv
	var bo keepalive.Backoff
	c, have := k.Current()
	connectedBefore := have
	for ctx.Err() == nil && !k.Retired() {
		cfg := srv.cfg.Load()
		bo.Base, bo.Max = cfg.BackoffBase, cfg.BackoffMax
		if !have {
			var err error
			if c, err = k.Dial(ctx, idx); err != nil {
				if ctx.Err() != nil {
					return
				}
				srv.m.upDialErrors[protoIndex(k.Protocol())].Inc()
				a, d := bo.Attempt(), bo.Next()
				p.dials.failed(p, err, d)
				k.DialFailed()
				if !srv.waitBackoff(ctx, d, a) {
					return
				}
				continue
			}
			if !k.Install(c) {
				return
			}
			if connectedBefore {
				srv.m.upReconnects[protoIndex(k.Protocol())].Inc()
			}
			connectedBefore = true
			bo.Reset()
			p.dials.connected(p, idx)
		}
		ended, away := k.Serve(ctx, c)
		select {
		case <-ended:
		case <-away:
		case <-ctx.Done():
			k.Stop(c)
			return
		}
		k.Forget(c)
		have = false
		if ctx.Err() != nil || k.Retired() {
			return
		}
		if a := bo.Attempt(); !srv.waitBackoff(ctx, bo.Next(), a) {
			return
		}
	}
}
