package netnstest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"testing"

	"github.com/stormgate/stormgate/internal/netns"
)

// Namespace is a network namespace that lives until the end of the test that created it
// (internal/netns, with the test's failures instead of errors).
type Namespace struct {
	*netns.Namespace
}

// RequireRoot skips t unless the process runs as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipped: needs root to create network namespaces and iptables rules; " +
			"run as root, e.g. `sudo -E go test ./transparent/...` (CI runs as root, so it runs there)")
	}
}

// RequireTools fails (under CI) or skips (elsewhere) t unless every named program is on PATH.
func RequireTools(t testing.TB, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			msg := fmt.Sprintf("%s not found on PATH (Debian: apt-get install -y iptables iproute2)", n)
			if os.Getenv("CI") != "" {
				t.Fatal(msg)
			}
			t.Skip("skipped: " + msg)
		}
	}
}

// New creates a namespace with its loopback up; it is deleted when t ends. It skips t without root.
func New(t testing.TB, prefix string) *Namespace {
	t.Helper()
	RequireRoot(t)
	RequireTools(t, "ip")
	// The pid keeps concurrent test binaries apart, the random part concurrent tests in one binary.
	name := fmt.Sprintf("%s-%d-%08x", prefix, os.Getpid(), rand.Uint32())
	ns, err := netns.Create(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ns.Remove(); err != nil {
			t.Error(err)
		}
	})
	return &Namespace{ns}
}

// Run runs argv inside the namespace and returns its standard output; t fails if it exits non-zero.
func (n *Namespace) Run(t testing.TB, argv ...string) string {
	t.Helper()
	out, err := n.Exec(context.Background(), argv...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Link connects a and b with a veth pair, gives a the address aAddr and b the address bAddr (same
// prefix, e.g. 198.18.0.1/30 and 198.18.0.2/30), and brings both ends up. It returns the interface
// names, for AddAddr. The pair disappears with the namespaces.
func Link(t testing.TB, a, b *Namespace, aAddr, bAddr netip.Prefix) (aIf, bIf string) {
	t.Helper()
	// Interface names are at most 15 bytes; random so parallel tests never collide.
	id := rand.Uint32()
	aIf, bIf = fmt.Sprintf("sg%08xa", id), fmt.Sprintf("sg%08xb", id)
	if out, err := exec.Command("ip", "link", "add", aIf, "netns", a.Name, "type", "veth",
		"peer", "name", bIf, "netns", b.Name).CombinedOutput(); err != nil {
		t.Fatalf("ip link add veth: %v: %s", err, out)
	}
	a.AddAddr(t, aIf, aAddr)
	a.Run(t, "ip", "link", "set", aIf, "up")
	b.AddAddr(t, bIf, bAddr)
	b.Run(t, "ip", "link", "set", bIf, "up")
	return aIf, bIf
}

// AddAddr adds addr (e.g. 198.18.0.1/30 or 2001:db8::1/64) to interface ifname in n. IPv6 addresses
// skip duplicate address detection, so they are usable at once instead of after about a second.
func (n *Namespace) AddAddr(t testing.TB, ifname string, addr netip.Prefix) {
	t.Helper()
	argv := []string{"ip", "addr", "add", addr.String(), "dev", ifname}
	if addr.Addr().Is6() {
		argv = append(argv, "nodad")
	}
	n.Run(t, argv...)
}

// FD opens the namespace (/run/netns/NAME) and returns the descriptor, closed when t ends: what
// netlink libraries take to program a namespace without switching threads into it.
func (n *Namespace) FD(t testing.TB) int {
	t.Helper()
	f, err := os.Open("/run/netns/" + n.Name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return int(f.Fd())
}
