// Package dubbo is Stormgate's Dubbo 2 wire codec: pure functions over bytes that
// parse and split frame headers, rewrite request ids in place, and build the frames
// Stormgate sends on its own (heartbeat request and Java-exact reply, READONLY and
// WRITEABLE events, error responses), plus the hessian2 string encoding and minimal
// request/response body helpers for test peers. It also reads the few provider answers
// whose meaning matters to the proxy's books, from their first bytes and exactly:
// NotExecuted (the provider refused the request before running it: no exporter yet,
// a full thread pool) and ClosingAttachment (dubbo-go's closing=true during its
// graceful shutdown); testdata/ holds such answers as the real providers write them.
// IdentifyRequest reads what a request calls (service, version, group, method) for
// per-method metrics and the access log, from the strings at the start of its body and
// the "group" attachment at its end; testdata/requests.txt holds requests as Java's,
// dubbo-js's and dubbo-go's encoders write them. Codec is all of this as the proxy sees it
// (proxy/wire's Codec): the proxy imports no Dubbo package, and the binary hands it a Codec.
//
// It does no I/O, holds no sockets and does no logging. Every input is treated as hostile: lengths are checked before any
// slice or allocation, frames are capped (DefaultMaxFrame unless the caller says
// otherwise), and the parsers never panic; the hot paths (ParseHeader, Split, SetID
// the Append builders into a buffer with room, and IdentifyRequest) never allocate.
//
// Concurrency: the package is stateless; every function is safe for concurrent use.
// A caller that shares a byte slice between goroutines (SetID writes into it) must
// synchronise access to that slice itself.
package dubbo
