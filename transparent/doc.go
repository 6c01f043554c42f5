// Package transparent steers inbound Dubbo connections through Stormgate without the provider or its
// consumers changing anything, the way Istio's init container does for HTTP.
//
// It has three parts. NFT programs the redirect rules into the kernel's nftables over netlink (one
// table, `inet stormgate`, IPv4 and IPv6 together: a nat chain on the prerouting hook with one
// `tcp dport <inbound> redirect to :<proxy>` rule per inbound port); it needs no program, which is what
// lets the init container be the sidecar's own empty image. Rules with Install and Clean is the
// iptables-program backend for kernels without nf_tables (a nat chain, STORMGATE_INBOUND by default,
// jumped to from PREROUTING), run through a Runner so unit tests check the exact command lines without
// root. Both touch only the prerouting hook, so traffic the pod sends itself (Stormgate dialing
// 127.0.0.1:<port>) is never redirected, both are idempotent, and both remove all of what they
// installed and nothing else. OriginalDst reads the pre-redirect destination of an accepted connection
// (getsockopt SO_ORIGINAL_DST, or IP6T_SO_ORIGINAL_DST for IPv6; conntrack answers these whichever
// backend redirected), which is how the transparent listener learns which provider port a consumer
// dialed.
//
// Concurrency: Rules and NFT are plain values and every function here is safe to call from any
// goroutine. NFT.Install replaces the table in one netlink transaction; but Install and Clean on the
// same namespace must not run concurrently with each other (iptables offers no transaction across the
// several commands they run, and NFT compares before it replaces); the init container runs them once,
// before any other container starts. OriginalDst only reads socket state and may run concurrently on
// different sockets.
package transparent
