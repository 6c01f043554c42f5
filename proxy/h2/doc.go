// Package h2 is Stormgate's HTTP/2 codec (RFC 9113) for Dubbo 3 Triple and gRPC: pure functions and state
// machines over bytes, like proxy/dubbo. It holds no sockets, starts no goroutines and does no logging.
//
// What is here, one concern per file:
//   - frame.go: the 9-byte frame header, Split for a stream buffer, and each frame type's validity rules
//     (length, stream id zero or not, flags, padding) as RFC 9113 §6 states them, returned as connection or
//     stream errors carrying the right error code (errors.go).
//   - settings.go, control.go: SETTINGS (encode, decode, validate, ACK), PING, WINDOW_UPDATE, RST_STREAM,
//     GOAWAY builders and parsers; the client connection preface.
//   - hpack.go: header blocks. Decoding uses golang.org/x/net/http2/hpack, one decoder per connection.
//     Encoding toward the other side is stateless: static-table indexes and literals that are never added
//     to a dynamic table, so Stormgate keeps no encoder state; Stormgate advertises
//     SETTINGS_HEADER_TABLE_SIZE = 0, and blocks a peer sends before it acknowledges that still decode with
//     the default 4,096-byte table. grpc.go reads :path, grpc-status and grpc-message.
//   - assemble.go: HEADERS + CONTINUATION into one block, bounded in bytes and frames.
//   - flow.go: flow-control windows per connection and per stream, both directions.
//   - conn.go, stream.go, guard.go: one HTTP/2 connection's state machine (either role): stream states per
//     §5.1, stream id rules, SETTINGS exchange, PING answered in place, and the guards against the known
//     HTTP/2 attacks (rapid reset, CONTINUATION and control-frame floods, empty frames, oversized header
//     lists, too many streams, zero-window stalls), each ending in the GOAWAY or RST_STREAM a careful
//     server sends, and counted.
//
// Every input is hostile: lengths are checked before any slice or allocation, and no parser panics (the
// fuzz targets check that). Frame parsing, Split, the control-frame builders and PING answering never
// allocate.
//
// Concurrency: the functions are stateless and safe for concurrent use. A Conn, an Assembler and a
// HeaderDecoder belong to one goroutine at a time (the connection's owner); none of them locks.
package h2
