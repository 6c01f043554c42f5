package keepalive

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

var start = time.Unix(1_700_000_000, 0)

// probe is a timer owner that records when (by the test clock) its callback ran.
type probe struct {
	timer    Timer
	clk      Clock
	deadline time.Time // earliest allowed firing
	fired    atomic.Int32
	at       time.Time // written by the driving goroutine only
}

func newProbe(clk Clock) *probe {
	p := &probe{clk: clk}
	p.timer.Init(func() {
		p.fired.Add(1)
		p.at = p.clk.Now()
	})
	return p
}

// TestFireWindow schedules timers at random sub-tick moments for random durations (up to 12 revolutions) while
// the driver advances in quarter ticks, and checks every timer fired exactly once, never before its deadline and
// at most one tick after it.
func TestFireWindow(t *testing.T) {
	const tick = 10 * time.Millisecond
	const step = tick / 4
	clk := NewManualClock(start)
	w := NewWheelShards(tick, 16, 4, clk) // revolution 160 ms
	rng := rand.New(rand.NewPCG(1, 2))
	special := []time.Duration{0, 1, tick - 1, tick, tick + 1, w.Revolution() - 1, w.Revolution(), w.Revolution() + 1}

	probes := make([]*probe, 600)
	now := start
	for i := 0; ; i++ {
		if i < len(probes) {
			clk.Set(now.Add(time.Duration(rng.Int64N(int64(step)))))
			var d time.Duration
			if i < len(special) {
				d = special[i]
			} else {
				d = time.Duration(rng.Int64N(int64(2 * time.Second)))
			}
			p := newProbe(clk)
			p.deadline = clk.Now().Add(d)
			w.Schedule(&p.timer, d)
			probes[i] = p
		}
		now = now.Add(step)
		clk.Set(now)
		w.Advance(now)
		if i >= len(probes) && w.Len() == 0 {
			break
		}
		if now.Sub(start) > 5*time.Second {
			t.Fatalf("timers left after 5 s: %d", w.Len())
		}
	}
	for i, p := range probes {
		if n := p.fired.Load(); n != 1 {
			t.Fatalf("probe %d fired %d times", i, n)
		}
		if late := p.at.Sub(p.deadline); late < 0 || late > tick {
			t.Errorf("probe %d: fired %v after its deadline, want [0, %v]", i, late, tick)
		}
	}
}

// TestLongDurations checks timers spanning several revolutions, with both tick-by-tick driving and one jump
// across several revolutions.
func TestLongDurations(t *testing.T) {
	const tick = time.Millisecond
	clk := NewManualClock(start)
	w := NewWheelShards(tick, 8, 2, clk) // revolution 8 ms
	var probes []*probe
	for d := time.Duration(0); d <= 50*time.Millisecond; d += tick / 2 {
		p := newProbe(clk)
		p.deadline = start.Add(d)
		w.Schedule(&p.timer, d)
		probes = append(probes, p)
	}
	// One jump over three revolutions and a bit: everything due fires, nothing else does.
	jump := start.Add(3*w.Revolution() + tick/2)
	clk.Set(jump)
	w.Advance(jump)
	for _, p := range probes {
		// Timers fire on tick boundaries: a deadline is due once it is rounded up to the tick.
		due := start.Add((p.deadline.Sub(start) + tick - 1) / tick * tick)
		want := int32(0)
		if !due.After(jump) {
			want = 1
		}
		if got := p.fired.Load(); got != want {
			t.Fatalf("deadline %v after start, advanced to %v: fired %d, want %d",
				p.deadline.Sub(start), jump.Sub(start), got, want)
		}
	}
	// Then tick by tick.
	for now := jump; w.Len() > 0; {
		now = now.Add(tick)
		clk.Set(now)
		w.Advance(now)
		if now.Sub(start) > time.Second {
			t.Fatal("timers never fired")
		}
	}
	for _, p := range probes {
		if p.fired.Load() != 1 {
			t.Fatalf("deadline %v: fired %d", p.deadline.Sub(start), p.fired.Load())
		}
		if p.at.After(jump) {
			if late := p.at.Sub(p.deadline); late < 0 || late > tick {
				t.Errorf("deadline %v: fired %v late", p.deadline.Sub(start), late)
			}
		}
	}
}

