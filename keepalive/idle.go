package keepalive

import (
	"sync/atomic"
	"time"
)

// Idle tracks the last activity time cheaply (atomic), for lazy idle checks: a timer fires at lastCheck+timeout,
// reads Since(), and either closes or reschedules for the remaining time (Netty IdleStateHandler's trick,
// so a hot connection costs one atomic store per read, not a wheel operation).
//
// The zero value has Last()==0 (the Unix epoch), so it reads as idle for decades: Touch it when the connection
// is created. All methods are safe for concurrent use; concurrent Touches are last-writer-wins.
type Idle struct {
	last atomic.Int64
}

// Touch records activity at now (unix nanoseconds).
func (i *Idle) Touch(now int64) { i.last.Store(now) }

// Last returns the time of the latest Touch in unix nanoseconds.
func (i *Idle) Last() int64 { return i.last.Load() }

// Since returns how long the connection has been idle at now (unix nanoseconds).
func (i *Idle) Since(now int64) time.Duration { return time.Duration(now - i.last.Load()) }

// Remaining returns how long until the connection has been idle for timeout (<=0 means idle now).
func (i *Idle) Remaining(now int64, timeout time.Duration) time.Duration {
	return timeout - i.Since(now)
}
