package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stormgate/stormgate/peer"
	"github.com/stormgate/stormgate/transparent/netnstest"
)

// Issue 6's transparent-mode scenarios run in two throwaway network namespaces joined
// by a veth pair: "pod" (the provider, Stormgate and its redirect rules, as in a
// Kubernetes pod) and "cli" (the consumers). The link is dual stack (198.18.0.0/30 and
// 2001:db8:1::/64, issue 13), as are the rules and Stormgate's [::] listener. Nothing
// here touches the host's own network namespace. Root is required; without it the
// tests skip and say so.
const (
	tpProviderPort = 20880 // the provider's usual port, as dubbo-go's default
	tpProxyPort    = 15006 // Stormgate's transparent listener (Istio's inbound port)
	tpUpstreamM    = 3     // upstream.connections: not the default 4, so the file visibly drives it
	tpService      = "org.stormgate.Greeter"
)

var (
	tpPodPrefix  = netip.MustParsePrefix("198.18.0.1/30")
	tpCliPrefix  = netip.MustParsePrefix("198.18.0.2/30")
	tpPodPrefix6 = netip.MustParsePrefix("2001:db8:1::1/64")
	tpCliPrefix6 = netip.MustParsePrefix("2001:db8:1::2/64")
)

// tpPod is a pod network namespace running `stormbench provider` on 0.0.0.0:20880 and
// `sidecar run --transparent --listen [::]:15006`, with the redirect rules installed
// by `sidecar iptables` (nftables, IPv4 and IPv6), plus a client namespace linked to it.
type tpPod struct {
	pod, cli    *netnstest.Namespace
	addr, addr6 netip.Addr  // the pod's addresses, what consumers dial
	provider    *proc       // `stormbench provider` (Dubbo); nil with tpOptions.triple
	h2          *h2Provider // the h2c provider, in this process with its listener in the pod; nil for Dubbo
	sidecar     *sidecar    // scraped over an HTTP client whose sockets live in the pod namespace
	rulesBefore tpRuleset   // the pod's packet filter before `sidecar iptables`
}

// tpRuleset is a namespace's packet filter as operators list it.
type tpRuleset struct{ nft, nat4, nat6 string }

func (p *tpPod) ruleset(t *testing.T) tpRuleset {
	t.Helper()
	return tpRuleset{
		nft:  p.pod.Run(t, "nft", "list", "ruleset"),
		nat4: p.pod.Run(t, "iptables", "-t", "nat", "-S"),
		nat6: p.pod.Run(t, "ip6tables", "-t", "nat", "-S"),
	}
}

// clean runs `sidecar iptables --clean` and checks that the pod's rules are exactly
// what they were before the install.
func (p *tpPod) clean(t *testing.T) {
	t.Helper()
	t.Logf("sidecar iptables --clean:\n%s", p.iptables(t, "--clean"))
	if after := p.ruleset(t); after != p.rulesBefore {
		t.Errorf("after --clean the pod's rules are\n%+v\nwant exactly what they were before install:\n%+v", after, p.rulesBefore)
	}
}

// tpRequire skips (or, under CI, fails) when root or a needed tool is missing.
func tpRequire(t *testing.T) {
	t.Helper()
	netnstest.RequireRoot(t)
	netnstest.RequireTools(t, "ip", "nft", "iptables", "ip6tables", "ss")
}

// startTransparentPod builds the two namespaces, installs the rules for redirectPorts
// (the --inbound-ports of `sidecar iptables`), and starts the provider and a
// transparent sidecar whose settings file allows only allowPorts. Everything is torn
// down by t.Cleanup, in reverse order: processes first, then the namespaces.
func startTransparentPod(t *testing.T, redirectPorts string, allowPorts []int) *tpPod {
	t.Helper()
	return startTransparentPodWith(t, tpOptions{redirectPorts: redirectPorts, allowPorts: allowPorts})
}

// tpOptions is a transparent pod's make-up: what startTransparentPod takes, and whether the provider
// speaks Triple (h2c) rather than Dubbo.
type tpOptions struct {
	redirectPorts string
	allowPorts    []int
	// triple: the provider is an h2Provider, and the sidecar runs with h2AttackConfig's settings
	// (upstream.protocol triple, 2 connections) instead of tpUpstreamM Dubbo connections.
	triple bool
}

