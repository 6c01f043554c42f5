// Package storm measures connection storms: it opens thousands of TCP connections at once
// against a listener inside a network namespace it creates, and reports what the kernel and
// the clients saw (ListenOverflows/ListenDrops deltas, SYN retransmits, connect and
// first-byte latency percentiles) and, for the Stormgate target, how admission paced them.
//
// Run re-executes the current binary: a server process and Options.Clients client
// processes, all inside the namespace (`ip netns exec`), so that each holds its own fds
// (the server ~Connections, each client Connections/Clients). The binary's main or TestMain
// must call ChildMain first; in a child it runs the role and exits. Run needs root and
// iproute2; it returns ErrNeedsRoot otherwise.
//
// Each client sends one byte as soon as a connection is established (a consumer's first
// request) and waits for the server's first byte. Targets: Stormgate (admission.Listen +
// Serve; the server's byte is written on admission) and Baseline (the incident's provider:
// backlog 50, one accept per BaselineAcceptDelay; the byte is written on accept).
//
// Concurrency: Run is synchronous and owns its children: it waits for them on success and
// kills and reaps them on every error path; the namespace is removed before Run returns.
// Each child is single-purpose: the client drives all its sockets from one epoll loop on one
// locked thread (no Go poller), so its timestamps are not skewed by goroutine scheduling.
package storm
