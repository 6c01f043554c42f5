// Package interop checks Stormgate against the real thing: a dubbo-go v3.3.0 provider (cmd/dgprovider) behind
// the `sidecar run` binary and a dubbo-go v3.3.0 consumer (cmd/dgconsumer) in front of it, each its own OS
// process talking the dubbo protocol with hessian2 over loopback.
//
// It is a separate Go module (github.com/stormgate/stormgate/interop) so that the main module never depends on
// dubbo-go. The package itself has no production code: TestMain builds the two peers and the sidecar (from the
// main module in ..) once per run, and the tests drive them on 127.0.0.1 ephemeral ports. Connection counts come
// from the kernel's tables (internal/sockets), Stormgate's counters from its /metrics endpoint.
//
// Concurrency: every test owns its processes; t.Cleanup kills (SIGKILL) and reaps any that are still running.
// Waits poll with a deadline (a process's READY line, /readyz, a metric, a socket count); the only sleeps are
// the ones a scenario prescribes. The 16-connection scenario (about 32 s, waiting for dubbo-go's getty client to
// open its connections) runs in parallel with the sequential group (direct sanity check, restarts); the
// restarts never overlap each other because their timing bounds (hold timeout 3 s, restart under 2 s) assume
// a quiet machine.
package interop
