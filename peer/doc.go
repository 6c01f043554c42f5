// Package peer is a Dubbo 2 test provider and a simple consumer client, independent of
// the proxy: the proxy's integration tests, `sidecar demo`, the restart tests (through
// `stormbench provider`, the provider in its own process) and the benchmarks use it as
// the far end on each side.
//
// Provider listens at NewProvider and serves from Serve. Behaviour by method name:
// "echo" returns its string argument; "sleep" waits the duration given as its argument
// ("100ms") and echoes it; "fail" throws a business exception as Java does (status 20,
// body type WITH_EXCEPTION, then a hessian2 java.lang.RuntimeException object whose
// detailMessage is "fail: <arg>"); "error" answers status 80 with a message; "big"
// returns a string of 'x' of the length given as its argument (up to 64 MiB); any other
// method answers status 60 SERVICE_NOT_FOUND, unless it is named in
// ProviderConfig.Methods (then it echoes). Heartbeats (two-way event requests) get the
// Java reply byte for byte; one-way requests and one-way events get nothing; every reply
// keeps the request's id and serialization id. Undecodable request bodies get status 40;
// bad magic, a negative or oversize length, or a truncated frame closes that connection
// only. Close is immediate; Shutdown is Java's graceful sequence (READONLY to every
// connection, wait for in-flight requests, flush, half-close, close).
//
// Client is one consumer connection: Call, CallOneWay, Heartbeat, Roundtrip (a prebuilt
// frame) and Send (raw bytes), with server heartbeats answered automatically and every
// server request reported on Events. Responses are matched by id; responses nobody
// waits for are counted (ClientStats.Unexpected), so tests can assert that none was
// duplicated or lost.
//
// EchoProvider (echo.go) is the provider for integrity tests: it treats bodies as raw
// bytes, echoes every two-way request's body back as a status-20 answer, reads badly on
// demand (small SO_RCVBUF and MSS, random short reads, random pauses, Stall), checks
// every frame it reads and records what a correct proxy never sends (a malformed frame,
// a body that fails its own check, an upstream id repeated on a connection, a request
// delivered twice), and can be killed and restarted on the same port. Checked bodies
// (body.go) carry their own length, a unique key and a CRC-32C, so a cut, a splice or
// another request's bytes are caught on either side; stormbench and the soak build the
// same bodies.
//
// TripleEcho (triple.go) is the Triple counterpart of EchoProvider: an h2c gRPC provider on
// proxy/h2's Conn that answers every unary call with its own message, checks what it reads and
// counts the PINGs it receives, those a load consumer marked (LoadPing) apart. triple_wire.go builds
// and reads the calls dubbo-go v3.3.0 sends without IDL (a hessian2 TripleRequestWrapper).
//
// UnifiedEcho (unified.go) is both on one port, as Dubbo 3's port unification serves them (the
// provider of upstream.protocol both): one listener and one accept loop (accept.go's acceptEach, the
// one the other two run too); each connection's first bytes (the Dubbo magic, or the HTTP/2 client
// preface) pick the EchoProvider or the TripleEcho, which serves it with those bytes replayed, as if
// it had accepted it; a kill ends both at once.
//
// Frames are built and read with proxy/dubbo; wire.go adds only what the codec does not
// have (the exception body). The package's tests check the bytes that matter (heartbeat
// reply, READONLY, echo reply) against literal hex, so a codec bug cannot cancel itself
// out in a test that uses the peer on both sides.
//
// Concurrency: the EchoProvider runs an accept goroutine while listening and a reader
// and a writer goroutine per connection; Kill and Close wait for all of them. The
// Provider runs one reader goroutine per connection, plus a heartbeat
// goroutine per connection when HeartbeatInterval > 0, plus one goroutine per request
// waiting out a delay (bounded by MaxDelayed). All writes to a connection go through a
// per-connection buffered writer under one lock; the reader flushes when no complete
// frame is left in its read buffer, delayed replies and events flush at once. Every
// goroutine is owned by the Provider and waited for by Close (and by Shutdown, which
// ends with Close). All Provider and Client methods are safe for concurrent use. A
// Client runs one reader goroutine, ended and waited for by Close or by the connection's
// end; it never blocks on Events (a full channel drops and counts).
package peer
