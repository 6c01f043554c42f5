package transparent_test

import (
	"errors"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stormgate/stormgate/transparent"
	"github.com/stormgate/stormgate/transparent/netnstest"
)

// These tests need root; without it they skip and say so. CI runs as root.

// snapshot is everything a namespace's packet filter holds, as the three tools an operator would use
// print it. iptables-save's "# Generated ... on <date>" comment lines are dropped: they carry a clock.
type snapshot struct{ nft, ipt4, ipt6 string }

func takeSnapshot(t *testing.T, ns *netnstest.Namespace) snapshot {
	t.Helper()
	s := snapshot{nft: ns.Run(t, "nft", "list", "ruleset")}
	strip := func(out string) string {
		var b strings.Builder
		for line := range strings.Lines(out) {
			if !strings.HasPrefix(line, "#") {
				b.WriteString(line)
			}
		}
		return b.String()
	}
	if _, err := exec.LookPath("iptables-save"); err == nil {
		s.ipt4 = strip(ns.Run(t, "iptables-save"))
	}
	if _, err := exec.LookPath("ip6tables-save"); err == nil {
		s.ipt6 = strip(ns.Run(t, "ip6tables-save"))
	}
	return s
}

func (s snapshot) diff(t *testing.T, want snapshot) {
	t.Helper()
	for _, c := range []struct{ what, got, want string }{
		{"nft list ruleset", s.nft, want.nft}, {"iptables-save", s.ipt4, want.ipt4}, {"ip6tables-save", s.ipt6, want.ipt6},
	} {
		if c.got != c.want {
			t.Errorf("%s differs:\n%s\nwant exactly\n%s", c.what, c.got, c.want)
		}
	}
}

// TestNetnsNFTInstallTwiceCleanOnce programs the kernel through netlink in a fresh namespace that
// already holds other people's rules (an nft table, iptables and ip6tables rules): Install shows in
// `nft list` exactly as Script printed it, installing twice changes nothing, a changed port list or a
// tampered chain is replaced, and Clean restores `nft list ruleset`, iptables-save and ip6tables-save
// byte for byte.
func TestNetnsNFTInstallTwiceCleanOnce(t *testing.T) {
	t.Parallel()
	netnstest.RequireRoot(t)
	netnstest.RequireTools(t, "ip", "nft")
	for _, n := range []transparent.NFT{{}, {IPv4Only: true}} {
		t.Run(n.Family(), func(t *testing.T) {
			t.Parallel()
			ns := netnstest.New(t, "sg-nft")
			n.NetNS = ns.FD(t)
			ns.Run(t, "nft", "add table ip other { chain pre { type nat hook prerouting priority dstnat - 5; tcp dport 9999 counter; }; }")
			if _, err := exec.LookPath("iptables"); err == nil {
				ns.Run(t, "iptables", "-t", "nat", "-A", "PREROUTING", "-p", "udp", "--dport", "53", "-j", "RETURN")
			}
			if _, err := exec.LookPath("ip6tables"); err == nil {
				ns.Run(t, "ip6tables", "-t", "nat", "-A", "PREROUTING", "-p", "udp", "--dport", "53", "-j", "RETURN")
			}
			before := takeSnapshot(t, ns)
			rules := transparent.Rules{InboundPorts: []uint16{20880, 20881, 20880}, ProxyPort: 15006}
			listTable := func() string { return ns.Run(t, "nft", "list", "table", n.Family(), transparent.NFTTable) }

			script := n.Script(rules)
			wantScript := "table " + n.Family() + " stormgate {\n\tchain inbound {\n" +
				"\t\ttype nat hook prerouting priority dstnat; policy accept;\n" +
				"\t\ttcp dport 20880 redirect to :15006\n\t\ttcp dport 20881 redirect to :15006\n\t}\n}\n"
			if script != wantScript {
				t.Fatalf("Script:\n%s\nwant\n%s", script, wantScript)
			}
			changed, err := n.Install(rules)
			if err != nil || !changed {
				t.Fatalf("install: changed=%v err=%v", changed, err)
			}
			if got := listTable(); got != script {
				t.Fatalf("nft list table after install:\n%s\nScript (the dry run) said:\n%s", got, script)
			}
			if got, err := n.List(); err != nil || got != script {
				t.Fatalf("List() = %q, %v; want the script", got, err)
			}
			once := takeSnapshot(t, ns)
			if changed, err = n.Install(rules); err != nil || changed {
				t.Fatalf("second install: changed=%v err=%v, want no change", changed, err)
			}
			takeSnapshot(t, ns).diff(t, once)

			// Other ports: replaced whole.
			other := transparent.Rules{InboundPorts: []uint16{20990}, ProxyPort: 15007}
			if changed, err = n.Install(other); err != nil || !changed {
				t.Fatalf("install other ports: changed=%v err=%v", changed, err)
			}
			if got := listTable(); got != n.Script(other) {
				t.Fatalf("after re-install with other ports:\n%s\nwant\n%s", got, n.Script(other))
			}
			// Someone else's rule in Stormgate's chain: Install puts the table back as it should be.
			ns.Run(t, "nft", "add rule "+n.Family()+" stormgate inbound udp dport 53 counter")
			if got, _ := n.List(); !strings.Contains(got, "# rule not written by Stormgate") {
				t.Fatalf("List does not show the foreign rule:\n%s", got)
			}
			if changed, err = n.Install(rules); err != nil || !changed {
				t.Fatalf("install over a tampered chain: changed=%v err=%v", changed, err)
			}
			if got := listTable(); got != script {
				t.Fatalf("after repair:\n%s\nwant\n%s", got, script)
			}

			if changed, err = n.Clean(); err != nil || !changed {
				t.Fatalf("clean: changed=%v err=%v", changed, err)
			}
			takeSnapshot(t, ns).diff(t, before)
			if changed, err = n.Clean(); err != nil || changed {
				t.Fatalf("second clean: changed=%v err=%v", changed, err)
			}
			if got, err := n.List(); err != nil || got != "" {
				t.Fatalf("List after clean = %q, %v", got, err)
			}
		})
	}
}

