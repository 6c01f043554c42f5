// Package keepalive schedules the proxy's time-driven work: idle-closing consumer connections, upstream
// heartbeats with jitter, dead-peer checks, hold-queue expiries and reconnect backoff. It knows nothing of Dubbo
// or sockets. A Wheel is a hashed timing wheel whose Timers are embedded in their owners (a connection, a hold
// queue), so scheduling allocates nothing; Idle records activity with one atomic store so that a busy connection
// never touches the wheel (the idle timer fires at last-check+timeout, reads Remaining, and either closes or
// reschedules itself for the rest: Netty IdleStateHandler's trick); Jitter and Backoff spread periodic and
// retried work so that a fleet never acts in step.
//
// # Concurrency
//
// One goroutine drives a Wheel (Run, or Advance in tests); every callback runs on that goroutine, one at a
// time, with no wheel lock held. Callbacks must be short and must not block (hand slow work, such as writing a
// heartbeat or closing a socket that may linger, to the owner's goroutine); they may Schedule and Stop any timer,
// their own included, but must not call Advance. Schedule and Stop take one short mutex, sharded over the
// timers, and may be called from any goroutine.
//
//	who                          calls                                     on which goroutine
//	---------------------------  ----------------------------------------  --------------------------------------
//	server (owner of the wheel)  NewWheel, Run(ctx); cancels ctx, waits    its own goroutine, started and joined
//	                                                                       by the server
//	tests                        Advance(now) with a ManualClock           the test goroutine (instead of Run)
//	connection / queue owner     Timer.Init once at creation               creator, before the timer is shared
//	connection / queue owner     Schedule, ScheduleAt, Stop, Scheduled     any goroutine
//	timer callback               Schedule(At), Stop (own timer or others)  the driving goroutine
//	connection reader            Idle.Touch(now) per read                  its reader goroutine (atomic store)
//	idle timer callback          Idle.Remaining, then close or Schedule    the driving goroutine
//	reconnect loop               Backoff.Next, Reset, Attempt              the loop's goroutine (not shared)
//	anyone                       Jitter (nil rng), Len, CoarseNow          any goroutine
//
// Stop returning true guarantees that the callback will not run for that schedule; false means the timer was
// not scheduled, which includes "already fired" and "firing right now". A callback therefore checks its owner's
// state (closed?) before acting. Ordering: a callback never runs before its deadline and, with a timely driver,
// at most one tick after it.
package keepalive
