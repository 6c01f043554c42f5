package keepalive

import (
	"testing"
	"time"
)

func TestIdleRemaining(t *testing.T) {
	var i Idle
	base := start.UnixNano()
	i.Touch(base)
	if i.Last() != base {
		t.Fatalf("Last %d, want %d", i.Last(), base)
	}
	if got := i.Remaining(base+int64(time.Second), 3*time.Second); got != 2*time.Second {
		t.Fatalf("Remaining = %v, want 2s", got)
	}
	if got := i.Remaining(base+int64(3*time.Second), 3*time.Second); got > 0 {
		t.Fatalf("Remaining at exactly the timeout = %v, want <= 0", got)
	}
	if got := i.Since(base + int64(5*time.Second)); got != 5*time.Second {
		t.Fatalf("Since = %v, want 5s", got)
	}
	var zero Idle
	if zero.Remaining(base, time.Hour) > 0 {
		t.Fatal("an untouched Idle must read as idle")
	}
}

// idleConn is how the proxy is expected to use Idle with a Wheel: reads Touch, one lazy timer per connection.
type idleConn struct {
	idle     Idle
	timer    Timer
	checks   int
	closedAt time.Time
}

func TestIdleLazyClose(t *testing.T) {
	const (
		tick    = 10 * time.Millisecond
		timeout = time.Second
	)
	clk := NewManualClock(start)
	w := NewWheel(tick, 64, clk)
	c := &idleConn{}
	c.timer.Init(func() {
		c.checks++
		now := clk.Now()
		if r := c.idle.Remaining(now.UnixNano(), timeout); r > 0 {
			w.ScheduleAt(&c.timer, now.Add(r))
			return
		}
		c.closedAt = now
	})
	c.idle.Touch(start.UnixNano())
	w.Schedule(&c.timer, timeout)

	reads := map[time.Duration]bool{300 * time.Millisecond: true, 900 * time.Millisecond: true, 1500 * time.Millisecond: true}
	for now := start; c.closedAt.IsZero(); {
		now = now.Add(tick)
		clk.Set(now)
		if reads[now.Sub(start)] {
			c.idle.Touch(now.UnixNano())
		}
		w.Advance(now)
		if now.Sub(start) > 10*time.Second {
			t.Fatal("never closed")
		}
	}
	// Last read at 1.5 s: idle from 2.5 s. Checks at 1 s (0.9 s left), 1.9 s (0.6 s left), 2.5 s (close).
	if got := c.closedAt.Sub(start); got < 2500*time.Millisecond || got > 2500*time.Millisecond+tick {
		t.Fatalf("closed at %v, want within a tick after 2.5s", got)
	}
	if c.checks != 3 {
		t.Fatalf("%d timer firings, want 3 (three reads cost no wheel operation)", c.checks)
	}
	if a := testing.AllocsPerRun(1000, func() {
		c.idle.Touch(c.idle.Last() + 1)
		_ = c.idle.Remaining(c.idle.Last(), timeout)
	}); a != 0 {
		t.Fatalf("Touch+Remaining: %v allocs/op", a)
	}
}
