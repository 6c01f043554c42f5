package proxy

import (
	"context"
	"time"

	"github.com/stormgate/stormgate/keepalive"
)

// The live rule (DESIGN §5: every setting is live): a duration setting that bounds a
// wait bounds the waits already running too. When Update changes one, each wait it
// bounds is re-armed for what the new value allows, counted from when the wait
// began: lowering a timeout ends the waits already longer than it within a wheel
// tick; raising it lets them run on. TestEveryLiveDurationIsRearmed checks this for
// every duration of the settings schema that may change live.
//
//	| setting                              | waits it bounds                 | how a change reaches them
//	|--------------------------------------|---------------------------------|------------------------------------
//	| keepalive.downstream_idle_timeout,   | each consumer's timer; an       | fired now: onTimer (onStall) re-arms
//	| limits.frame_read_timeout            | HTTP/2 consumer's stall check   | for what is left of the new value
//	| keepalive.upstream_interval          | each provider connection's      | re-armed with the new interval
//	|                                      | heartbeat (HTTP/2: PING) check  |
//	| upstream.write_timeout               | a stalled writer's timer (either| fired now: onStallTimer fails the
//	|                                      | protocol's provider connection) | connection or re-arms for the rest
//	| upstream.backoff_base, backoff_max   | a reconnect wait; the pause     | a wait never outlasts the window
//	|                                      | after a not-executed answer     | the new values give; a pause ends
//	|                                      |                                 | by now + backoff_max
//	| hold.timeout, hold.max_timeout,      | each held request's wait, Dubbo | every held request's end worked
//	| hold.deadline_margin,                | or HTTP/2 (a call waiting for a | out again from its arrival, the
//	| limits.max_request_age               | provider stream)                | expiry timer (a call's) re-armed
//	| limits.max_request_age,              | the pool's sweep (every second) | read at each sweep
//	| keepalive.upstream_hung_timeout      |                                 |
//	| drain.timeout                        | a provider's drain; Stormgate's | re-armed from the drain's start
//	|                                      | own drain (Server.Drain)        |
//	| upstream.warmup                      | a warm-up ramp                  | the ramp's end read at each request
//	| upstream.connect_timeout             | one connect(2)                  | the next attempt (one attempt lasts
//	|                                      |                                 | at most the old value)
//	| hold.not_executed_window,            | none: read when an answer comes | —
//	| access_log.slow_threshold            |                                 |

// rearm applies the live rule for the durations that changed from old to cfg.
func (s *Server) rearm(old, cfg *Config, pools []*pool) {
	if cfg.DownstreamIdleTimeout != old.DownstreamIdleTimeout || cfg.FrameReadTimeout != old.FrameReadTimeout {
		// onTimer computes what is due from the new values and re-arms itself; so do the protocol's
		// own timers: Dubbo's frame_read_timeout (dubboconsumer.go), an HTTP/2 consumer's stall check
		// (proxy/triple/stall.go); each does nothing when nothing waits.
		s.sessions.each(func(ss *session) {
			s.wheel.Schedule(&ss.timer, 0)
			if ss.proto.Load() != protoUnknown { // ss.down is set before proto
				ss.down.TimeoutsChanged()
			}
		})
	}
	if cfg.HoldTimeout != old.HoldTimeout || cfg.HoldMaxTimeout != old.HoldMaxTimeout ||
		cfg.DeadlineMargin != old.DeadlineMargin || cfg.MaxRequestAge != old.MaxRequestAge {
		for _, p := range pools {
			p.hold.rearm(old, cfg)
		}
	}
	for _, p := range pools {
		// Each protocol re-arms what the change moves for it: its connections' heartbeat checks and
		// stalled writers (dubboUpstream.SettingsChanged, h2Pool.SettingsChanged), HTTP/2's waiting calls.
		for _, u := range p.upstreams() {
			u.SettingsChanged(old, cfg)
		}
	}
	if cfg.DrainTimeout != old.DrainTimeout {
		for _, p := range pools {
			if since := p.pdrain.since.Load(); since != 0 {
				s.wheel.ScheduleAt(&p.pdrain.timer, time.Unix(0, since+int64(cfg.DrainTimeout)))
			}
		}
	}
	if cfg.BackoffMax < old.BackoffMax {
		for _, p := range pools {
			p.pause.shortenPause(s.now() + int64(cfg.BackoffMax))
			p.hold.dispatch() // re-arms the retry for the new end of the pause
		}
	}
	// Last: whoever wakes on it reads the new values.
	ch := make(chan struct{})
	close(*s.changed.Swap(&ch))
}

// settingsChanged is closed at the next Update.
func (s *Server) settingsChanged() <-chan struct{} { return *s.changed.Load() }

// sleepLive waits on the server's clock until due(the settings in force) has passed
// since it was called, working due out again after each settings change; false
// when ctx ended first.
func (s *Server) sleepLive(ctx context.Context, due func(*Config) time.Duration) bool {
	start := s.now()
	var t keepalive.Timer
	ch := signalOn(&t)
	defer s.wheel.Stop(&t)
	for {
		changed := s.settingsChanged()
		rest := due(s.cfg.Load()) - time.Duration(s.now()-start)
		if rest <= 0 {
			return true
		}
		s.wheel.Schedule(&t, rest)
		select {
		case <-ch:
		case <-changed:
		case <-ctx.Done():
			return false
		}
	}
}

// waitBackoff waits d, a delay bo drew at attempt, on the server's clock; never
// longer than the window the settings in force give that attempt (the live rule).
// False when ctx ended first.
func (s *Server) waitBackoff(ctx context.Context, d time.Duration, attempt int) bool {
	return s.sleepLive(ctx, func(cfg *Config) time.Duration {
		if attempt < 63 && cfg.BackoffBase <= cfg.BackoffMax>>attempt {
			return min(d, cfg.BackoffBase<<attempt)
		}
		return min(d, cfg.BackoffMax)
	})
}

// signalOn makes t, each time it fires, leave a signal in the channel it returns
// (one at most: a timer re-armed after it fired cannot block the wheel).
func signalOn(t *keepalive.Timer) <-chan struct{} {
	ch := make(chan struct{}, 1)
	t.Init(func() {
		select {
		case ch <- struct{}{}:
		default:
		}
	})
	return ch
}
