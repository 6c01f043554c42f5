package loadgen

import (
	"context"
	"sync"
	"time"
)

// writeSlice bounds one write so that a server that stopped reading delays the other connections of
// its shard by at most this much; the unwritten tail stays queued, in order.
const writeSlice = 50 * time.Millisecond

// maxQueued is the per-connection send backlog above which new requests count as Unsent.
const maxQueued = 1 << 20

// shard is one writer goroutine and the connections it flushes. Producers (the scheduler, readers
// answering server heartbeats) append frames to a consumer's out buffer under its lock and put the
// consumer on its shard's dirty list once; the shard writes each dirty consumer's whole buffer with one
// write(2), so frames that meet in the buffer go out together.
type shard struct {
	mu    sync.Mutex
	dirty []*consumer
	wake  chan struct{}
}

func newShard() *shard { return &shard{wake: make(chan struct{}, 1)} }

func (s *shard) add(c *consumer) {
	s.mu.Lock()
	s.dirty = append(s.dirty, c)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *shard) loop(ctx context.Context) {
	var batch []*consumer
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		}
		for ctx.Err() == nil {
			s.mu.Lock()
			batch, s.dirty = s.dirty, batch[:0]
			s.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			for _, c := range batch {
				c.flush()
			}
			clear(batch)
		}
	}
}
