package keepalive

import (
	"context"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults NewWheel uses for a zero or negative tick or slot count.
const (
	DefaultTick  = 10 * time.Millisecond
	DefaultSlots = 4096 // with DefaultTick one revolution is ~41 s
)

const (
	maxShards = 64
	// maxDelay bounds Schedule's d (~73 years) so that elapsed+d cannot overflow int64 nanoseconds for any
	// clock within a century of the wheel's creation.
	maxDelay = time.Duration(1 << 61)
)

// Timer is intrusive: embed it in a long-lived struct; the zero value is ready. Init once with its callback.
//
// A Timer belongs to the first Wheel it is scheduled on; using it with another Wheel panics. It must not be
// copied after first use.
type Timer struct {
	fn     func()
	next   *Timer
	pprev  **Timer // nil when not scheduled; else the pointer that points at this timer
	expiry int64   // absolute tick at or after which the timer fires
	sh     atomic.Pointer[shard]
}

// Init sets the callback once (one allocation per owner, at creation). Call it before the Timer is shared with
// other goroutines. Init panics if f is nil or if the Timer was already initialised.
func (t *Timer) Init(f func()) {
	if f == nil {
		panic("keepalive: Timer.Init with nil callback")
	}
	if t.fn != nil {
		panic("keepalive: Timer.Init called twice")
	}
	t.fn = f
}

// Scheduled reports whether the timer is waiting to fire. A timer whose callback is running is not scheduled
// (unless the callback rescheduled it).
func (t *Timer) Scheduled() bool {
	s := t.sh.Load()
	if s == nil {
		return false
	}
	s.mu.Lock()
	ok := t.pprev != nil
	s.mu.Unlock()
	return ok
}

// shard is one lock and the slots of the timers homed on it. Timers are spread over shards round-robin at their
// first Schedule, so Schedule/Stop from many goroutines rarely meet on one mutex.
type shard struct {
	mu    sync.Mutex
	w     *Wheel
	cur   int64 // last tick expired on this shard; guarded by mu
	n     int   // timers scheduled on this shard (in slots or due); guarded by mu
	due   *Timer
	slots []*Timer
	occ   []uint64 // bit i set while slots[i] holds a timer: Run finds the next due slot without a tick
	_     [64]byte // keep neighbouring shards' mutexes off one cache line
}

// Wheel is a hashed timing wheel driven by one goroutine (Run) or by Advance in tests.
// Callbacks run on the driving goroutine, must be short and must not block; they may call Schedule/Stop
// (including rescheduling their own timer) without deadlock.
//
// Each timer stores its absolute expiry tick and sits in slot expiry mod slots, so durations longer than a
// revolution cost one comparison per revolution and never fire early.
type Wheel struct {
	tick   time.Duration
	mask   int64
	clock  Clock
	origin time.Time
	// originNanos is origin in unix nanoseconds: where the timeline of Now starts.
	originNanos int64
	shards      []shard
	rr          atomic.Uint32
	coarse      atomic.Int64 // the latest Advance, on the timeline of Now

	// Run sleeps until the next due tick. nextWake is that tick (-1 while Run is
	// computing it); a Schedule for an earlier tick signals wake.
	nextWake atomic.Int64
	wake     chan struct{}
	advances atomic.Int64 // Advance calls that moved time, for tests

	driveMu sync.Mutex
	cur     int64 // last tick expired on every shard; guarded by driveMu
}

// NewWheel returns a Wheel with the given tick (granularity; <=0 means DefaultTick) and number of slots
// (rounded up to a power of two; <=0 means DefaultSlots). clock nil means real time. Ticks are counted from
// clock.Now() at creation. The lock is sharded by GOMAXPROCS.
func NewWheel(tick time.Duration, slots int, clock Clock) *Wheel {
	return NewWheelShards(tick, slots, 0, clock)
}

// NewWheelShards is NewWheel with an explicit number of lock shards (rounded up to a power of two, at most 64;
// <=0 means 2*GOMAXPROCS). Every shard holds its own slots, so memory is about 8*slots*shards bytes.
func NewWheelShards(tick time.Duration, slots, shards int, clock Clock) *Wheel {
	if tick <= 0 {
		tick = DefaultTick
	}
	if slots <= 0 {
		slots = DefaultSlots
	}
	if shards <= 0 {
		shards = 2 * runtime.GOMAXPROCS(0)
	}
	slots = pow2(slots, 1<<30)
	shards = pow2(shards, maxShards)
	if clock == nil {
		clock = realClock{}
	}
	w := &Wheel{
		tick:   tick,
		mask:   int64(slots - 1),
		clock:  clock,
		origin: clock.Now(),
		shards: make([]shard, shards),
		wake:   make(chan struct{}, 1),
	}
	w.originNanos = w.origin.UnixNano()
	w.coarse.Store(w.originNanos)
	w.nextWake.Store(-1)
	for i := range w.shards {
		w.shards[i].w = w
		w.shards[i].slots = make([]*Timer, slots)
		w.shards[i].occ = make([]uint64, (slots+63)/64)
	}
	return w
}

func pow2(n, limit int) int {
	if n >= limit {
		return limit
	}
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len(uint(n-1))
}

// Tick returns the wheel's granularity.
func (w *Wheel) Tick() time.Duration { return w.tick }

// Revolution returns tick*slots, the span one turn of the wheel covers.
func (w *Wheel) Revolution() time.Duration { return w.tick * time.Duration(w.mask+1) }

// CoarseNow returns, on the wheel's timeline (Now), the time passed to the latest Advance (creation time
// before the first). It is one atomic load, for callers that want a timestamp for Idle.Touch without reading
// the clock; it lags the clock by up to one tick plus the driver's scheduling delay.
func (w *Wheel) CoarseNow() int64 { return w.coarse.Load() }

// Now returns the clock's time in unix nanoseconds on the wheel's timeline: the wall time at the wheel's
// creation plus the time elapsed since, as the clock measures elapsed time (the system clock: its
// monotonic reading). Deadlines stamped with it and given to ScheduleAt, and compared with it, are
// therefore not moved by a step of the wall clock: a VM's clock set forward by a few milliseconds made
// hold.timeout answers arrive that much early. With a clock whose times carry no monotonic reading (a
// ManualClock) it is the clock's own time.
func (w *Wheel) Now() int64 { return w.onTimeline(w.clock.Now()) }

// onTimeline places t on the wheel's timeline (see Now).
func (w *Wheel) onTimeline(t time.Time) int64 { return w.originNanos + int64(t.Sub(w.origin)) }

// Run drives the wheel until ctx is done, then returns; no goroutine leak. It sleeps until the next tick that
// holds a timer (at most maxIdleSleep), not tick by tick, so an idle wheel costs no CPU; a Schedule for an
// earlier tick wakes it. Each wake-up calls Advance(clock.Now()), so a late one (GC, overloaded host) fires
// everything that became due in the meantime. With a clock other than the system's (a ManualClock), whose time
// the caller moves, Run looks every tick instead. Run only one driver per Wheel.
func (w *Wheel) Run(ctx context.Context) {
	_, system := w.clock.(realClock)
	t := time.NewTimer(w.tick)
	defer t.Stop()
	for {
		w.nextWake.Store(-1) // a Schedule from here on signals wake
		now := w.clock.Now()
		w.Advance(now)
		d := w.tick
		if system {
			next, ok := w.nextDue()
			limit := floorDiv(int64(now.Add(maxIdleSleep).Sub(w.origin)), int64(w.tick))
			if !ok || next > limit {
				next = limit
			}
			w.nextWake.Store(next)
			d = w.origin.Add(time.Duration(next) * w.tick).Sub(w.clock.Now())
		}
		t.Reset(max(d, time.Microsecond))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-w.wake:
			if !t.Stop() {
				<-t.C
			}
		}
	}
}

