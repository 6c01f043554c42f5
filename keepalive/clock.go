package keepalive

import (
	"sync"
	"time"
)

// Clock abstracts time for tests.
type Clock interface{ Now() time.Time }

// realClock is the Clock used when NewWheel is given nil.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// ManualClock is a Clock that moves only when told to. It is safe for concurrent use.
// Its zero value reads as the zero time.Time; NewManualClock starts it elsewhere.
type ManualClock struct {
	mu  sync.Mutex
	now time.Time
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
	c.mu.Unlock()
}

// Add moves the clock forward by d and returns the new time.
func (c *ManualClock) Add(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}
