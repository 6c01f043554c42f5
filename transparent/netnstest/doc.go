// Package netnstest gives tests throwaway Linux network namespaces: create one per test (removed at
// cleanup), link two with a veth pair on 198.18.0.0/15 (and 2001:db8::/32) addresses, run commands in one
// (`ip netns exec`), and create sockets inside one from the test process itself.
//
// Everything here needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) and the `ip` tool (iproute2). Without root,
// New skips the test with a message saying how to run it; with root but without a needed tool, the test
// fails when the CI environment variable is set (a CI image missing a package must not go green by
// skipping) and skips otherwise.
//
// Concurrency: a Namespace may be used from several goroutines. Do runs its function on a dedicated OS
// thread that is switched into the namespace and never returns to the Go scheduler's pool, so the
// namespace never leaks into unrelated goroutines. Sockets keep the namespace they were created in, so a
// listener or connection made inside Do may be used from any goroutine afterwards.
package netnstest
