package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"
	"golang.org/x/sys/unix"

	"github.com/stormgate/stormgate/keepalive"
	"github.com/stormgate/stormgate/peer"
	"github.com/stormgate/stormgate/proxy/dubbo"
)

// rawListener accepts non-blocking raw fds the way the admission package does,
// without pacing, so proxy tests do not depend on admission. Its listening socket
// is blocking and served by one goroutine; shutdown(2) wakes it at cleanup.
type rawListener struct {
	fd   int
	addr string
	wg   sync.WaitGroup
}

func listenRaw(t testing.TB, srv *Server) *rawListener {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 4096); err != nil {
		t.Fatal(err)
	}
	sa, _ := unix.Getsockname(fd)
	rl := &rawListener{fd: fd, addr: fmt.Sprintf("127.0.0.1:%d", sa.(*unix.SockaddrInet4).Port)}
	rl.wg.Add(1)
	go func() {
		defer rl.wg.Done()
		for {
			nfd, sa, err := unix.Accept4(fd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
			if err == unix.EINTR || err == unix.ECONNABORTED {
				continue
			}
			if errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE) {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			if err != nil {
				return // shut down
			}
			_ = unix.SetsockoptInt(nfd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
			var remote netip.AddrPort
			if s4, ok := sa.(*unix.SockaddrInet4); ok {
				remote = netip.AddrPortFrom(netip.AddrFrom4(s4.Addr), uint16(s4.Port))
			}
			srv.ServeFD(nfd, remote, netip.AddrPort{})
		}
	}()
	t.Cleanup(func() {
		_ = unix.Shutdown(fd, unix.SHUT_RDWR)
		rl.wg.Wait()
		_ = unix.Close(fd)
	})
	return rl
}

type fixture struct {
	t        testing.TB
	provider *peer.Provider
	srv      *Server
	reg      *prometheus.Registry
	ln       *rawListener
	clk      *keepalive.ManualClock // set when the fixture runs on a manual clock
}

// advance moves the fixture's manual clock by d in steps of step, and after each
// waits until the wheel has fired what became due and, with answered, until every
// heartbeat Stormgate sent has been answered (a provider that answers at once must
// not look silent because the test moved time faster than loopback).
func (f *fixture) advance(d, step time.Duration, answered bool) {
	f.t.Helper()
	for end := f.clk.Now().Add(d); f.clk.Now().Before(end); {
		// The wheel publishes CoarseNow before it runs the callbacks due: waiting for it
		// let a heartbeat leave after this returned. Advance returns once they have run
		// (and once a concurrent tick of the driver has finished).
		f.clk.Add(step)
		f.srv.wheel.Advance(f.clk.Now())
		if answered {
			waitFor(f.t, 10*time.Second, "heartbeats answered", func() bool {
				for _, p := range f.srv.poolList() {
					for _, sl := range p.slotList() {
						if uc := sl.uc.Load(); uc != nil && uc.npending.Load() != 0 {
							return false
						}
					}
				}
				return true
			})
		}
	}
}

// testConfig is the shipped defaults (settings.Defaults) as a proxy Config, with the
// provider at upstream. Tests change what they exercise.
func testConfig(upstream string) Config {
	return Config{
		Upstream:                  upstream,
		UpstreamConns:             4,
		ConnectTimeout:            time.Second,
		BackoffBase:               50 * time.Millisecond,
		BackoffMax:                2 * time.Second,
		WriteTimeout:              10 * time.Second,
		MaxQueuedBytesPerUpstream: 8 << 20,
		LargeRequestBytes:         64 << 10,
		HoldTimeout:               3 * time.Second,
		HoldMaxTimeout:            30 * time.Second,
		DeadlineMargin:            100 * time.Millisecond,
		HoldMaxRequests:           10000,
		HoldMaxBytes:              64 << 20,
		HoldMaxBytesPerConsumer:   16 << 20,
		NotExecutedRetries:        3,
		NotExecutedWindow:         10 * time.Second,
		DownstreamIdleTimeout:     180 * time.Second,
		UpstreamInterval:          30 * time.Second,
		UpstreamJitter:            0.2,
		UpstreamMaxMissed:         3,
		UpstreamHungTimeout:       5 * time.Second,
		MaxFrameBytes:             8<<20 + 16,
		MaxInflightPerConn:        10000,
		MaxQueuedBytesPerConn:     4 << 20,
		MaxQueuedBytesPerConsumer: 4 << 20,
		MaxRequestAge:             60 * time.Second,
		FrameReadTimeout:          30 * time.Second,
		MaxBufferedBytes:          256 << 20,
		DrainTimeout:              10 * time.Second,
		MaxMethods:                500,
		AccessLog:                 AccessLogConfig{Failed: true, SlowThreshold: time.Second, MaxPerSecond: 100},
		HTTP2:                     HTTP2Config{MaxConcurrentStreams: 100, InitialWindowSize: 65535, MaxHeaderListSize: 64 << 10},
	}
}

// newFixture starts a provider, a Server in front of it (testConfig changed by
// each mod) and a listener.
func newFixture(t testing.TB, pcfg peer.ProviderConfig, mods ...func(*Config)) *fixture {
	t.Helper()
	return newFixtureWith(t, pcfg, Options{}, mods...)
}

// newFixtureWith is newFixture with the Server's Options (a clock); its logger and
// registry are the fixture's.
func newFixtureWith(t testing.TB, pcfg peer.ProviderConfig, opts Options, mods ...func(*Config)) *fixture {
	t.Helper()
	log := zaptest.NewLogger(t)
	if pcfg.Addr == "" {
		pcfg.Addr = "127.0.0.1:0"
	}
	prov, err := peer.NewProvider(pcfg, log.Named("provider"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go prov.Serve(ctx)
	cfg := testConfig(prov.Addr())
	for _, mod := range mods {
		mod(&cfg)
	}
	reg := prometheus.NewRegistry()
	opts.Codec, opts.Logger, opts.Registerer = dubbo.Codec{}, log.Named("proxy"), reg
	srv, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, provider: prov, srv: srv, reg: reg}
	if clk, ok := opts.Clock.(*keepalive.ManualClock); ok {
		f.clk = clk
	}
	f.ln = listenRaw(t, srv)
	t.Cleanup(func() {
		srv.Close()
		prov.Close()
		cancel()
	})
	waitFor(t, 30*time.Second, "upstream connections", func() bool { return f.readyConns() == srv.Config().UpstreamConns })
	return f
}

// readyConns counts the connections that take requests, from their states (not the
// stormgate_upstream_connections gauge, which TestUpstreamGaugesAfterConcurrentChanges
// checks against this).
func (f *fixture) readyConns() int {
	n := 0
	for _, p := range f.srv.poolList() {
		r, _, _ := p.connStates()
		n += r
	}
	return n
}

func (f *fixture) dial(ctx context.Context) *peer.Client {
	f.t.Helper()
	c, err := peer.Dial(ctx, f.ln.addr, 0)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { c.Close() })
	return c
}

// waitSettled waits until no call is in flight after what: a call leaves the count just after its answer
// is written (pending.go), so a consumer can read the answer a moment before.
func waitSettled(t testing.TB, srv *Server, what string) {
	t.Helper()
	waitFor(t, 10*time.Second, "no call in flight after "+what, func() bool { return srv.InFlight() == 0 })
}

func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// awayAddr is a loopback address nothing listens on yet: a provider that is away until the test starts one
// there.
func awayAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
