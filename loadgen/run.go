package loadgen

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/stormgate/stormgate/loadgen/hist"
	"github.com/stormgate/stormgate/peer"
	"github.com/stormgate/stormgate/proxy/h2"
)

// numShards is the number of writer goroutines; more shards isolate a stalled server better.
const numShards = 8

// runner is the state of one Run.
type runner struct {
	cfg      Config
	seed     uint64 // cfg.Seed, or a random one
	t0       time.Time
	reqFrame []byte
	// Triple: the template call's message and every call's request head (read-only once built).
	tripleMsg  []byte
	tripleHead []h2.HeaderField
	consumers  []*consumer
	shards     []*shard
	dialSem    chan struct{}
	cnt        counters

	latHist, hbHist, connectHist, firstHist hist.Histogram
	windows                                 [2]hist.Histogram
	win                                     atomic.Pointer[hist.Histogram]
	phase                                   atomic.Value // string

	// The longest time without any answer during the request phase (answerGap).
	gapOn              atomic.Bool
	lastAnswer, maxGap atomic.Int64 // ns since t0; ns
}

// noteAnswer records an answer (request or heartbeat) at now for the longest gap.
func (r *runner) noteAnswer(now int64) {
	if !r.gapOn.Load() {
		return
	}
	r.raiseGap(now - r.lastAnswer.Swap(now))
}

func (r *runner) raiseGap(gap int64) {
	for {
		m := r.maxGap.Load()
		if gap <= m || r.maxGap.CompareAndSwap(m, gap) {
			return
		}
	}
}

// now is the monotonic time since the run started, in nanoseconds.
func (r *runner) now() int64 { return int64(time.Since(r.t0)) }

// Run executes one load run: the connect phase (open Conns connections at ConnectRate, heartbeats
// start as each one opens), the request phase (Duration of open-loop requests at Rate), and a drain
// (up to Timeout for the answers still in flight). progress, if not nil, is called about once per
// second from a goroutine of the run; it must return quickly.
//
// Run returns a Result whenever it got as far as starting; the error is non-nil only for an invalid
// Config or a cancelled ctx (then the Result is partial and Interrupted is set).
func Run(ctx context.Context, cfg Config, progress func(Snapshot)) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	r := &runner{
		cfg:      cfg,
		reqFrame: requestFrame(cfg.Service, cfg.Method, cfg.Arg),
		dialSem:  make(chan struct{}, cfg.DialConcurrency),
	}
	if cfg.triple() {
		r.reqFrame = nil
		r.tripleMsg = peer.AppendTripleString(nil, cfg.Arg)
		r.tripleHead = tripleHead(&r.cfg)
	}
	r.win.Store(&r.windows[0])
	r.phase.Store("connect")
	r.seed = cfg.Seed
	if r.seed == 0 {
		r.seed = rand.Uint64()
	}
	rng := rand.New(rand.NewPCG(r.seed, 0))
	for range numShards {
		r.shards = append(r.shards, newShard())
	}
	r.consumers = make([]*consumer, cfg.Conns)
	for i := range r.consumers {
		c := &consumer{r: r, idx: i, shard: r.shards[i%numShards]}
		if cfg.triple() {
			c.h2 = &h2state{}
		}
		if n := len(cfg.SourceAddrs); n > 0 {
			c.src = cfg.SourceAddrs[i%n]
		}
		if cfg.HeartbeatInterval > 0 {
			c.phase = rng.Int64N(int64(cfg.HeartbeatInterval))
		}
		r.consumers[i] = c
	}
	return r.run(ctx, progress)
}

