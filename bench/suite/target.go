package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Target kinds: how consumers reach the provider.
const (
	direct    = "direct"
	haproxy   = "haproxy"
	stormgate = "stormgate"
	// stormgateNoLabels is Stormgate with per-method metrics off (metrics.max_methods: 0).
	stormgateNoLabels = "stormgate-nolabels"
	// stormgateBase is the sidecar built from another commit (BENCH_BASE_REF in bench/run.sh), so
	// that a change's cost is measured in the same alternating rounds as the change itself.
	stormgateBase = "stormgate-base"
	baseline      = "baseline" // accept storm only: the incident-like listener
)

// targets is the order of every side-by-side table.
var targets = []string{direct, haproxy, stormgate}

// Provider kinds.
const (
	fastProvider    = "fast"    // stormbench provider (package peer)
	dubboGoProvider = "dubbogo" // interop/cmd/dgprovider: dubbo-go v3.3.0
	// dubboGoTriple is dgprovider --protocol triple: dubbo-go v3.3.0's Triple (h2c) provider,
	// hessian2 without IDL, as dubbo-go users run it.
	dubboGoTriple = "dubbogo-triple"
)

// Protocols a provider speaks (loadSpec.Protocol, provider.proto).
const (
	protoDubbo  = "dubbo"
	protoTriple = "triple"
)

// haproxyProcs is how many HAProxy processes share the listening port (SO_REUSEPORT). One
// process would need 2 fds per consumer (client + server side): 10,000 consumers need 20,000+
// fds, above this machine's per-process limit of 20,000. Two single-threaded processes use the
// same two cores as one process with nbthread 2.
const haproxyProcs = 2

// stormgateUpstreamConns is M, Stormgate's connections to the provider, in every scenario.
const stormgateUpstreamConns = 4

// haproxyMaxconn is each HAProxy process's maxconn: 2 fds per connection must fit in 20,000.
const haproxyMaxconn = 9000

// provider is a running provider.
type provider struct {
	kind  string
	proto string // protoDubbo or protoTriple
	proc  *Proc
	addr  string // host:port consumers or proxies dial
	port  int
}

// dubbogoSessions is the dubbo-go provider's session-number, its cap on connections (default 700).
// Far above the 10,000 consumers: sessions of a run that just ended may not all be gone yet when
// the next run connects.
const dubbogoSessions = 40000

// startProvider starts a provider on 127.0.0.1:port (port 0: a free one) in ns ("" = host), to live at
// most bound (procSpec.bound; 0: the suite's default).
func (s *Suite) startProvider(ctx context.Context, kind string, port int, ns string, bound time.Duration, extra ...string) (*provider, error) {
	var sp procSpec
	switch kind {
	case fastProvider:
		sp = procSpec{name: "provider", netns: ns,
			argv: append([]string{s.bins.stormbench, "provider", "--listen", "127.0.0.1:" + strconv.Itoa(port),
				"--log-level", "warn"}, extra...),
			readyRe: regexp.MustCompile(`"addr":"([^"]+)"`)}
	case dubboGoProvider, dubboGoTriple:
		if port == 0 {
			var err error
			if port, err = freePort(); err != nil {
				return nil, err
			}
		}
		sp = procSpec{name: "dgprovider", netns: ns,
			argv: append([]string{s.bins.dgprovider, "--port", strconv.Itoa(port),
				"--session-number", strconv.Itoa(dubbogoSessions), "--log-level", "error"}, extra...),
			readyRe: regexp.MustCompile(`^READY (\d+)`)}
		if kind == dubboGoTriple {
			sp.name = "dgprovider-triple"
			sp.argv = append(sp.argv, "--protocol", protoTriple)
		}
	default:
		return nil, fmt.Errorf("unknown provider %q", kind)
	}
	sp.bound = bound
	p, err := s.start(ctx, sp)
	if err != nil {
		return nil, err
	}
	m, err := p.Ready(ctx, 60*time.Second)
	if err != nil {
		p.Kill()
		return nil, err
	}
	pr := &provider{kind: kind, proto: protoDubbo, proc: p}
	if kind == dubboGoTriple {
		pr.proto = protoTriple
	}
	if kind == fastProvider {
		pr.addr = m[1]
		_, ps, _ := net.SplitHostPort(pr.addr)
		pr.port, _ = strconv.Atoi(ps)
	} else {
		pr.port = port
		pr.addr = "127.0.0.1:" + strconv.Itoa(port)
	}
	return pr, nil
}

