// Package proxy is Stormgate's data plane: consumer sessions, the upstream pool
// of M provider connections, the pending table that maps rewritten request ids
// back to consumers, the hold queue, and Stormgate's own replies.
//
// Data flow: admission hands an accepted fd to Server.ServeFD, which wraps it in
// a netpoll connection (a Session). A Session decodes frame headers only: it
// answers heartbeats itself, hands two-way requests to its Pool (new id from the
// pool's allocator, a pending entry, the id rewritten in the header bytes, the
// frame appended to the chosen connection's batch) and drops what must not
// reach the provider. The provider's responses are matched by id on the
// connection that carried the request, get their original id back and are
// written to the consumer.
//
// Concurrency rules:
//   - netpoll runs at most one onRequest per connection at a time.
//   - A consumer connection is written from many goroutines; Session.write
//     serializes them (direct non-blocking write, then a single drain goroutine
//     for what the kernel did not take), so no caller ever blocks on a slow
//     consumer.
//   - An upstream connection has one writer at a time (write combining): the
//     goroutine that queues a frame while nobody writes becomes the writer and
//     writes the whole batch with a non-blocking write(2), looping while others
//     queue more; a full socket hands the role to the connection's flushLoop.
//   - Every two-way request has exactly one owner at a time: the hold queue
//     (under HoldQueue.mu) or one pending table (under upConn.mu). Whoever removes
//     it answers it: the provider's response, hold expiry, connection loss,
//     max_request_age, or shutdown.
//   - Lock order: HoldQueue.mu -> Pool.mu -> upConn.mu -> Session.wmu. The
//     write locks (upConn.wmu/nmu, Session.wmu/nmu) are never held while
//     calling netpoll's Close, whose close callbacks take them.
//   - Settings are an immutable *Config behind an atomic pointer; Update swaps it
//     and re-arms what depends on it.
package proxy
