package proxy

import (
	"context"
	"runtime"
	"sync/atomic"

	"github.com/cloudwego/netpoll"
	"go.uber.org/zap"
)

// DefaultNetpollBuffer is the initial per-connection input buffer (netpoll's
// default is one page); netpoll doubles it for a connection whose reads fill it.
// It is a large part of what an idle consumer costs: with 10,000 idle consumers
// (30 s heartbeats) RSS grew 4,487 bytes per connection at 1,024 and 3,919 at 256
// (measured here with stormbench load; the rest is netpoll's connection, its unused
// output barrier, about 1.3 KiB, which third_party/netpoll's patch 0004 no longer
// keeps per connection, and the session). A heartbeat is 17 bytes and a
// typical request a few hundred.
const DefaultNetpollBuffer = 256

// DefaultNetpollMaxRead bounds what one readable event pulls into a consumer's
// input buffer (third_party/netpoll's Config.MaxReadSize): what a fast sender can
// add before its handler runs, or before a PauseRead (netpoll.ReadPauser) takes
// effect. netpoll's own bound is 8 MiB.
const DefaultNetpollMaxRead = 64 << 10

// ConfigureNetpoll sets netpoll's process-wide options once, before any
// connection exists: the number of pollers (see ResolvePollers), a smaller
// initial input buffer per connection (it grows on demand; idle connections are
// the common case here), the most one read event takes in (DefaultNetpollMaxRead),
// and netpoll's own log lines routed into zap.
func ConfigureNetpoll(log *zap.Logger, bufferSize, pollers int) error {
	w := zap.NewStdLog(log.Named("netpoll")).Writer()
	n := ResolvePollers(pollers, runtime.GOMAXPROCS(0))
	netpollConf.pollers.Store(int32(n))
	netpollConf.inline.Store(true)
	// LinkBufferCap is netpoll's minimum buffer node size (4 KiB by default); without
	// lowering it too, BufferSize below 4 KiB has no effect.
	netpoll.LinkBufferCap = bufferSize
	return netpoll.Configure(netpoll.Config{
		PollerNum:    n,
		BufferSize:   bufferSize,
		MaxReadSize:  DefaultNetpollMaxRead,
		LoggerOutput: w,
		LoadBalance:  netpoll.RoundRobin,
		// Handlers run on the poller goroutine that saw the event: no hand-off to a pooled
		// goroutine (a futex wake-up) per readable connection. Stormgate's handlers never
		// block: frames are cut without waiting for bytes (proxy/framereader.go), writes
		// are non-blocking, and slow paths (a full socket, timers) run elsewhere.
		Runner: func(_ context.Context, f func()) { f() },
	})
}

// MaxPollers bounds `sidecar run --pollers`.
const MaxPollers = 256

// ResolvePollers is the number of netpoll pollers for `sidecar run --pollers n`:
// n itself, or with n = 0 one per P (GOMAXPROCS, which Go sizes to the cores or the
// container's CPU limit). The pollers are the data plane's threads, so with handlers
// inline their number caps throughput. An idle poller is a goroutine parked on Go's
// runtime poller (third_party/netpoll patch 0002), not a thread blocked in
// epoll_wait(2) holding a P, so idle pollers no longer keep sysmon busy (docs/design.md
// §1 and §10 have the measurements).
func ResolvePollers(n, gomaxprocs int) int {
	if n > 0 {
		return n
	}
	return max(1, gomaxprocs)
}

// Pollers is the number of pollers ConfigureNetpoll set up (0 before it ran).
func Pollers() int { return int(netpollConf.pollers.Load()) }

// netpollConf records how ConfigureNetpoll set netpoll up; netpoll's configuration is
// process-wide, and so is this record (handover.go parks every poller).
var netpollConf struct {
	pollers atomic.Int32
	inline  atomic.Bool
}

func netpollInline() bool { return netpollConf.inline.Load() }