// proxy is what consumers dial: the provider itself (direct), HAProxy, or Stormgate.
type proxy struct {
	kind    string
	proto   string // what its provider speaks (protoDubbo, protoTriple)
	addr    string
	port    int
	procs   []*Proc
	metrics string      // Stormgate's metrics listener (host namespace only)
	admin   string      // Stormgate's admin listener (host namespace only): /debug/pprof
	counts  chan uint64 // hbfloor: the counts it prints on SIGUSR1
}

// proxyOpts tune a proxy for a scenario.
type proxyOpts struct {
	ns string
	// HAProxy only: per-process listen backlog and session rate limit (0: HAProxy's defaults).
	backlog, rateLimit int
	// port to listen on; 0 picks a free one (must be set inside a namespace).
	port int
	// Stormgate's log level; "" means warn.
	logLevel string
	// bound is the longest the proxy may live, whatever its kind; 0 means the suite's default (10 minutes).
	bound time.Duration
}

// pids are the proxy's process ids (none for direct).
func (p *proxy) pids() []int {
	out := make([]int, len(p.procs))
	for i, pr := range p.procs {
		out[i] = pr.PID
	}
	return out
}

// alive reports whether every proxy process is still running.
func (p *proxy) alive() bool {
	for _, pr := range p.procs {
		if pr.Exited() {
			return false
		}
	}
	return true
}

func (p *proxy) stop() {
	for _, pr := range p.procs {
		pr.Stop(3 * time.Second)
	}
}

// startPair starts a provider of providerKind on a free port and a proxy of kind tg in
// front of it, with default options; stop ends both (the proxy first).
func (s *Suite) startPair(ctx context.Context, providerKind, tg string, bound time.Duration) (prov *provider, px *proxy, stop func(), err error) {
	if prov, err = s.startProvider(ctx, providerKind, 0, "", bound); err != nil {
		return nil, nil, nil, err
	}
	if px, err = s.startProxy(ctx, tg, prov, proxyOpts{bound: bound}); err != nil {
		prov.proc.Kill()
		return nil, nil, nil, err
	}
	return prov, px, func() { px.stop(); prov.proc.Kill() }, nil
}