func drive(w *Wheel, clk *ManualClock, until time.Time, step time.Duration) {
	for now := clk.Now(); now.Before(until); {
		now = now.Add(step)
		clk.Set(now)
		w.Advance(now)
	}
}

func TestRescheduleSelfFromCallback(t *testing.T) {
	const tick = 10 * time.Millisecond
	clk := NewManualClock(start)
	w := NewWheel(tick, 32, clk)
	var tm Timer
	var at []time.Duration
	tm.Init(func() {
		at = append(at, clk.Now().Sub(start))
		if len(at) < 10 {
			w.Schedule(&tm, 50*time.Millisecond)
		}
	})
	w.Schedule(&tm, 50*time.Millisecond)
	drive(w, clk, start.Add(time.Second), tick)
	if len(at) != 10 {
		t.Fatalf("fired %d times, want 10", len(at))
	}
	for i, d := range at {
		if want := time.Duration(i+1) * 50 * time.Millisecond; d != want {
			t.Errorf("firing %d at %v, want %v", i, d, want)
		}
	}
	if w.Len() != 0 || tm.Scheduled() {
		t.Fatalf("Len %d Scheduled %v after the last firing", w.Len(), tm.Scheduled())
	}
}

// TestStopFromCallback: two timers due on the same tick stop each other; exactly one callback runs, on one shard
// (the other is then in the due list) and on two shards.
func TestStopFromCallback(t *testing.T) {
	for _, shards := range []int{1, 2} {
		clk := NewManualClock(start)
		w := NewWheelShards(time.Millisecond, 16, shards, clk)
		var a, b Timer
		var ran, stopped int
		a.Init(func() {
			ran++
			if w.Stop(&b) {
				stopped++
			}
		})
		b.Init(func() {
			ran++
			if w.Stop(&a) {
				stopped++
			}
		})
		w.Schedule(&a, 5*time.Millisecond)
		w.Schedule(&b, 5*time.Millisecond)
		drive(w, clk, start.Add(50*time.Millisecond), time.Millisecond)
		if ran != 1 || stopped != 1 || w.Len() != 0 {
			t.Errorf("shards=%d: ran %d, stopped %d, Len %d; want 1, 1, 0", shards, ran, stopped, w.Len())
		}
	}
}

// TestRescheduleDueFromCallback: a callback moves a timer that is already due on the same tick; it must fire at
// its new time only.
func TestRescheduleDueFromCallback(t *testing.T) {
	clk := NewManualClock(start)
	w := NewWheelShards(time.Millisecond, 16, 1, clk)
	var a, b Timer
	var aAt, bAt []time.Duration
	a.Init(func() {
		aAt = append(aAt, clk.Now().Sub(start))
		w.Schedule(&b, 100*time.Millisecond)
	})
	b.Init(func() {
		bAt = append(bAt, clk.Now().Sub(start))
		w.Schedule(&a, 100*time.Millisecond)
	})
	w.Schedule(&a, 5*time.Millisecond)
	w.Schedule(&b, 5*time.Millisecond)
	drive(w, clk, start.Add(150*time.Millisecond), time.Millisecond)
	// Whichever ran first on tick 5 moved the other to 105 ms.
	first, second := aAt, bAt
	if len(first) == 0 || first[0] != 5*time.Millisecond {
		first, second = bAt, aAt
	}
	if len(first) != 1 || first[0] != 5*time.Millisecond || len(second) != 1 || second[0] != 105*time.Millisecond {
		t.Fatalf("a fired at %v, b at %v; want one at [5ms], the other at [105ms]", aAt, bAt)
	}
	if w.Len() != 1 { // the second one's callback rescheduled the first to 205 ms
		t.Fatalf("Len %d, want 1", w.Len())
	}
}