// TestNetnsNFTCleanRemovesBothFamilies: a namespace left with tables from an IPv4-only run and a
// dual-stack run is cleaned of both by one Clean, whichever family the cleaner was set to.
func TestNetnsNFTCleanRemovesBothFamilies(t *testing.T) {
	t.Parallel()
	netnstest.RequireRoot(t)
	netnstest.RequireTools(t, "ip", "nft")
	ns := netnstest.New(t, "sg-nft")
	before := ns.Run(t, "nft", "list", "ruleset")
	fd := ns.FD(t)
	r := transparent.Rules{InboundPorts: []uint16{20880}, ProxyPort: 15006}
	for _, n := range []transparent.NFT{{NetNS: fd}, {NetNS: fd, IPv4Only: true}} {
		if _, err := n.Install(r); err != nil {
			t.Fatal(err)
		}
	}
	if changed, err := (transparent.NFT{NetNS: fd, IPv4Only: true}).Clean(); err != nil || !changed {
		t.Fatalf("clean: changed=%v err=%v", changed, err)
	}
	if after := ns.Run(t, "nft", "list", "ruleset"); after != before {
		t.Fatalf("clean left:\n%s", after)
	}
}

// TestNetnsNFTRedirectDualStack proves the nftables rules do their job for both address families: a
// client in another namespace dials the pod's provider port over IPv4 and over IPv6, lands on one
// dual-stack [::] proxy listener, and OriginalDst names the address and port it dialed. Another port is
// not redirected. After Clean the same dials are refused: nothing is left that steers traffic.
func TestNetnsNFTRedirectDualStack(t *testing.T) {
	t.Parallel()
	netnstest.RequireRoot(t)
	netnstest.RequireTools(t, "ip")
	pod, client := netnstest.New(t, "sg-pod"), netnstest.New(t, "sg-cli")
	pod4, pod6 := netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("2001:db8:6::2")
	cliIf, podIf := netnstest.Link(t, client, pod, netip.MustParsePrefix("198.18.0.1/30"), netip.MustParsePrefix("198.18.0.2/30"))
	client.AddAddr(t, cliIf, netip.MustParsePrefix("2001:db8:6::1/64"))
	pod.AddAddr(t, podIf, netip.PrefixFrom(pod6, 64))

	var ln *net.TCPListener
	if err := pod.Do(func() error {
		l, err := net.Listen("tcp", "[::]:0")
		if err == nil {
			ln = l.(*net.TCPListener)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	proxyPort := uint16(ln.Addr().(*net.TCPAddr).Port)
	n := transparent.NFT{NetNS: pod.FD(t)}
	if _, err := n.Install(transparent.Rules{InboundPorts: []uint16{20880}, ProxyPort: proxyPort}); err != nil {
		t.Fatal(err)
	}

	dial := func(addr netip.AddrPort) (net.Conn, error) {
		var c net.Conn
		err := client.Do(func() (err error) {
			c, err = net.DialTimeout("tcp", addr.String(), 3*time.Second)
			return err
		})
		return c, err
	}
	accept := func() *net.TCPConn {
		t.Helper()
		ln.SetDeadline(time.Now().Add(3 * time.Second))
		c, err := ln.AcceptTCP()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	for _, a := range []netip.Addr{pod4, pod6} {
		dst := netip.AddrPortFrom(a, 20880)
		cc, err := dial(dst)
		if err != nil {
			t.Fatalf("dial %v (redirected): %v", dst, err)
		}
		defer cc.Close()
		sc := accept()
		defer sc.Close()
		got, err := transparent.OriginalDstConn(sc)
		if err != nil || got != dst {
			t.Fatalf("OriginalDst of a connection to %v = %v, %v", dst, got, err)
		}
		// Not in the rules: not redirected (nothing listens there).
		if c, err := dial(netip.AddrPortFrom(a, 20881)); err == nil {
			c.Close()
			t.Fatalf("dial %v:20881 reached something: only 20880 is redirected", a)
		} else if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("dial %v:20881: %v, want connection refused", a, err)
		}
	}

	if _, err := n.Clean(); err != nil {
		t.Fatal(err)
	}
	for _, a := range []netip.Addr{pod4, pod6} {
		c, err := dial(netip.AddrPortFrom(a, 20880))
		if err == nil {
			c.Close()
			t.Fatalf("dial %v:20880 after clean succeeded: traffic is still redirected", a)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("dial %v:20880 after clean: %v, want connection refused", a, err)
		}
	}
}