func (r *runner) run(parent context.Context, progress func(Snapshot)) (*Result, error) {
	cfg := r.cfg
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	var wg sync.WaitGroup // owns every goroutine of the run
	defer wg.Wait()

	r.t0 = time.Now()
	cpu0 := rusage()
	for _, s := range r.shards {
		wg.Go(func() { s.loop(ctx) })
	}
	wg.Go(func() { r.sweep(ctx) })
	if progress != nil {
		wg.Go(func() { r.report(ctx, progress) })
	}
	sched := newScheduler(r)
	startReqs := make(chan int64, 1)
	schedDone := make(chan struct{})
	wg.Go(func() {
		defer close(schedDone)
		sched.loop(ctx, startReqs)
	})

	// Connect phase: ends when every consumer has made its first dial attempt.
	var dialed sync.WaitGroup
	dialed.Add(len(r.consumers))
	for _, c := range r.consumers {
		wg.Go(func() {
			var once sync.Once
			c.run(ctx, func() { once.Do(dialed.Done) })
			once.Do(dialed.Done)
		})
	}
	connected := make(chan struct{})
	wg.Go(func() { dialed.Wait(); close(connected) }) // every consumer dials once or exits
	select {
	case <-connected:
	case <-ctx.Done():
	}
	connectPhase := time.Duration(r.now())
	var startErr error
	if cfg.WaitStart != nil && ctx.Err() == nil {
		if startErr = cfg.WaitStart(ctx, int(r.cnt.connsOpen.Load())); startErr != nil {
			cancel()
		}
	}

	// Request phase.
	r.phase.Store("run")
	runStart := r.now()
	cpu1, frames1 := rusage(), r.cnt.frames()
	r.lastAnswer.Store(runStart)
	r.gapOn.Store(true)
	startReqs <- runStart
	select {
	case <-schedDone:
	case <-ctx.Done():
	}
	runEnd := r.now()
	r.gapOn.Store(false)
	r.raiseGap(runEnd - r.lastAnswer.Load())
	runPhase := time.Duration(runEnd - runStart)
	cpu2, frames2 := rusage(), r.cnt.frames()

	// Drain: answers still in flight get up to Timeout (the sweeper expires the rest).
	r.phase.Store("drain")
	drainEnd := time.Now().Add(cfg.Timeout + 2*r.sweepInterval())
	tick := time.NewTicker(5 * time.Millisecond)
	for r.cnt.inflight.Load() > 0 && time.Now().Before(drainEnd) && ctx.Err() == nil {
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
	tick.Stop()
	interrupted := parent.Err() != nil || startErr != nil
	openAtEnd := r.cnt.connsOpen.Load()
	cancel()
	wg.Wait()

	res := r.result()
	res.Interrupted = interrupted
	res.ConnsOpenAtEnd = uint64(openAtEnd)
	res.Elapsed = time.Since(r.t0)
	res.ConnectPhase = connectPhase
	res.RunPhase = runPhase
	res.MaxAnswerGap = time.Duration(r.maxGap.Load())
	cpu3 := rusage()
	res.CPU = CPUUsage{
		User: cpu3.user - cpu0.user, Sys: cpu3.sys - cpu0.sys,
		RunUser: cpu2.user - cpu1.user, RunSys: cpu2.sys - cpu1.sys,
		RunFrames: frames2 - frames1, MaxRSSKiB: cpu3.maxRSSKiB,
	}
	res.summarize()
	if startErr != nil {
		return res, startErr
	}
	return res, parent.Err()
}

func (r *runner) result() *Result {
	c := &r.cnt
	res := newResult()
	res.Config = r.cfg
	res.Config.Seed = r.seed
	res.Config.WaitStart = nil
	res.Config.hooks = testHooks{}
	res.Workers = 1
	res.ConnsOpened = c.connsOpened.Load()
	res.ConnectFailures = ConnectFailures{Refused: c.dialRefused.Load(), Timeout: c.dialTimeout.Load(),
		Reset: c.dialReset.Load(), Other: c.dialElse.Load()}
	res.Reconnects = c.reconnects.Load()
	res.Resets = c.resets.Load()
	res.ClosedByPeer = c.closedByPeer.Load()
	res.LeftOnReadonly = c.left.Load()
	res.ProtocolErrors = c.protocolErrors.Load()
	res.OtherConnErrors = c.other.Load()
	res.Scheduled = c.scheduled.Load()
	res.Sent = c.sent.Load()
	res.Unsent = c.unsent.Load()
	res.Paused = c.paused.Load()
	res.OneWaySent = c.oneWaySent.Load()
	res.OK = c.ok.Load()
	res.BodyMismatches = c.mismatches.Load()
	res.ForeignBodies = c.foreign.Load()
	res.Exceptions = c.exceptions.Load()
	res.Errors = c.errors.Load()
	for s := range c.byStatus {
		if n := c.byStatus[s].Load(); n > 0 {
			res.ErrorByStatus[s] = n
		}
	}
	res.Timeouts = c.timeouts.Load()
	res.Lost = c.lost.Load()
	res.Abandoned = c.abandoned.Load()
	res.LateReplies = c.lateReplies.Load()
	res.UnknownIDs = c.unknownIDs.Load()
	res.Duplicates = c.duplicates.Load()
	res.HeartbeatsSent = c.hbSent.Load()
	res.HeartbeatsAnswered = c.hbAnswered.Load()
	res.HeartbeatsTimedOut = c.hbTimedOut.Load()
	res.HeartbeatsLost = c.hbLost.Load()
	res.HeartbeatsAbandoned = c.hbAbandoned.Load()
	res.ServerHeartbeats = c.serverHeartbeats.Load()
	res.EventsReadonly = c.readonly.Load()
	res.EventsWriteable = c.writeable.Load()
	res.EventsOther = c.otherEvents.Load()
	res.UnexpectedRequests = c.unexpectedRequests.Load()
	for s := range c.grpcStatus {
		if n := c.grpcStatus[s].Load(); n > 0 {
			res.GRPCStatus[s] = n
		}
	}
	res.StreamsWaited = c.streamsWaited.Load()
	res.StreamResets = c.streamResets.Load()
	res.GoAways = c.goAways.Load()
	res.MaxOpenStreams = int(c.maxOpenStreams.Load())
	res.LatencyHist.Merge(&r.latHist)
	res.HeartbeatHist.Merge(&r.hbHist)
	res.ConnectHist.Merge(&r.connectHist)
	res.FirstReplyHist.Merge(&r.firstHist)
	return res
}

func (r *runner) countDialError(err error) {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		r.cnt.dialRefused.Add(1)
	case errors.Is(err, syscall.ECONNRESET):
		r.cnt.dialReset.Add(1)
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, syscall.ETIMEDOUT),
		errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		r.cnt.dialTimeout.Add(1)
	default:
		r.cnt.dialElse.Add(1)
	}
}

