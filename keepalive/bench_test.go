package keepalive

import (
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"
)

// Schedule+Stop on the real clock (each Schedule reads time.Now), compared with the obvious alternative: one
// runtime timer per connection (time.AfterFunc, Reset, Stop).

func BenchmarkScheduleStop(b *testing.B) {
	b.Run("serial", func(b *testing.B) {
		w := NewWheel(0, 0, nil)
		timers := newTimers(1024)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			t := &timers[i&1023]
			w.Schedule(t, 180*time.Second)
			w.Stop(t)
		}
	})
	b.Run("serial/fixed-clock", func(b *testing.B) { // the wheel alone, without the clock read
		w := NewWheel(0, 0, fixedClock{start})
		timers := newTimers(1024)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			t := &timers[i&1023]
			w.Schedule(t, 180*time.Second)
			w.Stop(t)
		}
	})
	for _, shards := range []int{1, 0, 64} {
		name := fmt.Sprintf("parallel/shards=%d", shards)
		if shards == 0 {
			name = "parallel/shards=default"
		}
		b.Run(name, func(b *testing.B) {
			w := NewWheelShards(0, 0, shards, nil)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				timers := newTimers(1024)
				for i := 0; pb.Next(); i++ {
					t := &timers[i&1023]
					w.Schedule(t, 180*time.Second)
					w.Stop(t)
				}
			})
		})
	}
}

// BenchmarkReschedule moves already-scheduled timers (what an eager idle timer would do on every read).
func BenchmarkReschedule(b *testing.B) {
	w := NewWheel(0, 0, nil)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		timers := newTimers(1024)
		for i := 0; pb.Next(); i++ {
			w.Schedule(&timers[i&1023], time.Duration(170+i%10)*time.Second)
		}
		for i := range timers {
			w.Stop(&timers[i])
		}
	})
}

func BenchmarkTimeTimerResetStop(b *testing.B) {
	b.Run("serial", func(b *testing.B) {
		timers := newRuntimeTimers(1024)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			t := timers[i&1023]
			t.Reset(180 * time.Second)
			t.Stop()
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			timers := newRuntimeTimers(1024)
			for i := 0; pb.Next(); i++ {
				t := timers[i&1023]
				t.Reset(180 * time.Second)
				t.Stop()
			}
		})
	})
}

// BenchmarkIdleTouch is the per-read cost of the lazy idle check (one atomic store per connection).
func BenchmarkIdleTouch(b *testing.B) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var i Idle
		now := time.Now().UnixNano()
		for pb.Next() {
			now++
			i.Touch(now)
		}
	})
}

// BenchmarkAdvance100k: 100,000 idle connections with a 180 s timeout.
//   - tick: one Advance per op in steady state; every timer reschedules itself when it fires, so a tick fires
//     about 100k/18000 = 5.6 callbacks and scans the rest of its slot.
//   - fire-all: 100,000 timers due on the same tick, fired by one Advance (reported per timer).
func BenchmarkAdvance100k(b *testing.B) {
	const (
		n       = 100_000
		tick    = 10 * time.Millisecond
		timeout = 180 * time.Second
	)
	b.Run("tick", func(b *testing.B) {
		clk := NewManualClock(start)
		w := NewWheel(tick, DefaultSlots, clk)
		timers := make([]Timer, n)
		var fired atomic.Int64
		rng := rand.New(rand.NewPCG(1, 1))
		for i := range timers {
			t := &timers[i]
			t.Init(func() {
				fired.Add(1)
				w.Schedule(t, timeout)
			})
			w.Schedule(t, time.Duration(rng.Int64N(int64(timeout))))
		}
		b.ReportAllocs()
		for b.Loop() {
			w.Advance(clk.Add(tick))
		}
		b.ReportMetric(float64(fired.Load())/float64(b.N), "fired/op")
		if w.Len() != n {
			b.Fatalf("Len %d, want %d", w.Len(), n)
		}
	})
	b.Run("fire-all", func(b *testing.B) {
		clk := NewManualClock(start)
		w := NewWheel(tick, DefaultSlots, clk)
		timers := newTimers(n)
		b.ReportAllocs()
		for b.Loop() {
			b.StopTimer()
			for i := range timers {
				w.Schedule(&timers[i], tick)
			}
			b.StartTimer()
			w.Advance(clk.Add(tick))
		}
		if w.Len() != 0 {
			b.Fatalf("Len %d after firing all", w.Len())
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/timer")
	})
}

func BenchmarkJitter(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	b.ReportAllocs()
	for b.Loop() {
		_ = Jitter(30*time.Second, 0.2, rng)
	}
}

func BenchmarkBackoffNext(b *testing.B) {
	bo := Backoff{Rand: rand.New(rand.NewPCG(1, 2))}
	b.ReportAllocs()
	for b.Loop() {
		_ = bo.Next()
	}
}

type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time { return c.t }

func newTimers(n int) []Timer {
	timers := make([]Timer, n)
	for i := range timers {
		timers[i].Init(func() {})
	}
	return timers
}

func newRuntimeTimers(n int) []*time.Timer {
	timers := make([]*time.Timer, n)
	for i := range timers {
		timers[i] = time.AfterFunc(time.Hour, func() {})
		timers[i].Stop()
	}
	return timers
}
