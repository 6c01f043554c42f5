package proxytest

import (
	"testing"
	"time"

	"github.com/stormgate/stormgate/internal/testkit"
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
// as admission does, without pacing; it returns the address (testkit.ServeLoopback with srv.ServeFD).
// The test's cleanup stops it.
func ServeLoopback(t testing.TB, srv *proxy.Server) string {
	t.Helper()
	return testkit.ServeLoopback(t, srv.ServeFD)
}
