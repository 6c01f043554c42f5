// Package h2snap is the HTTP/2 part of an upgrade's snapshot of a consumer connection: its types, and
// its form in the snapshot's compact consumer blob. It is one package of its own, rather than types in
// proxy or in proxy/triple, because both read it: proxy carries the snapshot from one binary to the next
// (SessionSnapshot.H2, and the blob it writes and reads whole) and proxy/triple writes and restores it.
// The encoding is a format between two builds (a running binary hands its snapshot to a new one): the
// JSON field names and the blob's layout do not change (proxy's TestSnapshotGolden).
//
// Values are plain data, with no concurrency rules of their own.
package h2snap