func startTransparentPodWith(t *testing.T, o tpOptions) *tpPod {
	t.Helper()
	redirectPorts, allowPorts := o.redirectPorts, o.allowPorts
	tpRequire(t)
	// startProc sets Pdeathsig, which Linux ties to the *thread* that forked the child,
	// not to the process (golang/go#27505). netnstest.Do ends the OS thread it switched
	// into a namespace, and the Go scheduler may have run this goroutine on that very
	// thread earlier: the provider or the sidecar then got SIGKILL mid-test (seen: the
	// provider "closed" all of Stormgate's connections; a dial to the redirected port
	// was refused because the sidecar was gone). Locking the test goroutine to its
	// thread keeps Do's goroutines off it; it is never unlocked, so the thread ends with
	// the test's goroutine, after t.Cleanup has killed and reaped every child.
	runtime.LockOSThread()
	p := &tpPod{addr: tpPodPrefix.Addr(), addr6: tpPodPrefix6.Addr()}
	p.pod = netnstest.New(t, "sg-pod")
	p.cli = netnstest.New(t, "sg-cli")
	podIf, cliIf := netnstest.Link(t, p.pod, p.cli, tpPodPrefix, tpCliPrefix)
	p.pod.AddAddr(t, podIf, tpPodPrefix6)
	p.cli.AddAddr(t, cliIf, tpCliPrefix6)

	// The init container's step, as it runs in a pod: before any other container.
	p.rulesBefore = p.ruleset(t)
	out := p.iptables(t, "--inbound-ports", redirectPorts, "--proxy-port", strconv.Itoa(tpProxyPort))
	if !strings.Contains(out, "table inet stormgate {") {
		t.Fatalf("`sidecar iptables` did not install the dual-stack table:\n%s", out)
	}
	for _, port := range strings.Split(redirectPorts, ",") {
		want := fmt.Sprintf("\t\ttcp dport %s redirect to :%d", port, tpProxyPort)
		if !strings.Contains(out, want+"\n") {
			t.Fatalf("`sidecar iptables` output lacks %q:\n%s", want, out)
		}
	}
	t.Cleanup(func() {
		// Only matters if the test stopped before its own --clean; the namespace's
		// deletion would drop the rules anyway.
		_ = p.pod.Command(context.Background(), bins.sidecar, "iptables", "--clean").Run()
	})

	ports := make([]string, len(allowPorts))
	for i, port := range allowPorts {
		ports[i] = strconv.Itoa(port)
	}
	cfg := fmt.Sprintf("listener: { transparent: true, inbound_ports: [%s] }\n", strings.Join(ports, ", "))
	if o.triple {
		var ln net.Listener
		if err := p.pod.Do(func() (err error) {
			ln, err = net.Listen("tcp", fmt.Sprintf("0.0.0.0:%d", tpProviderPort))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		p.h2 = startH2ProviderOn(t, ln)
		cfg += h2AttackConfig
	} else {
		p.provider = startProc(t, "provider", "ip", "netns", "exec", p.pod.Name, bins.stormbench,
			"provider", "--listen", fmt.Sprintf("0.0.0.0:%d", tpProviderPort), "--log-level", "warn")
		p.provider.waitJSONLine(t, true, 20*time.Second, `its {"addr": ...} line`, func(m map[string]any) bool {
			_, ok := m["addr"].(string)
			return ok
		})
		cfg += fmt.Sprintf("upstream: { connections: %d }\n", tpUpstreamM)
	}
	cfgPath := filepath.Join(t.TempDir(), "stormgate.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bins.sidecar, "validate", cfgPath).CombinedOutput(); err != nil || !strings.Contains(string(out), ": ok") {
		t.Fatalf("sidecar validate %s: %v\n%s\n--- file:\n%s", cfgPath, err, out, cfg)
	}
	sp := startProc(t, "sidecar", "ip", "netns", "exec", p.pod.Name, bins.sidecar, "run",
		"--transparent", "--listen", fmt.Sprintf("[::]:%d", tpProxyPort), "--config", cfgPath,
		"--metrics", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--log-level", "info")
	p.sidecar = &sidecar{proc: sp, configPath: cfgPath, http: &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{DialContext: tpDialIn(p.pod)},
	}}
	started := sp.waitJSONLine(t, false, 20*time.Second, `"stormgate started"`, func(m map[string]any) bool {
		return m["msg"] == "stormgate started"
	})
	p.sidecar.listen, _ = started["listen"].(string)
	if started["transparent"] != true || p.sidecar.listen != fmt.Sprintf("[::]:%d", tpProxyPort) {
		t.Fatalf("sidecar started with listen=%v transparent=%v, want [::]:%d and true",
			started["listen"], started["transparent"], tpProxyPort)
	}
	m := sp.waitJSONLine(t, false, 10*time.Second, `metrics "http listener started"`, func(m map[string]any) bool {
		return m["msg"] == "http listener started" && m["listener"] == "metrics"
	})
	p.sidecar.metrics, _ = m["address"].(string)
	if p.sidecar.metrics == "" {
		t.Fatal("metrics address not found in the sidecar's log")
	}
	return p
}

// tpDialIn returns a DialContext whose sockets are created inside ns, so the test
// process can reach the sidecar's loopback-only metrics listener in the pod.
func tpDialIn(ns *netnstest.Namespace) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := ns.Do(func() (err error) {
			var d net.Dialer
			c, err = d.DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
}

// iptables runs `sidecar iptables ARGS` in the pod namespace and returns its output.
func (p *tpPod) iptables(t *testing.T, args ...string) string {
	t.Helper()
	out, err := p.pod.Command(context.Background(), append([]string{bins.sidecar, "iptables"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("sidecar iptables %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// dial opens a consumer connection to the pod's IPv4 address from inside the client
// namespace (the socket stays there; the Client may be used from any goroutine).
func (p *tpPod) dial(t *testing.T, port uint16) (*peer.Client, error) {
	t.Helper()
	return p.dialAddr(t, netip.AddrPortFrom(p.addr, port))
}

// dialAddr is dial to any of the pod's addresses (p.addr or p.addr6).
func (p *tpPod) dialAddr(t *testing.T, addr netip.AddrPort) (*peer.Client, error) {
	t.Helper()
	var c *peer.Client
	err := p.cli.Do(func() (err error) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		c, err = peer.Dial(ctx, addr.String(), 0)
		return err
	})
	if c != nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

// providerPeers lists the remote addresses of the provider's established connections
// on :20880, as `ss` in the pod shows them.
func (p *tpPod) providerPeers(t *testing.T) []string {
	t.Helper()
	out := p.pod.Run(t, "ss", "-Htn", "state", "established", fmt.Sprintf("( sport = :%d )", tpProviderPort))
	var peers []string
	for line := range strings.Lines(out) {
		// With a state filter ss prints: Recv-Q Send-Q Local:Port Peer:Port
		f := strings.Fields(line)
		if len(f) < 4 {
			continue
		}
		// The provider listens on all addresses dual stack, so IPv4 peers show v4-mapped.
		if ap, err := netip.ParseAddrPort(f[3]); err == nil {
			peers = append(peers, netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String())
		} else {
			peers = append(peers, f[3])
		}
	}
	return peers
}

// stopProvider stops the provider at once (SIGINT) and returns the counters it prints
// on exit.
func (p *tpPod) stopProvider(t *testing.T) peer.ProviderStats {
	t.Helper()
	return stopProvider(t, p.provider)
}

// stopProvider stops a `stormbench provider` process at once (SIGINT) and returns the
// counters it prints on exit.
func stopProvider(t *testing.T, pr *proc) peer.ProviderStats {
	t.Helper()
	if err := pr.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := pr.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("provider exited with status %d", code)
	}
	lines := pr.stdoutLines()
	for i := len(lines) - 1; i >= 0; i-- {
		var st peer.ProviderStats
		if strings.Contains(lines[i], `"conns_accepted"`) && json.Unmarshal([]byte(lines[i]), &st) == nil {
			return st
		}
	}
	t.Fatalf("provider printed no stats line; stdout:\n%s", strings.Join(lines, "\n"))
	return peer.ProviderStats{}
}