// startProxy starts a proxy of the given kind in front of upstream.
func (s *Suite) startProxy(ctx context.Context, kind string, up *provider, o proxyOpts) (*proxy, error) {
	if kind == direct {
		return &proxy{kind: direct, proto: up.proto, addr: up.addr, port: up.port}, nil
	}
	port := o.port
	if port == 0 {
		var err error
		if port, err = freePort(); err != nil {
			return nil, err
		}
	}
	px := &proxy{kind: kind, proto: up.proto, port: port, addr: "127.0.0.1:" + strconv.Itoa(port)}
	switch kind {
	case haproxy:
		cfg := filepath.Join(s.out, fmt.Sprintf("haproxy-%d.cfg", port))
		if err := os.WriteFile(cfg, []byte(haproxyConfig(port, up, o)), 0o644); err != nil {
			return nil, err
		}
		for i := range haproxyProcs {
			p, err := s.start(ctx, procSpec{name: fmt.Sprintf("haproxy%d", i), netns: o.ns,
				argv: []string{s.bins.haproxy, "-db", "-f", cfg}, bound: o.bound})
			if err != nil {
				px.stop()
				return nil, err
			}
			px.procs = append(px.procs, p)
		}
		if err := waitListening(ctx, px.procs[0], port, haproxyProcs); err != nil {
			px.stop()
			return nil, err
		}
	case stormgate, stormgateNoLabels, stormgateBase:
		lvl := o.logLevel
		if lvl == "" {
			lvl = "warn"
		}
		bin := s.bins.sidecar
		if kind == stormgateBase {
			bin = s.bins.sidecarBase
		}
		argv := []string{bin, "run", "--listen", px.addr, "--upstream", up.addr,
			"--upstream-conns", strconv.Itoa(stormgateUpstreamConns), "--log-level", lvl}
		if up.proto == protoTriple {
			argv = append(argv, "--upstream-protocol", protoTriple)
		}
		if kind == stormgateNoLabels {
			cfg := filepath.Join(s.out, fmt.Sprintf("stormgate-nolabels-%d.yaml", port))
			if err := os.WriteFile(cfg, []byte("metrics: {max_methods: 0}\n"), 0o644); err != nil {
				return nil, err
			}
			argv = append(argv, "--config", cfg)
		}
		if o.ns == "" {
			mp, err1 := freePort()
			ap, err2 := freePort()
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("no free port: %v %v", err1, err2)
			}
			px.metrics = "127.0.0.1:" + strconv.Itoa(mp)
			px.admin = "127.0.0.1:" + strconv.Itoa(ap)
			argv = append(argv, "--metrics", px.metrics, "--admin", px.admin)
		} else {
			argv = append(argv, "--metrics", "127.0.0.1:15090", "--admin", "127.0.0.1:15000")
		}
		p, err := s.start(ctx, procSpec{name: "stormgate", netns: o.ns, argv: argv, bound: o.bound})
		if err != nil {
			return nil, err
		}
		px.procs = []*Proc{p}
		if px.metrics != "" {
			err = waitReady(ctx, p, px.metrics)
		} else {
			err = waitListening(ctx, p, port, 1)
			if err == nil {
				err = waitFor(ctx, p, 30*time.Second, "stormgate's upstream connections", func() bool {
					n, err := tcpState(p.PID, "01", up.port, true)
					return err == nil && n >= 1
				})
			}
		}
		if err != nil {
			px.stop()
			return nil, err
		}
	case hbFloor, fwdFloor, npFloor, npFwd:
		if err := s.startFloor(ctx, px, up, o); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("unknown proxy %q", kind)
	}
	return px, nil
}

// haproxyConfig is HAProxy's configuration: no health checks, no logging, each process
// single-threaded (haproxyProcs of them share the port). In front of a Dubbo provider it runs in
// TCP mode; in front of a Triple provider in HTTP mode with HTTP/2 without TLS on both sides, the
// way HAProxy proxies gRPC: it answers consumers' PINGs itself and multiplexes their streams onto
// its connections to the provider, reused across consumers (http-reuse always, its most
// economical setting: with the default, safe, each consumer's first call opens a connection of its
// own).
func haproxyConfig(port int, up *provider, o proxyOpts) string {
	var b strings.Builder
	mode, h2, reuse := "tcp", "", ""
	if up.proto == protoTriple {
		mode, h2, reuse = "http", " proto h2", "    http-reuse always\n"
	}
	fmt.Fprintf(&b, "# written by bench/suite\nglobal\n    nbthread 1\n    maxconn %d\n\n", haproxyMaxconn)
	fmt.Fprintf(&b, "defaults\n    mode %s\n    timeout connect 1s\n    timeout client 5m\n    timeout server 5m\n\n", mode)
	fmt.Fprintf(&b, "frontend consumers\n    bind 127.0.0.1:%d%s\n    maxconn %d\n", port, h2, haproxyMaxconn)
	if o.backlog > 0 {
		fmt.Fprintf(&b, "    backlog %d\n", o.backlog)
	}
	if o.rateLimit > 0 {
		fmt.Fprintf(&b, "    rate-limit sessions %d\n", o.rateLimit)
	}
	fmt.Fprintf(&b, "    default_backend provider\n\nbackend provider\n%s    server provider %s%s\n", reuse, up.addr, h2)
	return b.String()
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
