// Package netns creates and uses network namespaces for the harnesses (admission's accept
// storms, the transparent-mode and e2e tests through transparent/netnstest, bench/suite's storm
// scenario): iproute2's named namespaces under /run/netns, so that `ip netns exec` and a
// thread's setns(2) both reach them. A Namespace is a name; its methods may be called from any
// goroutine.
package netns
