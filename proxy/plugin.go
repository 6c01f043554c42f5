package proxy

import (
	"time"

	"go.uber.org/zap"

	"github.com/stormgate/stormgate/keepalive"
)

// The protocol plug-in API (design §14.6, step 5b). A protocol other than the Dubbo 2 codec (HTTP/2 for
// Triple and gRPC today) is handed these types and reaches the core through them alone: the core keeps
// the consumer connections' lifecycle, the pools and their slots, the hold queue, the writers, the
// buffer budget, drain and handover, and the protocol turns bytes into calls and answers into bytes.
// The HTTP/2 files (h2*.go) still live in this package while the API is completed; what they still
// reach past it is counted in §14.6.

// Env is the server-wide part of the API: the clock and its timing wheel, the settings in force, the
// log, the buffer budget and the task group Close waits for. One per Server, passed by value; every
// method is safe for concurrent use.
type Env struct{ s *Server }

// Now is the server's clock (the wheel's: a ManualClock in tests), in nanoseconds.
func (e Env) Now() int64 { return e.s.now() }

// Config is the settings in force now. A live change (xDS, file) swaps the whole value; a caller that
// reads several fields takes one Config and reads them from it.
func (e Env) Config() *Config { return e.s.cfg.Load() }

// Log is the server's logger.
func (e Env) Log() *zap.Logger { return e.s.log }

// Wheel is the server's timing wheel: every timer of every connection is on it (keepalive.Timer).
func (e Env) Wheel() *keepalive.Wheel { return e.s.wheel }

// Budget bounds the bytes kept because a peer is slow or absent (limits.max_buffered_bytes).
func (e Env) Budget() *Budget { return &e.s.budget }

// Spawn runs f on its own goroutine, one that Close waits for.
func (e Env) Spawn(f func()) { e.s.spawn(f) }

// After is time.After on the server's clock.
func (e Env) After(d time.Duration) <-chan time.Time { return e.s.after(d) }
