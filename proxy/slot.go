package proxy

import (
	"context"

	"github.com/stormgate/stormgate/keepalive"
)

// A slot is one of a pool's upstream.connections places for a provider connection. Both
// protocols keep their slots up with the same loop (runSlot) and the same rules:
//
//	| event                               | what the slot does
//	|-------------------------------------|-----------------------------------------------------------
//	| the dial fails                      | counted by errno (dialLog), then full-jitter backoff from
//	|                                     | upstream.backoff_base, doubling up to backoff_max, re-read
//	|                                     | live (Server.waitBackoff); Dubbo also ends a provider drain
//	|                                     | whose provider is gone (dialFailed)
//	| connected                           | the backoff resets; a reconnect is counted after the first
//	| the connection ends                 | forgotten, then a jittered pause and a redial
//	| the provider's GOAWAY (HTTP/2)      | as if it ended, while the old connection finishes its streams
//	|                                     | on its own (RFC 9113 §6.8), so new calls need not wait for them
//	| the slot retires (a smaller         | no new requests; the connection closes after its last one, and
//	| upstream.connections)               | the loop stops (each protocol's resize)
//	| a handover freezes the pool (Dubbo) | the loop stops and leaves the connection as it is; the next
//	|                                     | loop adopts it (slotKind.current)
//	| the pool closes                     | the loop stops; the connection closes
//
// What differs between the protocols is behind slotKind: how a connection is dialed and served,
// what "ended" means, and what retiring and freezing do to it.
type slotKind[C any] interface {
	// proto is the metric index (protoDubbo, protoH2).
	proto() uint32
	// current is a connection the slot holds already (adopted from a handover), if any.
	current() (C, bool)
	// dial opens a new connection and makes it ready to serve (counting its own dial errors).
	dial(ctx context.Context, idx int) (C, error)
	// dialFailed runs after a failed dial is logged, before the backoff.
	dialFailed()
	// install makes c the slot's connection; false: the slot stopped meanwhile (retired, frozen),
	// and install has closed c.
	install(c C) bool
	// serve starts serving c: ended is closed when c is gone, away when the slot may redial while
	// c finishes on its own (nil: never).
	serve(ctx context.Context, c C) (ended, away <-chan struct{})
	// stop runs when ctx ended while c served (the pool closed, the slot retired, a freeze).
	stop(c C)
	// forget takes c out of the slot once it ended or went away, and logs why if it should.
	forget(c C)
	// retired reports whether a resize retired the slot.
	retired() bool
}

// runSlot keeps one slot's connection up: dial, serve until it ends, back off with full jitter,
// redial; until ctx ends or the slot retires. Backoff is exponential with full jitter, so a
// fleet of sidecars never redials in step.
func runSlot[C any](ctx context.Context, p *pool, idx int, k slotKind[C]) {
	srv := p.srv
	var bo keepalive.Backoff
	c, have := k.current()
	connectedBefore := have
	for ctx.Err() == nil && !k.retired() {
		cfg := srv.cfg.Load()
		bo.Base, bo.Max = cfg.BackoffBase, cfg.BackoffMax
		if !have {
			var err error
			if c, err = k.dial(ctx, idx); err != nil {
				if ctx.Err() != nil {
					return
				}
				srv.m.upDialErrors[k.proto()].Inc()
				a, d := bo.Attempt(), bo.Next()
				p.dials.failed(p, err, d)
				k.dialFailed()
				if !srv.waitBackoff(ctx, d, a) {
					return
				}
				continue
			}
			if !k.install(c) {
				return
			}
			if connectedBefore {
				srv.m.upReconnects[k.proto()].Inc()
			}
			connectedBefore = true
			bo.Reset()
			p.dials.connected(p, idx)
		}
		ended, away := k.serve(ctx, c)
		select {
		case <-ended:
		case <-away:
		case <-ctx.Done():
			k.stop(c)
			return
		}
		k.forget(c)
		have = false
		if ctx.Err() != nil || k.retired() {
			return
		}
		if a := bo.Attempt(); !srv.waitBackoff(ctx, bo.Next(), a) {
			return
		}
	}
}