func TestScheduleReplaces(t *testing.T) {
	clk := NewManualClock(start)
	w := NewWheel(time.Millisecond, 64, clk)
	later := newProbe(clk)
	w.Schedule(&later.timer, 100*time.Millisecond)
	w.Schedule(&later.timer, 300*time.Millisecond)
	earlier := newProbe(clk)
	w.Schedule(&earlier.timer, 300*time.Millisecond)
	w.Schedule(&earlier.timer, 50*time.Millisecond)
	if w.Len() != 2 {
		t.Fatalf("Len %d after rescheduling two timers, want 2", w.Len())
	}
	drive(w, clk, start.Add(time.Second), time.Millisecond)
	if later.fired.Load() != 1 || later.at.Sub(start) != 300*time.Millisecond {
		t.Errorf("later: fired %d at %v, want once at 300ms", later.fired.Load(), later.at.Sub(start))
	}
	if earlier.fired.Load() != 1 || earlier.at.Sub(start) != 50*time.Millisecond {
		t.Errorf("earlier: fired %d at %v, want once at 50ms", earlier.fired.Load(), earlier.at.Sub(start))
	}
}

func TestStopLenScheduled(t *testing.T) {
	clk := NewManualClock(start)
	w := NewWheel(time.Millisecond, 64, clk)
	p, q := newProbe(clk), newProbe(clk)
	if w.Stop(&p.timer) || p.timer.Scheduled() {
		t.Fatal("a never-scheduled timer reports scheduled")
	}
	w.Schedule(&p.timer, 10*time.Millisecond)
	w.Schedule(&q.timer, 10*time.Millisecond)
	if !p.timer.Scheduled() || w.Len() != 2 {
		t.Fatalf("Scheduled %v Len %d, want true 2", p.timer.Scheduled(), w.Len())
	}
	if !w.Stop(&p.timer) {
		t.Fatal("Stop of a scheduled timer returned false")
	}
	if w.Stop(&p.timer) {
		t.Fatal("second Stop returned true")
	}
	if p.timer.Scheduled() || w.Len() != 1 {
		t.Fatalf("after Stop: Scheduled %v Len %d, want false 1", p.timer.Scheduled(), w.Len())
	}
	drive(w, clk, start.Add(50*time.Millisecond), time.Millisecond)
	if p.fired.Load() != 0 || q.fired.Load() != 1 {
		t.Fatalf("stopped fired %d, other fired %d; want 0, 1", p.fired.Load(), q.fired.Load())
	}
	if w.Stop(&q.timer) {
		t.Fatal("Stop of a fired timer returned true")
	}
}

func TestAdvanceBackwardsAndCoarseNow(t *testing.T) {
	clk := NewManualClock(start)
	w := NewWheel(time.Millisecond, 64, clk)
	if w.CoarseNow() != start.UnixNano() {
		t.Fatalf("CoarseNow before any Advance = %d, want creation time %d", w.CoarseNow(), start.UnixNano())
	}
	p := newProbe(clk)
	w.Schedule(&p.timer, 5*time.Millisecond)
	w.Advance(start.Add(4 * time.Millisecond))
	w.Advance(start.Add(-time.Hour))
	if p.fired.Load() != 0 {
		t.Fatal("fired early")
	}
	at := start.Add(5 * time.Millisecond)
	w.Advance(at)
	if p.fired.Load() != 1 {
		t.Fatal("did not fire at its deadline")
	}
	if w.CoarseNow() != at.UnixNano() {
		t.Fatalf("CoarseNow = %d, want %d", w.CoarseNow(), at.UnixNano())
	}
}

func TestScheduleAt(t *testing.T) {
	clk := NewManualClock(start)
	w := NewWheel(time.Millisecond, 64, clk)
	p, past := newProbe(clk), newProbe(clk)
	clk.Add(3 * time.Millisecond)
	w.ScheduleAt(&p.timer, start.Add(100*time.Millisecond)) // measured from the deadline, not from now
	w.ScheduleAt(&past.timer, start.Add(-time.Hour))
	drive(w, clk, start.Add(200*time.Millisecond), time.Millisecond)
	if p.fired.Load() != 1 || p.at.Sub(start) != 100*time.Millisecond {
		t.Errorf("fired %d at %v, want once at 100ms", p.fired.Load(), p.at.Sub(start))
	}
	if past.fired.Load() != 1 || past.at.Sub(start) != 4*time.Millisecond {
		t.Errorf("past deadline: fired %d at %v, want once at the next tick (4ms)", past.fired.Load(), past.at.Sub(start))
	}
}

