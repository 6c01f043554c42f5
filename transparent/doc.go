// Package transparent steers inbound Dubbo connections through Stormgate without the provider or its
// consumers changing anything, the way Istio's init container does for HTTP.
//
// It has two halves. Rules builds the nat-table iptables rules (a dedicated chain, STORMGATE_INBOUND by
// default, jumped to from PREROUTING, holding one `-p tcp --dport <inbound> -j REDIRECT --to-ports <proxy>`
// rule per inbound port) and installs or removes them idempotently through a Runner, so unit tests check the
// exact command lines without root and `sidecar iptables` runs the real binary. Only PREROUTING is touched:
// traffic the pod sends itself (Stormgate dialing 127.0.0.1:<port>) is never redirected. OriginalDst reads
// the pre-REDIRECT destination of an accepted connection (getsockopt SO_ORIGINAL_DST, or
// IP6T_SO_ORIGINAL_DST for IPv6), which is how the transparent listener learns which provider port a
// consumer dialed.
//
// Concurrency: Rules is a plain value and every function here is safe to call from any goroutine, but
// Install and Clean on the same table must not run concurrently with each other (iptables itself offers no
// transaction across the several commands they run); the init container runs them once, before any other
// container starts. OriginalDst only reads socket state and may run concurrently on different sockets.
package transparent
