// Package loadgen is a Dubbo 2 and Triple load generator: it opens many consumer connections to one
// target, heartbeats on each at a random phase, sends two-way requests open-loop at a fixed rate and
// counts every outcome. It is the engine of cmd/stormbench and of `sidecar demo`'s simulated consumers.
// With Config.Protocol "triple" the connections are h2c, each request a unary call on its own stream
// and each heartbeat a PING on an idle connection (triple.go says how; the rest of this comment holds
// for both protocols).
//
// Measurement rules: request k is scheduled at start + k/Rate whatever happened before, and its latency
// is measured from that scheduled time, so stalls anywhere (server, network, or this process falling
// behind) raise the figures rather than lowering the request count (no coordinated omission).
// Heartbeat round-trip times are measured from the actual send. Latencies go into HDR-style histograms
// (package loadgen/hist) that merge exactly across worker processes (Result.Merge, Result.JSON).
//
// Goroutines, all owned by Run, which waits for every one before returning:
//   - one per consumer connection: dials (paced by ConnectRate, bounded by DialConcurrency), reads and
//     matches replies by id, answers the server's heartbeats, closes, and redials if Reconnect > 0.
//     It is the only closer of its connection;
//   - one scheduler: emits requests and heartbeats at their due times into per-connection buffers and
//     writes each request at once with a non-blocking write(2);
//   - eight shard writers: flush heartbeats and whatever a non-blocking write left behind, one
//     write(2) per connection per wake-up (frames that meet in a buffer go out together); a blocking
//     write waits at most 50 ms, then the rest waits its turn again;
//   - one sweeper: expires requests and heartbeats older than Timeout;
//   - one reporter (if a progress callback is given): calls it once per second.
//
// Per connection, the pending table (a ring indexed by id) and the send buffer are guarded by the
// consumer's mutex; counters are atomics shared by all goroutines; nothing is package-level state.
// The request hot path (schedule, enqueue, write, read, match, record) does not allocate once the
// buffers have grown.
package loadgen
