package proxy

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"

	"github.com/cloudwego/netpoll"
	"go.uber.org/zap"
)

// DefaultNetpollBuffer is the initial per-connection input buffer (netpoll's
// default is one page); netpoll doubles it for a connection whose reads fill it.
// It is a large part of what an idle consumer costs: with 10,000 idle consumers
// (30 s heartbeats) RSS grew 4,487 bytes per connection at 1,024 and 3,919 at 256
// (measured here with stormbench load; the rest is netpoll's connection, its unused
// output barrier, about 1.3 KiB, and the session). A heartbeat is 17 bytes and a
// typical request a few hundred.
const DefaultNetpollBuffer = 256

// ConfigureNetpoll sets netpoll's process-wide options once, before any
// connection exists: one poller per core (netpoll's default is one per 20
// cores), a smaller initial input buffer per connection (it grows on demand;
// idle connections are the common case here), and netpoll's own log lines
// routed into zap.
func ConfigureNetpoll(log *zap.Logger, bufferSize int) error {
	w := zap.NewStdLog(log.Named("netpoll")).Writer()
	netpollConf.pollers.Store(int32(pollers()))
	netpollConf.inline.Store(true)
	// LinkBufferCap is netpoll's minimum buffer node size (4 KiB by default); without
	// lowering it too, BufferSize below 4 KiB has no effect.
	netpoll.LinkBufferCap = bufferSize
	return netpoll.Configure(netpoll.Config{
		PollerNum:    pollers(),
		BufferSize:   bufferSize,
		LoggerOutput: w,
		LoadBalance:  netpoll.RoundRobin,
		// Handlers run on the poller goroutine that saw the event: no hand-off to a pooled
		// goroutine (a futex wake-up) per readable connection. Stormgate's handlers never
		// block: frames are cut without waiting for bytes (proxy/framereader.go), writes
		// are non-blocking, and slow paths (a full socket, timers) run elsewhere.
		Runner: func(_ context.Context, f func()) { f() },
	})
}

// pollers is the number of netpoll pollers: one per core unless STORMGATE_POLLERS says
// otherwise (an experiment knob, not a setting).
func pollers() int {
	if n, err := strconv.Atoi(os.Getenv("STORMGATE_POLLERS")); err == nil && n > 0 {
		return n
	}
	return runtime.GOMAXPROCS(0)
}

// netpollConf records how ConfigureNetpoll set netpoll up; netpoll's configuration is
// process-wide, and so is this record (handover.go parks every poller).
var netpollConf struct {
	pollers atomic.Int32
	inline  atomic.Bool
}

func netpollInline() bool { return netpollConf.inline.Load() }
func netpollPollers() int { return int(netpollConf.pollers.Load()) }
