package proxy

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// A hung provider is not hidden (DESIGN §3). Stormgate answers its consumers'
// heartbeats itself, so a provider that stops without dying (SIGSTOP, a deadlocked
// event loop, a stop-the-world pause that lasts) would otherwise look alive to
// everyone: consumers keep sending, Kubernetes keeps routing. Dead-peer detection
// (keepalive.upstream_max_missed heartbeat intervals, upstream.write_timeout) is
// tuned for dead, not hung. So, per provider connection, on the pool's sweep (every
// second while anything is owed on it):
//
//	| seen                                                           | then
//	|----------------------------------------------------------------|-------------------------------------------
//	| an answer owed (a request's or a heartbeat's) and nothing read  | a probe: one heartbeat (answered on the
//	| for half of keepalive.upstream_hung_timeout                    | provider's I/O thread, even while its
//	|                                                                | business threads are busy)
//	| the probe unanswered for half the timeout, nothing read for all | hung
//	| of it; or the kernel took no byte of its queue for all of it   |
//	| anything read from it                                          | not hung any more
//
// A hung connection takes no new requests (they go to another connection, or wait
// in the hold queue up to their consumers' deadlines, so they are not piled into a
// provider that will run them after their consumers gave up). A provider with no
// usable connection and at least one hung is a hung provider: READONLY to its
// consumers (so Java consumers prefer other providers), /readyz 503 with the reason,
// a WARN log line, stormgate_upstream_hung; WRITEABLE and back to normal when it is
// heard again. keepalive.upstream_hung_timeout 0 turns all of it off. A slow method
// is not a hang: the probe's answer comes back while it runs.

// checkHung runs on the pool's sweep (the wheel goroutine), which alone uses probeAt.
func (uc *upConn) checkHung(now int64, cfg *Config) {
	t := int64(cfg.UpstreamHungTimeout)
	if t <= 0 || uc.state.Load() == stateClosed {
		uc.probeAt = 0
		if uc.hung.Load() {
			uc.unhang(now)
		}
		return
	}
	if uc.hung.Load() {
		return // only a read ends it (consume)
	}
	if st := uc.w.StalledFor(now); st >= t {
		uc.markHung(now, "the provider took no byte of the queued requests for keepalive.upstream_hung_timeout")
		return
	}
	if uc.npending.Load() == 0 && uc.queuedRequests() == 0 {
		uc.probeAt = 0 // nothing owed: silence is idleness
		return
	}
	switch HangRule(now, uc.lastRead.Load(), &uc.probeAt, t) {
	case HangProbe:
		uc.probe(now)
	case HangHung:
		uc.markHung(now, "no answer to requests or to a heartbeat for keepalive.upstream_hung_timeout")
	}
}

// HangVerdict is what the rule's clock says of a connection that owes an answer and is not hung yet.
type HangVerdict uint8

const (
	HangWait  HangVerdict = iota
	HangProbe             // silent for half the timeout and no probe out: probe now
	HangHung              // the probe unanswered for half the timeout, silent for all of it
)

// HangRule is the table above over a connection's clock, for either protocol (proxy/triple/hung.go): lastRead is when
// the provider last sent anything on it, *probeAt when the outstanding probe went out (0: none; cleared
// here once the provider was heard since), t keepalive.upstream_hung_timeout.
func HangRule(now, lastRead int64, probeAt *int64, t int64) HangVerdict {
	if *probeAt != 0 && lastRead >= *probeAt {
		*probeAt = 0 // heard since the probe
	}
	silent := now - lastRead
	switch {
	case *probeAt == 0 && silent >= t/2:
		return HangProbe
	case *probeAt != 0 && now-*probeAt >= t/2 && silent >= t:
		return HangHung
	}
	return HangWait
}

// probe sends a heartbeat whose answer tells a hung provider from a busy one.
func (uc *upConn) probe(now int64) {
	var buf [64]byte
	if uc.sendControl(uc.pool.srv.codec.AppendHeartbeatRequest(buf[:0], 0), true) {
		uc.pool.srv.m.hbSent.Inc()
		uc.probeAt = now
	}
}

// markHung stops the connection taking new requests, and probes the provider's other
// connections at once: they belong to the same process, so an idle one is likely
// hung too, and new requests would go there (sweep only).
func (uc *upConn) markHung(now int64, why string) {
	if !uc.hung.CompareAndSwap(false, true) {
		return
	}
	p := uc.pool
	for o := range p.dubbo.conns() {
		if o != uc && !o.hung.Load() && o.probeAt == 0 && o.state.Load() != stateClosed {
			o.probe(now)
		}
	}
	p.srv.log.Warn("provider connection hung: it takes no new requests until the provider is heard again",
		zap.String("provider", p.addr), zap.Int("slot", uc.slot), zap.String("why", why),
		zap.Duration("silent_for", time.Duration(now-uc.lastRead.Load())), zap.Int32("owed", uc.npending.Load()),
		zap.Int("queued", uc.queuedRequests()))
	p.connChanged()
	uc.requeue() // never sent: held up to their deadlines rather than left behind a stopped writer
}

// unhang is the end of a hang: the provider was heard on this connection.
func (uc *upConn) unhang(now int64) {
	if !uc.hung.CompareAndSwap(true, false) {
		return
	}
	p := uc.pool
	p.srv.log.Info("provider connection heard again: it takes requests again", zap.String("provider", p.addr),
		zap.Int("slot", uc.slot))
	p.connChanged()
	p.hold.dispatch()
}

// hungState is a pool's part of hang detection: whether the provider is hung (no
// usable connection, at least one hung), and since when.
type hungState struct {
	since atomic.Int64 // 0 when not hung
}

// noteHung records the provider's state from connChanged's counts.
func (p *pool) noteHung(ready, hung int) {
	srv := p.srv
	now := srv.now()
	switch {
	case ready == 0 && hung > 0:
		if p.hang.since.CompareAndSwap(0, now) {
			srv.m.hangs.Inc()
			srv.log.Warn("provider hung: no usable connection answers; requests are held up to their consumers' "+
				"deadlines, consumers get READONLY and /readyz answers 503 until it answers again",
				zap.String("provider", p.addr), zap.Int("hung_connections", hung),
				zap.Duration("hung_timeout", srv.cfg.Load().UpstreamHungTimeout))
		}
	default:
		if since := p.hang.since.Swap(0); since != 0 {
			srv.log.Info("provider answers again: no longer hung", zap.String("provider", p.addr),
				zap.Duration("hung_for", time.Duration(now-since)))
		}
	}
}

// Hung describes the providers that are hung now, for /readyz; "" when none is.
func (s *Server) Hung() string {
	now := s.now()
	desc := ""
	for _, p := range s.poolList() {
		if since := p.hang.since.Load(); since != 0 {
			if desc != "" {
				desc += "; "
			}
			desc += "provider " + p.addr + " hung for " + time.Duration(now-since).Round(time.Millisecond).String() +
				" (no answer to requests or heartbeats: keepalive.upstream_hung_timeout)"
		}
	}
	return desc
}

// hungProviders counts the providers hung now (stormgate_upstream_hung).
func (s *Server) hungProviders() int {
	n := 0
	for _, p := range s.poolList() {
		if p.hang.since.Load() != 0 {
			n++
		}
	}
	return n
}

func newHangMetrics(s *Server) []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "stormgate_upstream_hung",
			Help: "Providers hung now: no usable connection, at least one owing an answer and silent for " +
				"keepalive.upstream_hung_timeout although probed with a heartbeat. /readyz answers 503 meanwhile."},
			func() float64 { return float64(s.hungProviders()) }),
	}
}
