// Package e2e holds Stormgate's end-to-end acceptance tests that need the real
// binaries: provider restarts, READONLY handling, the hold queue, max request age
// and graceful drain (restart_test, readonly_test, drain_test, maxage_test); live
// settings over xDS with the reference control plane (xds_*_test, which also keeps
// docs/configuration.md in sync: `go test ./e2e -run TestXDSConfigurationDocs
// -update`), also over mutual TLS (xds_tls_test); transparent interception in network
// namespaces, IPv4 and IPv6 (transparent_*_test, root only, skipped with a message
// elsewhere); the admission webhook as a process (webhook_test); and every known HTTP/2
// attack sent to one sidecar beside a normal consumer, with an h2c provider that
// referees what reaches it (h2attacks_test, h2provider_test). The pod test, with
// real containers, is package e2e/pod; e2e/testcerts makes the tests' throwaway X.509
// material. It has no production code: the tests build the real binaries (`sidecar` and
// `stormbench`) once per run in TestMain and drive them as separate OS processes on
// 127.0.0.1 ephemeral ports, with consumers (package peer's Client) in the test
// process.
//
// Every scenario is bounded in time and in count, and waits by polling with a
// deadline (the sidecar's /metrics, its log lines, process exit), never by sleeping
// and hoping. Wall-clock pauses that the scenario itself prescribes (the provider
// stays down for one second) are the only sleeps.
//
// Concurrency: each test owns its processes (killed and reaped by t.Cleanup) and its
// consumer fleet (closed, and its goroutines waited for, by t.Cleanup). Tests do not
// run in parallel with each other: their timing bounds assume the machine is not
// also running the rest of this package.
package e2e