// maxIdleSleep bounds how long Run sleeps when no timer is due sooner.
const maxIdleSleep = time.Second

// nextDue returns the first tick after the current one whose slot holds a timer on some shard (a lower bound for
// the next expiry: a timer in that slot may be a revolution or more away, and Run then just looks again).
func (w *Wheel) nextDue() (int64, bool) {
	best, found := int64(0), false
	for i := range w.shards {
		s := &w.shards[i]
		s.mu.Lock()
		if d, ok := s.nextOccupied(w.mask); ok && (!found || s.cur+d < best) {
			best, found = s.cur+d, true
		}
		s.mu.Unlock()
	}
	return best, found
}

// nextOccupied returns the distance from s.cur to the next tick whose slot holds a timer (1..slots). Called
// with s.mu held.
func (s *shard) nextOccupied(mask int64) (int64, bool) {
	n := mask + 1
	start := (s.cur + 1) & mask
	for d := int64(0); d < n; {
		i := (start + d) & mask
		word := s.occ[i>>6] >> (uint(i) & 63)
		if word != 0 {
			return d + int64(bits.TrailingZeros64(word)) + 1, true
		}
		d += 64 - int64(i&63) // the rest of this word is empty
	}
	return 0, false
}

// link puts t in the slot of its expiry tick. Called with s.mu held.
func (s *shard) link(t *Timer, mask int64) {
	i := t.expiry & mask
	push(&s.slots[i], t)
	s.occ[i>>6] |= 1 << (uint(i) & 63)
}

