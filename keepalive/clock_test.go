package keepalive

import (
	"testing"
	"time"
)

// TestManualClockAfter: an After channel receives once the clock has been moved past
// its wait, and not before; a wait of 0 is due at once.
func TestManualClockAfter(t *testing.T) {
	start := time.Unix(1_000_000, 0)
	c := NewManualClock(start)
	ready := func(ch <-chan time.Time) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	if !ready(After(c, 0)) {
		t.Fatal("After(0) is not due at once")
	}
	short, long := After(c, 10*time.Millisecond), After(c, time.Second)
	c.Add(10*time.Millisecond - 1)
	if ready(short) || ready(long) {
		t.Fatal("due before the clock reached it")
	}
	c.Add(1)
	if !ready(short) || ready(long) {
		t.Fatal("the 10 ms wait did not end alone at 10 ms")
	}
	c.Set(start.Add(2 * time.Second))
	if !ready(long) {
		t.Fatal("Set past the wait did not end it")
	}
}
