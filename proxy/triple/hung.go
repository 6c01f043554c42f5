package triple

import (
	"time"

	"github.com/stormgate/stormgate/proxy"
	"go.uber.org/zap"
)

// A hung HTTP/2 provider is not hidden either (proxy/hung.go has the rule and its reasons). Stormgate answers
// its consumers' PINGs itself, so a Triple or gRPC provider that stops without dying would look alive to
// everyone. Per HTTP/2 provider connection, on the pool's sweep (every second while a call is on a
// provider stream), with keepalive.upstream_hung_timeout as for Dubbo:
//
//	| seen                                                         | then
//	|--------------------------------------------------------------|------------------------------------------
//	| a call on one of its streams and nothing read for half of    | a probe: a PING (the provider's HTTP/2
//	| the timeout                                                  | layer acks it while its handlers are busy)
//	| the probe unacked for half the timeout, nothing read for all | hung
//	| of it; or the kernel took no byte of its output for all of it|
//	| anything read from it                                        | not hung any more
//
// A hung connection opens no new stream: calls wait in the hold queue up to their consumers' deadlines
// (or go to another connection), rather than piling into a provider that would run them after their
// consumers gave up; the calls already on it stay (a provider that resumes answers them). A provider with
// no usable connection of either protocol and at least one hung is a hung provider, as for Dubbo: /readyz
// 503, stormgate_upstream_hung, a WARN line, READONLY to its Dubbo consumers. Its HTTP/2 consumers are not
// sent GOAWAY (drain.readonly_policy: it would end their connections).
//
// The probe is one of the connection's quiet PINGs (keepalive.go): the one outstanding if there is one,
// else a new one only while fewer than maxQuietPings went out since the provider last sent HEADERS or
// DATA, so that gRPC's PING policy is kept. A call silent past that budget (a long-running method that
// sends nothing) cannot be told from a hang by a PING, and is never declared hung: the kernel's part of
// the rule (nothing written for the whole timeout) and the dead-peer rule still apply. Idle connections
// are not probed (a PING without a stream is a strike under gRPC's policy): one that a hung provider
// leaves idle is found when a call goes to it.

// CheckHung applies the rule to the pool's connections (the sweep, on the wheel goroutine, which alone
// uses probeAt); it returns the number of calls on provider streams, for which the sweep keeps running.
func (hp *h2Pool) CheckHung(now int64, cfg *proxy.Config) int {
	t := int64(cfg.UpstreamHungTimeout)
	var hung []*h2Upstream
	healed := false
	var notes h2Notes
	hp.mu.Lock()
	for _, u := range hp.ups {
		switch {
		case t <= 0:
			u.probeAt = 0
			if u.hung.Swap(false) {
				healed = true
			}
		case u.hung.Load(): // only a read ends it (heardLocked)
		case u.w.StalledFor(now) >= t:
			u.markHungLocked("the provider took no byte of Stormgate's output for keepalive.upstream_hung_timeout")
			hung = append(hung, u)
		case u.calls.Len() == 0:
			u.probeAt = 0 // nothing owed: silence is idleness
		default:
			switch proxy.HangRule(now, u.lastRead.Load(), &u.probeAt, t) {
			case proxy.HangProbe:
				u.probeAt = u.probeLocked(now)
			case proxy.HangHung:
				u.markHungLocked("no answer to calls or to a PING for keepalive.upstream_hung_timeout")
				hung = append(hung, u)
			}
		}
	}
	if healed {
		hp.pumpLocked(now, &notes)
	}
	open := hp.streams
	hp.unlock()
	notes.run()
	for _, u := range hung {
		hp.env.Log().Warn("HTTP/2 provider connection hung: it opens no new stream until the provider is heard again",
			zap.String("provider", hp.prov.Addr()), zap.String("why", u.hungWhy),
			zap.Duration("silent_for", time.Duration(now-u.lastRead.Load())))
	}
	if len(hung) > 0 || healed {
		hp.prov.ConnChanged()
	}
	return open
}

// probeLocked is the PING that tells a hung provider from a busy one: when it went out, or 0 when none
// may go (the quiet budget is spent).
func (u *h2Upstream) probeLocked(now int64) int64 {
	switch {
	case u.pingSent != 0:
		return u.pingSent
	case u.quietPings >= maxQuietPings:
		return 0
	}
	u.pingLocked(now)
	return now
}

func (u *h2Upstream) markHungLocked(why string) {
	u.hung.Store(true)
	u.hungWhy = why
}

// heardLocked ends a hang: bytes came from the provider on u (the reader, under hp.mu). It reports
// whether u was hung; the caller tells the pool (connChanged) once the lock is released.
func (u *h2Upstream) heardLocked(now int64, notes *h2Notes) bool {
	if !u.hung.Swap(false) {
		return false
	}
	u.probeAt = 0
	u.hp.pumpLocked(now, notes) // calls that waited for a stream may take one here again
	return true
}

// hungConns is the number of the pool's usable HTTP/2 connections that are hung.
func (hp *h2Pool) hungConns() int {
	hp.mu.Lock()
	defer hp.unlock()
	n := 0
	for _, u := range hp.ups {
		if u.hung.Load() {
			n++
		}
	}
	return n
}