// unlinkSlot takes t out of its list and clears its slot's bit when the slot is left empty. Called with s.mu
// held.
func (s *shard) unlinkSlot(t *Timer, mask int64) {
	unlink(t)
	if i := t.expiry & mask; s.slots[i] == nil {
		s.occ[i>>6] &^= 1 << (uint(i) & 63)
	}
}

// Schedule (re)schedules t to fire d from now (clock.Now()); it replaces any earlier schedule, also one whose
// tick is being expired but whose callback has not started. d <= 0 fires at the next tick. The callback never
// runs before now+d and, with a timely driver, at most one tick after. 0 allocations.
func (w *Wheel) Schedule(t *Timer, d time.Duration) {
	d = min(max(d, 0), maxDelay)
	w.schedule(t, w.clock.Now().Sub(w.origin)+d)
}

// ScheduleAt is Schedule with an absolute deadline on the wheel's timeline (Now, CoarseNow), for callers that
// already hold the current time (an idle callback that just read it, a hold queue that stamped the arrival)
// and so save a clock read. A deadline in the past fires at the next tick.
func (w *Wheel) ScheduleAt(t *Timer, deadline time.Time) {
	w.schedule(t, min(time.Duration(deadline.UnixNano()-w.originNanos), maxDelay*2))
}

