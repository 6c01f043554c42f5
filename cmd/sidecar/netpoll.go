package main

import (
	"runtime"

	"github.com/cloudwego/netpoll"
	"go.uber.org/zap"
)

// defaultNetpollBuffer is the initial per-connection input buffer (netpoll's
// default is one page). Measured in docs/benchmarks.md: it sets most of the
// memory an idle consumer connection costs.
const defaultNetpollBuffer = 1024

// configureNetpoll sets netpoll's process-wide options once, before any
// connection exists: one poller per core (netpoll's default is one per 20
// cores), a smaller initial input buffer per connection (it grows on demand;
// idle connections are the common case here), and netpoll's own log lines
// routed into zap.
func configureNetpoll(log *zap.Logger, bufferSize int) error {
	w := zap.NewStdLog(log.Named("netpoll")).Writer()
	// LinkBufferCap is netpoll's minimum buffer node size (4 KiB by default); without
	// lowering it too, BufferSize below 4 KiB has no effect.
	netpoll.LinkBufferCap = bufferSize
	return netpoll.Configure(netpoll.Config{
		PollerNum:    runtime.GOMAXPROCS(0),
		BufferSize:   bufferSize,
		LoggerOutput: w,
		LoadBalance:  netpoll.RoundRobin,
	})
}
