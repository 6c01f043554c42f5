// Package triple is HTTP/2 (Triple, gRPC) as a protocol of Stormgate's data plane: the consumer
// connections package proxy hands it (its first bytes were an HTTP/2 client preface) and the h2c
// connections to each provider whose upstream.protocol names Triple, with the calls mapped from one
// onto the other. It speaks HTTP/2 through the codec proxy/h2 (frames, HPACK, flow control: bytes
// only), and reaches the core only through proxy's plug-in API (proxy/plugin.go: Env, Consumer,
// Provider, the hold queue's call lane, Books, Writer, RunSlot); the core holds it as proxy/protocol.go's
// Protocol, Downstream and Upstream. cmd/sidecar passes New in proxy.Options.Protocol.
//
//	session.go    an HTTP/2 consumer: proxy/h2's Conn in the server role inside the core's
//	              session; its streams (h2Call) end exactly once toward it
//	pool.go       the provider's h2c connections: streams mapped onto them, waiting for a
//	              stream when none can open one, grpc-status 14 when a connection dies
//	replay.go     a call's request kept, and sent again when the provider proves it did not run it
//	calls.go      each call's service, method and gRPC status in the per-method series
//	              and the access log (the core's table, one for both protocols)
//	deadline.go   grpc-timeout and hold.timeout for calls waiting for a stream
//	deliver.go    answer DATA toward a consumer's window
//	keepalive.go  Stormgate's own PINGs while a call waits on a silent provider connection
//	stall.go      a consumer stream whose window stays shut past limits.frame_read_timeout is reset
//	hung.go       a provider connection that stops answering (upstream.hung_timeout)
//	handover.go   an upgrade: the quiesce, and a consumer connection's snapshot and restore
//	metrics.go    the stormgate_http2_* series
//	protocol.go   New: the protocol, with its sets of sessions and pools
//
// # Concurrency rules
//
//   - h2Session.mu -> writer.mu; h2Pool.mu -> HoldQueue.mu -> writer.mu (h2Upstream.w); nothing
//     holds an h2Session.mu and its h2Pool.mu at once (each side calls the other after unlocking),
//     and nothing holding the hold queue's lock takes an h2Pool's.
//   - A consumer connection's Input and Closed run on its netpoll handler, never at once; a provider
//     connection is read by a goroutine of its own, started through the core (RunSlot, Env.Spawn),
//     which Close waits for.
package triple
