// Package wire is the seam between Stormgate's data plane (package proxy) and a wire
// protocol's codec: the few words both sides speak (a frame's kind, id and length; why
// Stormgate answers a request itself; a provider's events; what a request calls and how
// its answer ended) and the Codec interface a protocol implements with them. proxy uses a
// Codec and imports no protocol; proxy/dubbo implements one; the binary (cmd/sidecar)
// hands it to proxy.New. It is one package of its own, rather than types in proxy, so that
// a protocol package and proxy's own tests can both import it without a cycle (the shape
// of database/sql/driver).
//
// It holds no state and does no I/O. Concurrency: its types are values; a Codec must be
// safe for concurrent use (Codec's doc comment).
package wire
