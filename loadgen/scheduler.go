package loadgen

import (
	"cmp"
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

const (
	never = math.MaxInt64
	// hbSlack lets heartbeats wait this long so that many go out per wake-up. Heartbeat RTT is measured
	// from the actual send, so the slack does not bias it; request times are never coarsened.
	hbSlack = int64(2 * time.Millisecond)
	// maxPickScan bounds the search for a usable connection per request.
	maxPickScan = 64
)

// scheduler is the single goroutine that decides when every request and heartbeat is due. Request k
// is due at runStart + k/Rate exactly (open loop) and goes to the next usable connection round-robin;
// its latency is later measured from that due time, so a late wake-up here, a slow write or a stalled
// server all show in the figures instead of hiding (no coordinated omission). Heartbeats go to each
// open connection every HeartbeatInterval at the connection's random phase; the connections are kept
// sorted by phase, so finding the next one due is O(1).
type scheduler struct {
	r        *runner
	rng      *rand.Rand // body sizes and one-way draws
	hbOrder  []*consumer
	hbCursor int
	hbCycle  int64
	interval int64
	period   float64 // ns between requests
	k        uint64  // next request number
	paused   bool    // Config.Pause was true at the last request that fell due
	rr       int     // round-robin cursor
}

func newScheduler(r *runner) *scheduler {
	s := &scheduler{r: r, interval: int64(r.cfg.HeartbeatInterval), rng: rand.New(rand.NewPCG(r.seed, 1))}
	if r.cfg.Rate > 0 {
		s.period = 1e9 / r.cfg.Rate
	}
	if s.interval > 0 {
		s.hbOrder = slices.Clone(r.consumers)
		slices.SortFunc(s.hbOrder, func(a, b *consumer) int { return cmp.Compare(a.phase, b.phase) })
	}
	return s
}

// loop runs until the request phase ends (Duration after the time received on start) or ctx ends.
func (s *scheduler) loop(ctx context.Context, start <-chan int64) {
	r := s.r
	reqStart, reqEnd := int64(never), int64(never)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := r.now()
		next := int64(never)
		if reqStart != never {
			next = reqEnd
			for s.k < r.cfg.Requests {
				at := reqStart + int64(float64(s.k)*s.period)
				if at >= reqEnd {
					s.k = r.cfg.Requests
					break
				}
				if at > now {
					next = at
					break
				}
				if s.pausedNow(now) {
					r.cnt.paused.Add(1)
					s.k++
					continue
				}
				if h := r.cfg.hooks.beforeRequest; h != nil {
					h(s.k)
				}
				s.request(at)
				s.k++
			}
		}
		if now >= reqEnd { // every request due before the end has been handed out above
			return
		}
		if s.interval > 0 {
			next = min(next, s.heartbeats(now)+hbSlack)
		}
		wait := next - r.now()
		if wait <= 0 {
			continue
		}
		timer.Reset(time.Duration(wait))
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case t := <-start:
			reqStart, reqEnd, start = t, t+int64(r.cfg.Duration), nil
		}
	}
}

// pausedNow reads Config.Pause. While paused the longest answer gap is off; on resuming it starts
// again from now, so a pause never counts as a gap.
func (s *scheduler) pausedNow(now int64) bool {
	r := s.r
	p := r.cfg.Pause != nil && r.cfg.Pause.Load()
	switch {
	case p && !s.paused:
		r.gapOn.Store(false)
	case !p && s.paused:
		r.lastAnswer.Store(now)
		r.gapOn.Store(true)
	}
	s.paused = p
	return p
}

func (s *scheduler) request(at int64) {
	cfg := &s.r.cfg
	cnt := &s.r.cnt
	cnt.scheduled.Add(1)
	var key uint64
	var size int
	var oneWay bool
	if cfg.BodyMax > 0 {
		key, size = cfg.KeyBase+s.k+1, s.bodySize()
		oneWay = cfg.OneWay > 0 && s.rng.Float64() < cfg.OneWay
	}
	cs := s.r.consumers
	for range min(len(cs), maxPickScan) {
		c := cs[s.rr]
		if s.rr++; s.rr == len(cs) {
			s.rr = 0
		}
		if c.usable() {
			if !c.sendRequest(at, key, size, oneWay) {
				break
			}
			if oneWay {
				cnt.oneWaySent.Add(1)
			} else {
				cnt.sent.Add(1)
			}
			return
		}
	}
	cnt.unsent.Add(1)
}

// bodySize draws a checked body's size, log-uniform in [BodyMin, BodyMax]: as many bodies of
// 10-100 bytes as of 10-100 KiB.
func (s *scheduler) bodySize() int {
	lo, hi := float64(s.r.cfg.BodyMin), float64(s.r.cfg.BodyMax)+1
	n := int(math.Exp(math.Log(lo) + s.rng.Float64()*(math.Log(hi)-math.Log(lo))))
	return min(max(n, s.r.cfg.BodyMin), s.r.cfg.BodyMax)
}

// heartbeats sends every heartbeat due by now and returns when the next one is due. A connection that
// missed whole intervals (the process was stalled) sends one heartbeat, not a burst.
func (s *scheduler) heartbeats(now int64) int64 {
	for {
		c := s.hbOrder[s.hbCursor]
		at := s.hbCycle*s.interval + c.phase
		if at > now {
			return at
		}
		if now-at < s.interval {
			c.sendHeartbeat(now)
		}
		if s.hbCursor++; s.hbCursor == len(s.hbOrder) {
			s.hbCursor = 0
			s.hbCycle++
			if behind := (now - s.hbCycle*s.interval) / s.interval; behind > 0 {
				s.hbCycle += behind // skip whole missed cycles
			}
		}
	}
}