func (r *runner) sweepInterval() time.Duration {
	return min(max(r.cfg.Timeout/20, 5*time.Millisecond), 100*time.Millisecond)
}

// sweep expires requests and heartbeats that waited longer than Timeout.
func (r *runner) sweep(ctx context.Context) {
	t := time.NewTicker(r.sweepInterval())
	defer t.Stop()
	timeout := int64(r.cfg.Timeout)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cutoff := r.now() - timeout
		var reqs, hbs uint64
		for _, c := range r.consumers {
			dirty := false
			c.mu.Lock()
			if c.ring.head < c.ring.next {
				q, h := c.ring.expire(cutoff, cutoff)
				reqs += q
				hbs += h
				if q > 0 && c.cancelExpiredLocked() {
					dirty = c.markDirtyLocked()
				}
			}
			c.mu.Unlock()
			if dirty {
				c.shard.add(c)
			}
		}
		if reqs+hbs > 0 {
			r.cnt.timeouts.Add(reqs)
			r.cnt.hbTimedOut.Add(hbs)
			r.cnt.inflight.Add(-int64(reqs + hbs))
		}
	}
}

// report calls progress once per second with a Snapshot.
func (r *runner) report(ctx context.Context, progress func(Snapshot)) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	cur := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		old := &r.windows[cur]
		cur ^= 1
		r.windows[cur].Reset()
		r.win.Store(&r.windows[cur])
		c := &r.cnt
		cpu := rusage()
		progress(Snapshot{
			Elapsed: time.Since(r.t0), Phase: r.phase.Load().(string),
			ConnsOpen: int(c.connsOpen.Load()), ConnectFailures: int(c.dialFailures()),
			Sent: c.sent.Load(), OK: c.ok.Load(), Errors: c.errors.Load() + c.exceptions.Load(),
			Timeouts: c.timeouts.Load(), Lost: c.lost.Load(), Unsent: c.unsent.Load(),
			HeartbeatsSent: c.hbSent.Load(), HeartbeatsOK: c.hbAnswered.Load(),
			Resets: c.resets.Load(), ClosedByPeer: c.closedByPeer.Load(), Readonly: c.readonly.Load(),
			CPU: cpu.user + cpu.sys, P50: old.Percentile(0.5), P99: old.Percentile(0.99), Window: old,
		})
	}
}

type cpuTimes struct {
	user, sys time.Duration
	maxRSSKiB int64
}

func rusage() cpuTimes {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return cpuTimes{}
	}
	return cpuTimes{
		user:      time.Duration(ru.Utime.Nano()),
		sys:       time.Duration(ru.Stime.Nano()),
		maxRSSKiB: ru.Maxrss,
	}
}