func TestHugeDuration(t *testing.T) {
	clk := NewManualClock(start)
	w := NewWheel(time.Millisecond, 64, clk)
	p := newProbe(clk)
	w.Schedule(&p.timer, time.Duration(1<<63-1))
	q := newProbe(clk)
	w.ScheduleAt(&q.timer, start.Add(time.Duration(1<<63-1)))
	w.Advance(start.Add(24 * 365 * time.Hour))
	if p.fired.Load()+q.fired.Load() != 0 || w.Len() != 2 {
		t.Fatalf("fired %d Len %d, want 0 1", p.fired.Load(), w.Len())
	}
}

func TestDefaults(t *testing.T) {
	w := NewWheel(0, 0, nil)
	if w.Tick() != DefaultTick || w.Revolution() != DefaultTick*DefaultSlots {
		t.Fatalf("Tick %v Revolution %v", w.Tick(), w.Revolution())
	}
	w = NewWheelShards(time.Millisecond, 100, 3, nil)
	if w.Revolution() != 128*time.Millisecond || len(w.shards) != 4 {
		t.Fatalf("slots/shards not rounded to powers of two: %v, %d", w.Revolution(), len(w.shards))
	}
}

func TestMisusePanics(t *testing.T) {
	mustPanic := func(name string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s did not panic", name)
			}
		}()
		f()
	}
	w1, w2 := NewWheel(0, 8, nil), NewWheel(0, 8, nil)
	var tm Timer
	mustPanic("Schedule before Init", func() { w1.Schedule(&tm, time.Second) })
	mustPanic("Init(nil)", func() { tm.Init(nil) })
	tm.Init(func() {})
	mustPanic("second Init", func() { tm.Init(func() {}) })
	w1.Schedule(&tm, time.Second)
	mustPanic("Schedule on a second wheel", func() { w2.Schedule(&tm, time.Second) })
	mustPanic("Stop on a second wheel", func() { w2.Stop(&tm) })
}

// driver advances clk by one tick at a time until stop is closed; it is what Run does, on a manual clock.
func driver(w *Wheel, clk *ManualClock, tick time.Duration, stop <-chan struct{}, wg *sync.WaitGroup) {
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			w.Advance(clk.Add(tick))
		}
	})
}

// TestConcurrentSchedule100k: 8 goroutines schedule 100,000 timers while the driver runs; every timer fires
// exactly once and never early.
func TestConcurrentSchedule100k(t *testing.T) {
	const (
		total   = 100_000
		workers = 8
		tick    = time.Millisecond
	)
	clk := NewManualClock(start)
	w := NewWheel(tick, 256, clk)
	probes := make([]*probe, total)
	for i := range probes {
		probes[i] = newProbe(clk)
	}
	stop := make(chan struct{})
	var drv, wk sync.WaitGroup
	driver(w, clk, tick, stop, &drv)
	for g := range workers {
		wk.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for i := g; i < total; i += workers {
				p := probes[i]
				d := time.Duration(rng.Int64N(int64(600 * time.Millisecond)))
				p.deadline = clk.Now().Add(d) // the clock only moves forward: a lower bound of Schedule's now
				w.Schedule(&p.timer, d)
			}
		})
	}
	wk.Wait()
	for deadline := time.Now().Add(60 * time.Second); w.Len() > 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d timers still scheduled after 60 s", w.Len())
		}
	}
	close(stop)
	drv.Wait()
	for i, p := range probes {
		if n := p.fired.Load(); n != 1 {
			t.Fatalf("timer %d fired %d times", i, n)
		}
		if p.at.Before(p.deadline) {
			t.Fatalf("timer %d fired %v early", i, p.deadline.Sub(p.at))
		}
	}
}

