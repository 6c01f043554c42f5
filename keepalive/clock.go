package keepalive

import (
	"sync"
	"time"
)

// Clock abstracts time for tests.
type Clock interface{ Now() time.Time }

// After returns a channel that receives once c has moved d past its present reading:
// the clock's own After when it has one (ManualClock), else the system's time.After.
func After(c Clock, d time.Duration) <-chan time.Time {
	if a, ok := c.(interface {
		After(time.Duration) <-chan time.Time
	}); ok {
		return a.After(d)
	}
	return time.After(d)
}

// realClock is the Clock used when NewWheel is given nil.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// ManualClock is a Clock that moves only when told to. It is safe for concurrent use.
// Its zero value reads as the zero time.Time; NewManualClock starts it elsewhere.
type ManualClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []manualWaiter // After's channels not yet due
}

type manualWaiter struct {
	at time.Time
	ch chan time.Time
}

// NewManualClock returns a ManualClock reading start.
func NewManualClock(start time.Time) *ManualClock { return &ManualClock{now: start} }

// Now returns the clock's current time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set moves the clock to t (backwards too; a Wheel ignores time going backwards).
func (c *ManualClock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.fireLocked()
	c.mu.Unlock()
}

// Add moves the clock forward by d and returns the new time.
func (c *ManualClock) Add(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.fireLocked()
	return c.now
}

// After returns a channel that receives the clock's time once Add or Set has moved it
// d past now (at once when d <= 0): a wait that only the test's moves end.
func (c *ManualClock) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, manualWaiter{at: c.now.Add(d), ch: ch})
	return ch
}

// fireLocked sends on every After channel that is due.
func (c *ManualClock) fireLocked() {
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if c.now.Before(w.at) {
			kept = append(kept, w)
			continue
		}
		w.ch <- c.now // buffered, sent once
	}
	clear(c.waiters[len(kept):])
	c.waiters = kept
}
