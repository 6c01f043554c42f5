package proxy

import (
	"math"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// warmup ramps the rate of requests forwarded to a provider that just came back
// (like Dubbo's provider warm-up), so a cold JVM is not hit with the full load at
// once. During upstream.warmup the allowed rate grows linearly from 5% to 100% of
// the rate observed before the outage; requests over it wait in the hold queue
// (and expire from it like any held request). One ramp per provider, whichever
// protocol's connection came first, paces both: Dubbo requests leave the hold queue
// through it (hold.go) and HTTP/2 calls take a provider stream through it
// (h2Pool.open and pumpLocked), so the rate is the provider's calls of both kinds.
type warmup struct {
	start  int64 // unix nanos; the ramp ends upstream.warmup later, read live
	target float64
	lim    *rate.Limiter
}

const warmupFloor = 0.05

// WarmRetry is how soon a request or call the ramp held back is tried again (Provider.WarmAllow).
const WarmRetry = 5 * time.Millisecond

// rateMeter keeps a smoothed two-way request rate per pool, sampled by onSweep from
// the count of requests sent.
type rateMeter struct {
	last uint64
	ewma atomic.Uint64 // float64 bits of requests/s
}

func (m *rateMeter) sample(c uint64, interval time.Duration) {
	r := float64(c-m.last) / interval.Seconds()
	m.last = c
	old := float64frombits(m.ewma.Load())
	if old == 0 {
		old = r
	}
	m.ewma.Store(float64bits(0.7*old + 0.3*r))
}

func (m *rateMeter) rate() float64 { return float64frombits(m.ewma.Load()) }

// startWarmup begins a ramp when the pool goes from no usable connection to one.
func (p *pool) startWarmup() {
	d := p.srv.cfg.Load().Warmup
	if d <= 0 {
		return
	}
	target := p.meter.rate()
	if target < 100 {
		target = 100 // too little history to scale from: ramp to a modest floor
	}
	now := p.srv.now()
	w := &warmup{start: now, target: target,
		lim: rate.NewLimiter(rate.Limit(target*warmupFloor), int(max(1, target*warmupFloor/10)))}
	p.warm.Store(w)
	p.srv.log.Sugar().Infow("provider back: warming up", "duration", d, "target_rps", target)
}

// warmAllow reports whether one more request may go to the provider now.
func (p *pool) warmAllow() bool {
	w := p.warm.Load()
	if w == nil {
		return true
	}
	n := p.srv.now()
	now := time.Unix(0, n)
	d := int64(p.srv.cfg.Load().Warmup)
	if n-w.start >= d {
		p.warm.CompareAndSwap(w, nil)
		return true
	}
	frac := max(warmupFloor, float64(n-w.start)/float64(d))
	lim := rate.Limit(w.target * frac)
	if w.lim.Limit() != lim {
		w.lim.SetLimitAt(now, lim)
		w.lim.SetBurstAt(now, int(max(1, w.target*frac/10)))
	}
	return w.lim.AllowN(now, 1)
}

// warming reports whether a ramp is in progress.
func (p *pool) warming() bool { return p.warm.Load() != nil }

func float64bits(f float64) uint64     { return math.Float64bits(f) }
func float64frombits(b uint64) float64 { return math.Float64frombits(b) }
