// Package admission owns Stormgate's listening socket and everything up to handing an
// accepted, admitted connection's raw fd to the proxy: a socket created with an explicit
// backlog (net.Listen cannot set one, golang/go#39000), an accept loop that drains the kernel
// queue as fast as it can so that it never overflows, a bounded pending queue where accepted
// connections wait (their bytes in the kernel buffer, nobody reset), a token bucket
// (golang.org/x/time/rate) that paces their admission, caps that close with a FIN, and the
// storm diagnostics (accept queue length/limit from TCP_INFO, TcpExt ListenOverflows and
// ListenDrops deltas, pending gauge, wait histogram).
//
// # Lifecycle
//
//	Listen ──▶ Serve(ctx, h) ─────────────────────────────▶ returns (always non-nil error)
//	  │          ├─ accept goroutine   accept4 until EAGAIN, park in the runtime poller
//	  │          ├─ admission goroutine  tokens / deadline pacing ─▶ h.ServeConn(c)
//	  │          └─ sampler goroutine  TcpExt deltas every 1 s
//	  └─ connections queue in the kernel until Serve runs
//	StopAccepting / Close / ctx done ──▶ listener closed, pending closed (FIN), Serve returns
//	Freeze ──▶ Serve returns ErrFrozen; Snapshot owns listener + pending ──▶ Restore ──▶ Serve
//	           (MarshalBinary / UnmarshalBinary in between when an execve separates them)
//
// | Event                       | Runs on                | What happens                                            |
// |-----------------------------|------------------------|---------------------------------------------------------|
// | kernel queue readable       | accept goroutine       | accept4(NONBLOCK|CLOEXEC) until EAGAIN, in batches of 64 |
// | accepted, over a cap        | accept goroutine       | receive queue discarded, close → FIN; counted by reason  |
// | accepted, under the caps    | accept goroutine       | appended to the pending queue (mutex), admission woken   |
// | token (or deadline) due     | admission goroutine    | popped (FIFO or round-robin by source IP), ServeConn(c)  |
// | ServeConn(c)                | admission goroutine    | handler owns c.FD from here; must not block             |
// | proxy closes a conn         | any goroutine          | ConnClosed(): active count down (MaxConnections)        |
// | Update(cfg)                 | caller                 | listen(2) again on the same fd, listener options, new   |
// |                             |                        | settings swapped atomically, limiter retuned in place    |
// | Stats / metrics scrape      | caller                 | atomics, pending length under the mutex, TCP_INFO        |
// | StopAccepting/Close/ctx     | caller                 | final accept sweep (FIN, not the RST a close would give), |
// |                             |                        | listener closed, pending closed with FIN, Serve returns  |
// | Freeze                      | caller                 | goroutines stopped (deadline wakes the accept one), the  |
// |                             |                        | listener dup'd out of Go's poller, pending taken: all    |
// |                             |                        | without FD_CLOEXEC; handshakes wait in the kernel queue  |
// | Restore(snapshot)           | caller (new image, or  | same socket back in the poller, pending re-queued with   |
// |                             | this one after a       | their accept times, counters and active count carried    |
// |                             | failed handover)       | over; Serve next                                         |
//
// # Concurrency
//
// Serve owns its three goroutines and returns only after they have exited. The pending queue
// is guarded by one mutex, held briefly by the accept goroutine (once per batch) and the
// admission goroutine (once per admission); Update, Stats and StopAccepting take it too.
// Settings are an immutable value behind an atomic pointer; the rate.Limiter is goroutine-safe
// and retuned in place so that tokens carry over. A connection has exactly one owner at any
// time: the accept goroutine until it is queued, the queue until it is popped (by admission,
// or by StopAccepting, which closes it), then the Handler. Update, ConnClosed, Stats, Addr,
// StopAccepting and Close are safe to call concurrently with Serve and with each other.
//
// # Handover (sidecar upgrade, issue 14)
//
// Freeze and Restore move the admission stage to a new program image without refusing or
// resetting anyone: the listening socket is never closed, so the kernel keeps completing
// handshakes into its accept queue (up to the backlog) while no process accepts; connections
// that were waiting for admission keep their unread bytes in the kernel and their place in
// time (MaxWait counts from their accept). The Snapshot is the unit of ownership in between.
// The frozen Admitter keeps counting ConnClosed until the Snapshot is marshalled or restored,
// because the Handler may close admitted connections until it is frozen too.
//
// # Why these mechanisms
//
//   - The listener is the only fd in Go's poller: admitted fds go to netpoll, which must not
//     share them with the runtime. Accepting with accept4 inside the listener's RawConn.Read
//     costs the same CPU as a dedicated thread blocking in accept4 (~6.5 µs per connection
//     here) and about a fifth of net.Listener.Accept plus File() (~35 µs: a poller
//     registration, a dup and a close per connection); see BenchmarkAcceptDrain.
//   - MaxWait is a promise (a Dubbo consumer's first request times out after 1 s): when the
//     tokens cannot admit every pending connection by its MaxWait, the admission goroutine
//     raises its rate to the lowest even rate that can (counted over ~32 age buckets), so a
//     storm larger than AcceptRate × MaxWait is spread over the window, not released all at
//     once when the first reaches MaxWait.
//   - Over a cap, the receive queue is discarded before close(2): Linux answers a close with
//     unread data with a RST, and a consumer's first request often arrives with the handshake.
//   - TCP_NODELAY, SO_KEEPALIVE and TCP_KEEPIDLE are set on the listener; accepted sockets
//     inherit them, so the accept loop makes no per-connection setsockopt.
//
// # Defaults
//
// AcceptRate 5,000/s, AcceptBurst 500, MaxWait 1 s, chosen with TestMeasureAdmissionRates:
// six rounds of 10,000 connections from two client processes against a netpoll echo server
// standing in for the proxy, while 50 established connections sent 5,000 req/s, on a shared
// 2-core machine (load average 10–27 from other work, so the figures are noisy). One admitted
// connection cost the server 35–50 µs of CPU (accept, admit, first write), 150–200 µs with the
// echo event loop: a 10,000 storm is 1.5–2 core-seconds of work. Median p99 latency of the
// established connections during the storm, and runs with accept-queue overflows:
//
//	unlimited   ~850 ms   5 of 6 runs overflowed (up to 4.6k ListenOverflows)
//	20,000/s    ~650 ms   0 of 6
//	10,000/s    ~445 ms   3 of 6
//	 5,000/s    ~285 ms   1 of 6 (at load average 27)
//	 2,000/s    ~510 ms   2 of 6 (most of the storm reaches the deadline-paced tail at once)
//
// Unlimited admission lets the storm's event-loop work starve the accept goroutine, which is
// what overflows the kernel queue. With deadline pacing any rate admits a 10,000 storm within
// about MaxWait, so the rate decides how smaller storms are smoothed: 5,000/s bounds a storm's
// event-loop work to roughly one core, 500 lets a typical reconnect burst through at once, and
// 1 s matches Java Dubbo's default first-request timeout.
package admission