// schedule links t at the tick that reaches el (time since origin), never at or before a tick already expired.
func (w *Wheel) schedule(t *Timer, el time.Duration) {
	if t.fn == nil {
		panic("keepalive: Schedule of a Timer without Init")
	}
	s := w.home(t)
	exp := ceilDiv(int64(el), int64(w.tick))
	s.mu.Lock()
	if exp <= s.cur {
		exp = s.cur + 1
	}
	if t.pprev != nil {
		s.unlinkSlot(t, w.mask)
	} else {
		s.n++
	}
	t.expiry = exp
	s.link(t, w.mask)
	s.mu.Unlock()
	if nw := w.nextWake.Load(); nw < 0 || exp < nw {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// Stop cancels t. It returns true if t was scheduled; then its callback will not run for that schedule. False
// means it was not scheduled: never scheduled, already stopped, or already fired or firing (the callback may
// be running right now on the driving goroutine).
func (w *Wheel) Stop(t *Timer) bool {
	s := t.sh.Load()
	if s == nil {
		return false
	}
	if s.w != w {
		panic("keepalive: Timer used with two Wheels")
	}
	s.mu.Lock()
	ok := t.pprev != nil
	if ok {
		s.unlinkSlot(t, w.mask)
		s.n--
	}
	s.mu.Unlock()
	return ok
}

// Len returns the number of scheduled timers.
func (w *Wheel) Len() int {
	n := 0
	for i := range w.shards {
		s := &w.shards[i]
		s.mu.Lock()
		n += s.n
		s.mu.Unlock()
	}
	return n
}

// Advance fires everything due at or before now (used by Run and tests). Timers fire on tick boundaries: a
// deadline is due once now reaches it rounded up to the next multiple of tick (counted from creation). Callbacks run on the calling goroutine,
// one at a time, with no wheel lock held. Advance calls are serialised; a callback must not call Advance.
// Time going backwards is ignored. Timers fire in tick order, except that a jump of a full revolution or more
// fires everything due in one sweep, in no particular order.
func (w *Wheel) Advance(now time.Time) {
	w.driveMu.Lock()
	defer w.driveMu.Unlock()
	w.coarse.Store(w.onTimeline(now))
	target := floorDiv(int64(now.Sub(w.origin)), int64(w.tick))
	if target <= w.cur {
		return
	}
	w.advances.Add(1)
	if target-w.cur > w.mask {
		for i := range w.shards {
			w.sweep(&w.shards[i], target)
		}
		w.cur = target
		return
	}
	for k := w.cur + 1; k <= target; k++ {
		for i := range w.shards {
			w.expire(&w.shards[i], k)
		}
		w.cur = k
	}
}

// expire moves the timers of tick k to the due list and fires them.
func (w *Wheel) expire(s *shard, k int64) {
	s.mu.Lock()
	s.cur = max(s.cur, k)
	for t := s.slots[k&w.mask]; t != nil; {
		next := t.next
		if t.expiry <= k {
			s.unlinkSlot(t, w.mask)
			push(&s.due, t)
		}
		t = next
	}
	s.fireDue()
}

// sweep moves every timer due at or before target to the due list and fires them.
func (w *Wheel) sweep(s *shard, target int64) {
	s.mu.Lock()
	s.cur = max(s.cur, target)
	for i := range s.slots {
		for t := s.slots[i]; t != nil; {
			next := t.next
			if t.expiry <= target {
				s.unlinkSlot(t, w.mask)
				push(&s.due, t)
			}
			t = next
		}
	}
	s.fireDue()
}

// fireDue pops due timers one at a time and runs each callback with the lock released, so a callback (or any
// other goroutine) may Schedule or Stop any timer, and a Stop that returns true always wins over the firing.
// Called with s.mu held; returns with it released.
func (s *shard) fireDue() {
	for s.due != nil {
		t := s.due
		unlink(t)
		s.n--
		f := t.fn
		s.mu.Unlock()
		f()
		s.mu.Lock()
	}
	s.mu.Unlock()
}

// home returns t's shard, choosing one round-robin on first use.
func (w *Wheel) home(t *Timer) *shard {
	s := t.sh.Load()
	if s == nil {
		c := &w.shards[int(w.rr.Add(1))&(len(w.shards)-1)]
		if t.sh.CompareAndSwap(nil, c) {
			return c
		}
		s = t.sh.Load()
	}
	if s.w != w {
		panic("keepalive: Timer used with two Wheels")
	}
	return s
}

func push(head **Timer, t *Timer) {
	t.next = *head
	if t.next != nil {
		t.next.pprev = &t.next
	}
	t.pprev = head
	*head = t
}

func unlink(t *Timer) {
	*t.pprev = t.next
	if t.next != nil {
		t.next.pprev = t.pprev
	}
	t.next = nil
	t.pprev = nil
}

// ceilDiv and floorDiv divide by a positive d, rounding towards +inf and -inf.
func ceilDiv(x, d int64) int64 {
	q := x / d
	if x%d != 0 && x > 0 {
		q++
	}
	return q
}

func floorDiv(x, d int64) int64 {
	q := x / d
	if x%d != 0 && x < 0 {
		q--
	}
	return q
}
