package proxy

import (
	"context"
	"runtime"

	"github.com/cloudwego/netpoll"
	"go.uber.org/zap"
)

// DefaultNetpollBuffer is the initial per-connection input buffer (netpoll's
// default is one page). Measured in docs/benchmarks.md: it sets most of the
// memory an idle consumer connection costs.
const DefaultNetpollBuffer = 1024

// ConfigureNetpoll sets netpoll's process-wide options once, before any
// connection exists: one poller per core (netpoll's default is one per 20
// cores), a smaller initial input buffer per connection (it grows on demand;
// idle connections are the common case here), and netpoll's own log lines
// routed into zap.
func ConfigureNetpoll(log *zap.Logger, bufferSize int) error {
	w := zap.NewStdLog(log.Named("netpoll")).Writer()
	// LinkBufferCap is netpoll's minimum buffer node size (4 KiB by default); without
	// lowering it too, BufferSize below 4 KiB has no effect.
	netpoll.LinkBufferCap = bufferSize
	return netpoll.Configure(netpoll.Config{
		PollerNum:    runtime.GOMAXPROCS(0),
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