// TestStopRacesFiring: Stop from other goroutines races the driver; for every timer exactly one of "callback ran"
// and "Stop returned true" happens.
func TestStopRacesFiring(t *testing.T) {
	const (
		perWorker = 2000
		workers   = 8
		tick      = time.Millisecond
	)
	clk := NewManualClock(start)
	w := NewWheel(tick, 64, clk)
	stop := make(chan struct{})
	var drv, wk sync.WaitGroup
	driver(w, clk, tick, stop, &drv)
	probes := make([][]*probe, workers)
	stopped := make([][]bool, workers)
	for g := range workers {
		probes[g] = make([]*probe, perWorker)
		stopped[g] = make([]bool, perWorker)
		wk.Go(func() {
			// Batches of timers due on the next tick, then Stop in order: the driver fires the head of a batch
			// while this goroutine is still stopping its tail.
			const batch = 100
			for lo := 0; lo < perWorker; lo += batch {
				for i := lo; i < lo+batch; i++ {
					p := newProbe(clk)
					probes[g][i] = p
					w.Schedule(&p.timer, 0)
				}
				for i := lo; i < lo+batch; i++ {
					stopped[g][i] = w.Stop(&probes[g][i].timer)
				}
			}
		})
	}
	wk.Wait()
	for deadline := time.Now().Add(30 * time.Second); w.Len() > 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d timers still scheduled", w.Len())
		}
	}
	close(stop)
	drv.Wait()
	var fired, stops int
	for g := range workers {
		for i, p := range probes[g] {
			f := p.fired.Load()
			if s := stopped[g][i]; (f == 1) == s || f > 1 {
				t.Fatalf("timer %d/%d: fired %d times, Stop returned %v", g, i, f, s)
			}
			fired += int(p.fired.Load())
			if stopped[g][i] {
				stops++
			}
		}
	}
	t.Logf("fired %d, stopped %d", fired, stops)
	if fired == 0 || stops == 0 {
		t.Logf("the race was not exercised (fired %d, stopped %d)", fired, stops)
	}
}

// TestRunStopsOnCancel runs the real driver on synctest's virtual clock: the timer fires on time, and Run returns
// once ctx is cancelled (synctest fails the test if a goroutine of the bubble is left blocked).
func TestRunStopsOnCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const tick = 10 * time.Millisecond
		w := NewWheel(tick, 64, nil) // real clock: virtual inside the bubble
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			w.Run(ctx)
			close(done)
		}()
		var tm Timer
		var at time.Time
		begin := time.Now()
		tm.Init(func() { at = time.Now() })
		w.Schedule(&tm, time.Second) // 1.56 revolutions
		time.Sleep(time.Second + tick)
		synctest.Wait()
		if at.IsZero() {
			t.Fatal("timer did not fire under Run")
		}
		if late := at.Sub(begin) - time.Second; late < 0 || late > tick {
			t.Fatalf("fired %v after its deadline", late)
		}
		cancel()
		select {
		case <-done:
		case <-time.After(time.Second):
			t.Fatal("Run did not return after cancel")
		}
	})
}

func TestAllocs(t *testing.T) {
	clk := NewManualClock(start)
	w := NewWheel(time.Millisecond, 64, clk)
	var tm Timer
	n := 0
	tm.Init(func() { n++ })
	if a := testing.AllocsPerRun(1000, func() {
		w.Schedule(&tm, 30*time.Millisecond)
		w.Stop(&tm)
	}); a != 0 {
		t.Errorf("Schedule+Stop: %v allocs/op", a)
	}
	if a := testing.AllocsPerRun(1000, func() {
		w.Schedule(&tm, 0)
		w.Advance(clk.Add(time.Millisecond))
	}); a != 0 {
		t.Errorf("Schedule+fire: %v allocs/op", a)
	}
	var self Timer
	self.Init(func() { w.Schedule(&self, time.Millisecond) })
	w.Schedule(&self, 0)
	if a := testing.AllocsPerRun(1000, func() { w.Advance(clk.Add(time.Millisecond)) }); a != 0 {
		t.Errorf("fire with self-reschedule: %v allocs/op", a)
	}
	if n < 1000 {
		t.Fatalf("callback ran %d times", n)
	}
	rw := NewWheel(time.Millisecond, 64, nil) // real clock
	var other Timer
	other.Init(func() {})
	if a := testing.AllocsPerRun(1000, func() {
		rw.Schedule(&other, time.Second)
		rw.Stop(&other)
	}); a != 0 {
		t.Errorf("Schedule+Stop with the real clock: %v allocs/op", a)
	}
}

