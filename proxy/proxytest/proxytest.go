package proxytest

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stormgate/stormgate/proxy"
)

// Config is the shipped defaults (settings.Defaults) as a proxy.Config, with the provider at upstream.
// Tests change what they exercise.
func Config(upstream string) proxy.Config {
	return proxy.Config{
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
		AccessLog:                 proxy.AccessLogConfig{Failed: true, SlowThreshold: time.Second, MaxPerSecond: 100},
		HTTP2:                     proxy.HTTP2Config{MaxConcurrentStreams: 100, InitialWindowSize: 65535, MaxHeaderListSize: 64 << 10},
	}
}

// ServeLoopback listens on 127.0.0.1 and hands every accepted connection to srv as a non-blocking fd,
// as admission does, without pacing; it returns the address. The listening socket is blocking and
// served by one goroutine; the test's cleanup shuts it down (shutdown(2) wakes it) and waits for it.
func ServeLoopback(t testing.TB, srv *proxy.Server) string {
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
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
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
		wg.Wait()
		_ = unix.Close(fd)
	})
	return fmt.Sprintf("127.0.0.1:%d", sa.(*unix.SockaddrInet4).Port)
}

// WaitFor polls cond every 5 ms until it holds, failing t after d.
func WaitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
