// Package proxy is Stormgate's data plane: consumer sessions, the pool of M
// provider connections per provider address, the pending tables that map rewritten
// request ids back to consumers, the hold queue, and Stormgate's own replies.
//
// # Data flow, one file per step
//
//	server.go     ServeFD: an admitted consumer fd becomes a netpoll connection (session)
//	session.go    onRequest: the bytes go to the connection's protocol, its Downstream
//	dubboconsumer.go  Dubbo's: frames cut by framereader.go; heartbeats answered here;
//	              requests handed to the pool; bad input closes this consumer only
//	pool.go       forward: the request enters the books (pending.go), goes to the least
//	dubboupstream.go  loaded Dubbo connection that takes it (send), or waits in the hold
//	              queue (hold.go)
//	turns.go      every wait is per-consumer FIFOs in deficit round robin: the hold queue,
//	              a connection's send queue (sendq.go), HTTP/2's waiting calls (holdcalls.go)
//	upconn.go     send: a fresh upstream id, the frame into the connection's writer
//	              (writer.go), a pending entry; onRequest: the provider's answer is matched
//	              by id, gets the consumer's id back and is written to the consumer
//	pending.go    the one way a request leaves the books: answer or refuse, exactly once
//	lifecycle.go  a provider starting, draining or dying, in one table; one file each:
//	  notrun.go        answers that prove a request never ran send it back to the hold queue
//	  peerend.go,      a dead provider's kernel proves which requests it never read: they
//	  peerdiag.go      go back too (replay.go keeps their bytes)
//	  providerdrain.go READONLY / closing=true: the provider's drain, no new requests
//	handover.go   Freeze / Restore: the whole data plane moves to a new process (an upgrade)
//
// HTTP/2 (Triple, gRPC; upstream.protocol triple or both, docs/design.md §14) is a protocol of its
// own package, proxy/triple, which the caller passes in (Options.Protocol) as it passes the Dubbo
// codec (Options.Codec); the core holds it, and Dubbo (dubboprotocol.go, over the codec), as
// protocol.go's interfaces, and hands it plugin.go's API:
//
//	sniff.go      the first bytes of a consumer connection decide its protocol
//	protocol.go   what the core calls in a protocol: Protocol, Downstream, Upstream
//	plugin.go     what a protocol calls in the core: Env, Consumer, Provider, and the
//	              hold queue's call lane (holdcalls.go), Books, Writer, RunSlot
//
// # What runs where
//
//	| event                        | runs on                   | what happens
//	|------------------------------|---------------------------|------------------------------------------------
//	| consumer bytes arrive        | netpoll handler, 1/conn   | whole frames handled in place; a partial frame
//	|                              |                           | is copied aside (budgeted), never waited for
//	| provider bytes arrive        | netpoll handler, 1/conn   | answers routed; oversize answers skipped and
//	|                              |                           | refused alone; callbacks refused; READONLY
//	| a write comes up short       | a flusher goroutine       | waits for the socket in Go's poller; senders
//	|                              | (one per stalled socket)  | keep queueing behind it, budgeted
//	| timers                       | the timing wheel goroutine| idle and frame-read timeouts, heartbeats and
//	|                              |                           | liveness, write stalls, hold expiry, the
//	|                              |                           | max_request_age sweep, warm-up retries
//	| provider (re)connect         | one goroutine per slot    | dial (real errno), back off with full jitter
//	| connection death, retirement | a goroutine of its own    | settle or re-hold everything that was on it
//	| an HTTP/2 provider connection| a goroutine of its own    | frames routed to consumer streams; frames to
//	|                              | reads                     | the provider go through its writer, written
//	|                              |                           | by whoever claimed it, after the pool's lock
//	| a loopback provider's socket | the Server's sock_diag    | how much its application had read, handed to
//	| destroyed (peerdiag.go)      | watcher, 1/Server         | the connection's death waiting for it
//
// Every goroutine is started through the Server (spawn), a pool's WaitGroup, or the
// Server's sock_diag watcher (which Close stops last: a connection's death waits for
// its announcements), and Close returns only after all of them have. Time comes from Options.Clock: timeouts
// through the wheel, and the waits of a connection's death (the peer-end proof in
// peerend.go) through Server.after, off the wheel, which Freeze and Close stop while
// they wait for those goroutines. Tests drive both with a keepalive.ManualClock. The
// handover's Taken stamp and its logged durations are on it too, and the sock_diag
// watcher (peerdiag.go) reads each slot's times on the clock of the server that
// registered it. Only the dial deadline (dial.go) is on the real clock: it bounds
// the kernel's connect(2) and the resolver, which run in real time.
//
// # Concurrency rules
//
//   - netpoll runs at most one handler per connection at a time, and never a close
//     callback during one; a connection's frame reader is touched only there.
//   - A writer never lets a write(2) read a buffer that a sender appends to: senders
//     own q, the goroutine with the writer role owns the batch; see writer.go.
//   - Every two-way request has exactly one owner at a time: the hold queue (under
//     HoldQueue.mu) or one pending table (under its upConn.mu); see pending.go.
//   - A protocol's locks come before the core's it calls under them: for HTTP/2, h2Pool.mu ->
//     HoldQueue.mu -> writer.mu, and h2Session.mu -> writer.mu (package proxy/triple's rules).
//   - Lock order: HoldQueue.mu -> upConn.mu -> writer.mu -> writer.fdMu. Nothing that
//     holds one of these calls upConn.fail (which re-holds); it is spawned instead.
//   - A close callback runs before netpoll closes the fd, and closes the writer first,
//     so no write reaches a reused fd number.
//   - Settings are an immutable *Config behind an atomic pointer; Update swaps it and
//     re-arms what depends on it. Config carries no defaults of its own: xds resolves
//     every setting, and zero means what the schema says.
package proxy
