package triple

import (
	"encoding/binary"
	"time"

	"go.uber.org/zap"

	"github.com/stormgate/stormgate/keepalive"
	"github.com/stormgate/stormgate/proxy"
	"github.com/stormgate/stormgate/proxy/h2"
)

// HTTP/2 provider liveness: Stormgate's own PINGs, on the wheel, with the Dubbo heartbeat's settings
// (keepalive.upstream_interval, upstream_jitter, upstream_max_missed), and upstream.write_timeout as for a
// Dubbo connection (a provider that takes no byte of Stormgate's output for that long: closed, onStallTimer). A PING goes out when a stream is
// open on the connection (an answer is owed), nothing was read from it for an interval, and none is
// outstanding (counted in stormgate_upstream_heartbeats_sent_total); a PING unanswered for
// upstream_max_missed intervals declares the connection dead: it is closed, each of its streams gets
// grpc-status 14 saying so, and its slot dials again. Consumers' PINGs never reach the provider
// (session.go); these are the only ones.
//
// Why not on idle connections, and at most maxQuietPings while the provider sends nothing: gRPC servers
// police client PINGs. grpc-go's default policy counts a PING as a strike when no stream is open (unless
// two hours passed since the last) or when it comes within 5 minutes of the last, forgives them only when
// it sends HEADERS or DATA, and past 2 strikes answers GOAWAY ENHANCE_YOUR_CALM "too_many_pings" and
// closes the connection, streams and all (grpc-java's permitKeepAliveTime is 5 minutes too). Dubbo-style
// 30 s PINGs on idle connections would have such a provider close every connection every ~90 s. So an
// idle connection is found dead by its next request, and a call silent for longer than maxQuietPings
// intervals is watched by TCP alone from then on.
const maxQuietPings = 2

// startBeat arms the first beat once the connection is usable (under hp.mu).
func (u *h2Upstream) startBeat() {
	cfg := u.hp.env.Config()
	u.hp.env.Wheel().Schedule(&u.beat, keepalive.Jitter(cfg.UpstreamInterval, cfg.UpstreamJitter, nil))
}

// onBeat runs on the wheel goroutine.
func (u *h2Upstream) onBeat() {
	hp := u.hp
	env := hp.env
	cfg := env.Config()
	now := env.Now()
	interval := int64(cfg.UpstreamInterval)
	hp.mu.Lock()
	if u.dead {
		hp.unlock()
		return
	}
	dead := u.pingSent != 0 && now-u.pingSent >= interval*int64(cfg.UpstreamMaxMissed)
	switch {
	case dead:
		u.deadWhy = "no answer to a PING within " + (time.Duration(cfg.UpstreamMaxMissed) * cfg.UpstreamInterval).String()
	case u.pingSent == 0 && u.calls.Len() > 0 && u.quietPings < maxQuietPings && now-u.lastRead.Load() >= interval:
		u.pingLocked(now)
	}
	hp.unlock()
	if dead {
		env.Log().Warn("HTTP/2 provider connection dead: closing it", zap.String("provider", hp.prov.Addr()),
			zap.String("why", u.deadWhy))
		u.shut() // the reader ends and ends every call on it
		return
	}
	env.Wheel().Schedule(&u.beat, keepalive.Jitter(cfg.UpstreamInterval, cfg.UpstreamJitter, nil))
}

// WriteStalled arms the write timeout (the writer's owner: the kernel took no byte of a write).
func (u *h2Upstream) WriteStalled() {
	if t := u.hp.env.Config().WriteTimeout; t > 0 {
		u.hp.env.Wheel().Schedule(&u.stall, t)
	}
}

// onStallTimer closes the connection when the kernel has taken no byte of Stormgate's output for
// upstream.write_timeout (the provider stopped reading), so that its calls end instead of waiting behind
// it: a call none of whose bytes left Stormgate is sent again on another connection, the others get
// grpc-status 14 naming the setting (die). Runs on the wheel goroutine.
func (u *h2Upstream) onStallTimer() {
	hp := u.hp
	env := hp.env
	t := env.Config().WriteTimeout
	stalled := time.Duration(u.w.StalledFor(env.Now()))
	switch {
	case t <= 0 || stalled == 0:
	case stalled < t:
		env.Wheel().Schedule(&u.stall, t-stalled)
	default:
		hp.mu.Lock()
		dead := u.dead
		if !dead && u.deadWhy == "" {
			u.deadWhy = "the provider accepted no bytes for upstream.write_timeout (" + t.String() + ")"
		}
		hp.unlock()
		if !dead {
			env.Log().Warn("HTTP/2 provider connection stalled: closing it", zap.String("provider", hp.prov.Addr()),
				zap.Duration("write_timeout", t))
			u.shut() // the reader ends and ends every call on it
		}
	}
}

// rearmBeats applies a live change of keepalive.upstream_interval (each connection's next beat) or
// upstream.write_timeout (a stalled writer's timer, which works out the rest) to the pool's connections
// (proxy/rearm.go).
func (hp *h2Pool) rearmBeats(old, cfg *proxy.Config) {
	env := hp.env
	hp.mu.Lock()
	defer hp.unlock()
	for _, u := range hp.ups {
		if cfg.UpstreamInterval != old.UpstreamInterval || cfg.UpstreamJitter != old.UpstreamJitter {
			env.Wheel().Schedule(&u.beat, keepalive.Jitter(cfg.UpstreamInterval, cfg.UpstreamJitter, nil))
		}
		if cfg.WriteTimeout != old.WriteTimeout && u.w.StalledFor(env.Now()) > 0 {
			env.Wheel().Schedule(&u.stall, 0)
		}
	}
}

// pingLocked sends one of the connection's quiet PINGs (under hp.mu; the caller checked the budget).
func (u *h2Upstream) pingLocked(now int64) {
	u.quietPings++
	u.pingSeq++
	var data [8]byte
	binary.BigEndian.PutUint64(data[:], u.pingSeq)
	u.conn.Ping(data)
	u.flushLocked()
	u.pingSent = now
	u.hp.env.CountHeartbeatSent()
}

// pingAnswered takes the provider's PING ACK (under hp.mu).
func (u *h2Upstream) pingAnswered(ev h2.Event) {
	if binary.BigEndian.Uint64(ev.Ping[:]) == u.pingSeq {
		u.pingSent = 0
	}
}