// TestRunSleepsUntilDue: with only a far timer scheduled, Run does not tick every tick (an idle sidecar must
// burn no CPU); a timer scheduled sooner while it sleeps still fires on time.
func TestRunSleepsUntilDue(t *testing.T) {
	w := NewWheel(10*time.Millisecond, 4096, nil)
	var far, near Timer
	far.Init(func() {})
	fired := make(chan time.Time, 1)
	near.Init(func() { fired <- time.Now() })
	w.Schedule(&far, 30*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	time.Sleep(300 * time.Millisecond)
	if n := w.advances.Load(); n > 3 {
		t.Fatalf("%d wake-ups in 300 ms with nothing due (ticking every 10 ms would be 30)", n)
	}
	start := time.Now()
	w.Schedule(&near, 50*time.Millisecond)
	select {
	case at := <-fired:
		if late := at.Sub(start); late < 50*time.Millisecond || late > 2*time.Second {
			t.Fatalf("a timer due in 50 ms fired after %v", late)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a timer scheduled while Run slept never fired")
	}
}

// TestNextOccupied: the occupancy bitmap finds the next slot with a timer across words and wrap-around, and
// forgets slots emptied by Stop and by firing.
func TestNextOccupied(t *testing.T) {
	clk := NewManualClock(time.Unix(0, 0))
	w := NewWheelShards(time.Millisecond, 256, 1, clk)
	if _, ok := w.nextDue(); ok {
		t.Fatal("empty wheel has a due tick")
	}
	var a, b Timer
	a.Init(func() {})
	b.Init(func() {})
	w.Schedule(&a, 200*time.Millisecond) // tick 200
	w.Schedule(&b, 70*time.Millisecond)  // tick 70
	if n, ok := w.nextDue(); !ok || n != 70 {
		t.Fatalf("next due %d %v, want 70", n, ok)
	}
	w.Stop(&b)
	if n, ok := w.nextDue(); !ok || n != 200 {
		t.Fatalf("after Stop: next due %d %v, want 200", n, ok)
	}
	w.Advance(clk.Add(210 * time.Millisecond))
	if _, ok := w.nextDue(); ok {
		t.Fatal("a fired timer's slot is still marked")
	}
	w.Schedule(&a, 100*time.Millisecond) // tick 310: slot 54 after wrapping past 255
	if n, ok := w.nextDue(); !ok || n != 310 {
		t.Fatalf("across the wrap: next due %d %v, want 310", n, ok)
	}
}

// TestNowTimeline: Now, CoarseNow and ScheduleAt share one timeline, the creation's wall time plus
// elapsed time as the clock measures it. With the system clock elapsed time is the monotonic reading,
// so a step of the wall clock moves none of them; here: a deadline stamped with Now fires after its
// duration of the real clock, and Now runs with time.Since of the creation.
func TestNowTimeline(t *testing.T) {
	clk := NewManualClock(start)
	w := NewWheel(time.Millisecond, 64, clk)
	if w.Now() != start.UnixNano() {
		t.Fatalf("Now = %d, want the clock's %d", w.Now(), start.UnixNano())
	}
	p := newProbe(clk)
	w.ScheduleAt(&p.timer, time.Unix(0, w.Now()+int64(3*time.Millisecond)))
	clk.Set(start.Add(3 * time.Millisecond))
	w.Advance(clk.Now())
	if p.fired.Load() != 1 || w.CoarseNow() != w.Now() {
		t.Fatalf("fired %d, CoarseNow %d, Now %d", p.fired.Load(), w.CoarseNow(), w.Now())
	}

	real := NewWheel(time.Millisecond, 64, nil)
	created := time.Now()
	first := real.Now()
	time.Sleep(2 * time.Millisecond)
	if got, since := time.Duration(real.Now()-first), time.Since(created); got < 2*time.Millisecond || got > since+time.Millisecond {
		t.Fatalf("Now moved %v in %v of monotonic time", got, since)
	}
}
