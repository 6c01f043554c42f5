package testkit

import (
	"testing"
	"time"

	"github.com/stormgate/stormgate/keepalive"
)

// StepClockUntil moves clk, wheel's clock, in steps of step, up to limit, until cond holds; each step
// advances wheel (its callbacks due have run when Advance returns) and waits a little for what runs on
// other goroutines to catch up with it. Past limit it gives them a real-time grace (WaitFor, 10 s)
// before failing t.
func StepClockUntil(t testing.TB, clk *keepalive.ManualClock, wheel *keepalive.Wheel, limit, step time.Duration, what string, cond func() bool) {
	t.Helper()
	for moved := time.Duration(0); !cond(); moved += step {
		if moved >= limit {
			// Moved as far as the new value allows, and more: give the goroutines that
			// act on what fired a real-time grace before judging.
			WaitFor(t, 10*time.Second, what+" within "+limit.String()+" on the clock", cond)
			return
		}
		clk.Add(step)
		wheel.Advance(clk.Now())
		time.Sleep(2 * time.Millisecond)
	}
}
