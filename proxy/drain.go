package proxy

// Stormgate's own drain (SIGTERM): announce it, wait for the calls in flight, close
// every connection without losing a byte queued for it.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/stormgate/stormgate/keepalive"
)

// Draining reports whether Drain has started.
func (s *Server) Draining() bool { return s.draining.Load() }

// Announce starts a drain without stopping service (drain.min_duration): Ready
// turns false and every consumer gets READONLY, also each one that connects
// afterwards, while requests are still served. Drain finishes it. Calls after
// the first do nothing.
func (s *Server) Announce() {
	if s.announced.Swap(true) {
		return
	}
	s.log.Info("draining: sending READONLY to every consumer; still serving", zap.Int("consumers", s.sessions.len()))
	// Each protocol's form of READONLY: Dubbo's event, HTTP/2's GOAWAY (proxy/triple/session.go). A
	// consumer still undecided gets it once its first bytes decide (sniff.go, Env.Announced).
	s.sessions.each(func(ss *session) {
		if ss.proto.Load() != protoUnknown { // ss.down is set before proto
			ss.down.Announce()
		}
	})
}

// Drain shuts down gracefully: every consumer gets READONLY (so it stops sending
// here and fails over) unless Announce sent it already, requests in flight finish
// until drain.timeout or ctx ends, then every connection closes. The caller stops
// the listener first.
func (s *Server) Drain(ctx context.Context) error {
	if !s.draining.CompareAndSwap(false, true) {
		return errors.New("proxy: drain already in progress")
	}
	cfg := s.cfg.Load()
	s.log.Info("draining: waiting for requests in flight", zap.Int("consumers", s.sessions.len()),
		zap.Duration("timeout", cfg.DrainTimeout))
	s.Announce()
	s.sessions.each(func(ss *session) {
		if ss.proto.Load() != protoUnknown { // HTTP/2: the graceful GOAWAY's second half, if its PING was not answered yet
			ss.down.Drain()
		}
	})
	var err error
	start := s.now()
	if s.InFlight() > 0 {
		var t keepalive.Timer
		timeout := signalOn(&t)
		for err == nil && s.InFlight() > 0 {
			changed := s.settingsChanged()
			cfg = s.cfg.Load()
			s.wheel.ScheduleAt(&t, time.Unix(0, start+int64(cfg.DrainTimeout))) // drain.timeout is live
			select {
			case <-s.drainIdle: // some consumer's last request was answered: count again
			case <-changed:
			case <-timeout:
				err = fmt.Errorf("drain: %d requests still in flight after drain.timeout (%v)", s.InFlight(), cfg.DrainTimeout)
			case <-ctx.Done():
				err = fmt.Errorf("drain: %d requests still in flight: %w", s.InFlight(), ctx.Err())
			}
		}
		s.wheel.Stop(&t)
	}
	s.log.Info("drain finished; closing connections", zap.Int64("in_flight_left", s.InFlight()))
	s.closeLingering(ctx, max(DrainLingerMin, time.Duration(start+int64(s.cfg.Load().DrainTimeout)-s.now())))
	s.Close()
	return err
}

// DrainLingerMin is the least time a drain's lingering close gives a consumer to read what is queued for it
// and close its side; a drain that ended early gives it the rest of drain.timeout.
const DrainLingerMin = time.Second

// closeLingering ends the drain's connections without losing what they were sent. Pools close first: what
// is still held or in flight is answered with an error. Then each consumer connection closes the lingering
// way (Consumer.Linger): the bytes queued for it are written, then FIN, and the socket closes once the
// consumer closes its side, which a consumer does when it reads the FIN, or after linger. It returns when
// every consumer connection is closed, or when ctx ends (Close then closes the rest at once).
func (s *Server) closeLingering(ctx context.Context, linger time.Duration) {
	s.closePools()
	s.sessions.each(func(ss *session) { ss.lingerClose(CloseShutdown, linger) })
	for s.sessions.len() > 0 {
		select {
		case <-s.drainIdle: // a consumer connection closed: count again
		case <-ctx.Done():
			return
		}
	}
}

// InFlight is the number of accepted two-way requests (held or forwarded) not yet
// answered, over the consumers still connected.
func (s *Server) InFlight() int64 {
	_, n := s.sessions.totals()
	return n
}

// signalDrain wakes a waiting Drain to count again: a consumer's last call settled, or a consumer
// connection closed.
func (s *Server) signalDrain() {
	select {
	case s.drainIdle <- struct{}{}:
	default:
	}
}
