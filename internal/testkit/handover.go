package testkit

import "testing"

// The handover tests' child (proxy's TestHandoverAcrossExec, proxy/triple's
// TestHandoverAcrossExecTriple) is served by proxytest.HandoverChild, which their TestMain calls; these
// are the words its parent and it share.
const (
	// HandoverRole names the child's image: "old" serves, and on SIGUSR1 freezes and execs itself as
	// "new", which restores what the old one froze and serves.
	HandoverRole = "STORMGATE_TEST_HANDOVER"
	// HandoverProvider is the address of the provider the child's Server is in front of.
	HandoverProvider = "HANDOVER_PROVIDER"
)

// StartHandoverChild starts a handover test's child, the old image, in front of the provider at
// provider. It prints "listening <addr>" once it serves at addr; on SIGUSR1 (Signal), "frozen <the
// snapshot's summary>" and, from the new image, "restored <how long the handover took>".
func StartHandoverChild(t testing.TB, provider string) *Child {
	t.Helper()
	return StartChild(t, HandoverRole+"=old", HandoverProvider+"="+provider)
}
