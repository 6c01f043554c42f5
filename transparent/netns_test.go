package transparent_test

import (
	"context"
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

// TestNetnsInstallTwiceCleanOnce runs the real iptables in a fresh namespace, for every backend present:
// installing twice leaves the same table as installing once, and Clean restores `iptables -t nat -S`
// byte for byte, including a rule Stormgate did not write.
func TestNetnsInstallTwiceCleanOnce(t *testing.T) {
	t.Parallel()
	netnstest.RequireRoot(t)
	netnstest.RequireTools(t, "ip", "iptables")
	for _, prog := range []string{"iptables", "iptables-nft", "iptables-legacy", "ip6tables"} {
		t.Run(prog, func(t *testing.T) {
			t.Parallel() // each in its own namespace; most of the time is namespace teardown
			if _, err := exec.LookPath(prog); err != nil {
				t.Skipf("skipped: %s not installed", prog)
			}
			ns := netnstest.New(t, "sg-ipt")
			ctx := context.Background()
			run := transparent.ExecRunner{Argv: []string{"ip", "netns", "exec", ns.Name, prog}}
			table := func() string { return ns.Run(t, prog, "-t", "nat", "-S") }

			ns.Run(t, prog, "-t", "nat", "-A", "PREROUTING", "-p", "udp", "--dport", "53", "-j", "RETURN")
			before := table()
			rules := transparent.Rules{InboundPorts: []uint16{20880, 20881}, ProxyPort: 15006}

			changed, err := transparent.Install(ctx, run, rules)
			if err != nil || !changed {
				t.Fatalf("install: changed=%v err=%v", changed, err)
			}
			once := table()
			for _, want := range []string{
				"-N STORMGATE_INBOUND",
				"-A PREROUTING -p tcp -j STORMGATE_INBOUND",
				"-A STORMGATE_INBOUND -p tcp -m tcp --dport 20880 -j REDIRECT --to-ports 15006",
				"-A STORMGATE_INBOUND -p tcp -m tcp --dport 20881 -j REDIRECT --to-ports 15006",
			} {
				if !strings.Contains(once, want+"\n") {
					t.Errorf("table after install lacks %q:\n%s", want, once)
				}
			}
			changed, err = transparent.Install(ctx, run, rules)
			if err != nil || changed {
				t.Fatalf("second install: changed=%v err=%v, want no change", changed, err)
			}
			if twice := table(); twice != once {
				t.Fatalf("install twice != install once:\n%s\nvs\n%s", twice, once)
			}

			changed, err = transparent.Clean(ctx, run, transparent.DefaultChain)
			if err != nil || !changed {
				t.Fatalf("clean: changed=%v err=%v", changed, err)
			}
			if after := table(); after != before {
				t.Fatalf("clean left\n%s\nwant exactly\n%s", after, before)
			}
			if changed, err = transparent.Clean(ctx, run, transparent.DefaultChain); err != nil || changed {
				t.Fatalf("second clean: changed=%v err=%v", changed, err)
			}
		})
	}
}

// TestNetnsRedirectAndOriginalDst proves the rules do their job: a client in another namespace dials the
// pod's provider port, lands on the proxy listener, and OriginalDst names the port it dialed. After
// Clean, the same dial is refused (nothing listens on the provider port).
func TestNetnsRedirectAndOriginalDst(t *testing.T) {
	t.Parallel()
	netnstest.RequireRoot(t)
	netnstest.RequireTools(t, "ip", "iptables")
	pod, client := netnstest.New(t, "sg-pod"), netnstest.New(t, "sg-cli")
	podAddr := netip.MustParseAddr("198.18.0.2")
	netnstest.Link(t, client, pod, netip.MustParsePrefix("198.18.0.1/30"), netip.MustParsePrefix("198.18.0.2/30"))

	for _, network := range []string{"tcp4", "tcp"} { // "tcp" on [::] is dual stack: IPv4 arrives v4-mapped
		t.Run(network, func(t *testing.T) {
			listenAddr := "0.0.0.0:0"
			if network == "tcp" {
				listenAddr = "[::]:0"
			}
			var ln net.Listener
			if err := pod.Do(func() (err error) { ln, err = net.Listen(network, listenAddr); return err }); err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			proxyPort := uint16(ln.Addr().(*net.TCPAddr).Port)
			ctx := context.Background()
			run := transparent.ExecRunner{Argv: []string{"ip", "netns", "exec", pod.Name, "iptables"}}
			rules := transparent.Rules{InboundPorts: []uint16{20880}, ProxyPort: proxyPort}
			if _, err := transparent.Install(ctx, run, rules); err != nil {
				t.Fatal(err)
			}
			cleaned := false
			defer func() {
				if !cleaned {
					transparent.Clean(ctx, run, transparent.DefaultChain)
				}
			}()

			dial := func(port uint16) (net.Conn, error) {
				var c net.Conn
				err := client.Do(func() (err error) {
					c, err = net.DialTimeout("tcp4", netip.AddrPortFrom(podAddr, port).String(), 2*time.Second)
					return err
				})
				return c, err
			}
			accept := func() *net.TCPConn {
				t.Helper()
				ln.(*net.TCPListener).SetDeadline(time.Now().Add(2 * time.Second))
				c, err := ln.Accept()
				if err != nil {
					t.Fatal(err)
				}
				return c.(*net.TCPConn)
			}

			// Redirected: dialed 20880, accepted on the proxy port, original destination 198.18.0.2:20880.
			cc, err := dial(20880)
			if err != nil {
				t.Fatalf("dial redirected port: %v", err)
			}
			defer cc.Close()
			sc := accept()
			defer sc.Close()
			got, err := transparent.OriginalDstConn(sc)
			if err != nil {
				t.Fatal(err)
			}
			if want := netip.AddrPortFrom(podAddr, 20880); got != want {
				t.Fatalf("OriginalDst = %v, want %v", got, want)
			}
			// The fd form answers the same.
			raw, _ := sc.SyscallConn()
			raw.Control(func(fd uintptr) {
				if again, err := transparent.OriginalDst(int(fd)); err != nil || again != got {
					t.Errorf("OriginalDst(fd) = %v, %v; want %v", again, err, got)
				}
			})

			// Direct to the proxy port: not rewritten, so the answer is the local address itself.
			dc, err := dial(proxyPort)
			if err != nil {
				t.Fatalf("dial proxy port: %v", err)
			}
			defer dc.Close()
			sd := accept()
			defer sd.Close()
			got, err = transparent.OriginalDstConn(sd)
			local := netip.AddrPortFrom(podAddr, proxyPort)
			if err == nil && got != local || err != nil && !errors.Is(err, transparent.ErrNoOriginalDst) {
				t.Fatalf("direct connection: OriginalDst = %v, %v; want %v or ErrNoOriginalDst", got, err, local)
			}

			if _, err := transparent.Clean(ctx, run, transparent.DefaultChain); err != nil {
				t.Fatal(err)
			}
			cleaned = true
			c, err := dial(20880)
			if err == nil {
				c.Close()
				t.Fatal("dial 20880 after clean succeeded: traffic is still redirected")
			}
			if !errors.Is(err, syscall.ECONNREFUSED) {
				t.Fatalf("dial 20880 after clean: %v, want connection refused", err)
			}
		})
	}
}

// TestOriginalDstNotRedirected needs no root: on plain loopback nothing was rewritten, so the kernel either
// has no nat record (ErrNoOriginalDst) or returns the connection's own local address.
func TestOriginalDstNotRedirected(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := transparent.OriginalDstConn(s.(*net.TCPConn))
	local := s.LocalAddr().(*net.TCPAddr).AddrPort()
	if err == nil && got != local || err != nil && !errors.Is(err, transparent.ErrNoOriginalDst) {
		t.Fatalf("OriginalDst = %v, %v; want %v or ErrNoOriginalDst", got, err, local)
	}

	// Not a TCP/IP socket: a clear error, not garbage.
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fds[0])
	defer syscall.Close(fds[1])
	if _, err := transparent.OriginalDst(fds[0]); err == nil || !strings.Contains(err.Error(), "not TCP/IP") {
		t.Fatalf("unix socket: err = %v", err)
	}
}
