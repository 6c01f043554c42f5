package proxy

import "sync/atomic"

// Budget bounds the bytes Stormgate keeps because a peer is slow or absent, across
// the whole process (limits.max_buffered_bytes): frames queued behind a stalled
// socket (either side), requests in the hold queue, and frames being reassembled
// from a consumer that sends them slowly. It is what keeps a provider that stops
// reading, or ten thousand consumers that each announce a big frame and trickle it,
// from growing memory without bound.
//
// Bytes that pass straight through (the common case) are never charged, so the hot
// path does not touch this shared counter. A nil *Budget is unlimited.
type Budget struct {
	used  atomic.Int64
	limit atomic.Int64
}

// TryReserve charges n bytes if they fit under the limit.
func (b *Budget) TryReserve(n int) bool {
	if b == nil || n <= 0 {
		return true
	}
	limit := b.limit.Load()
	for {
		u := b.used.Load()
		if u+int64(n) > limit {
			return false
		}
		if b.used.CompareAndSwap(u, u+int64(n)) {
			return true
		}
	}
}

// Force charges n bytes that already exist (a write that just came up short).
func (b *Budget) Force(n int) {
	if b != nil && n > 0 {
		b.used.Add(int64(n))
	}
}

// Release returns n charged bytes.
func (b *Budget) Release(n int) {
	if b != nil && n > 0 {
		b.used.Add(-int64(n))
	}
}

// Recharge brings a holder's charge (*charged) to want bytes of memory that already exist (forced, as in
// force), touching the shared counter only when the charge changes.
func (b *Budget) Recharge(charged *int, want int) {
	switch {
	case want > *charged:
		b.Force(want - *charged)
	case want < *charged:
		b.Release(*charged - want)
	default:
		return
	}
	*charged = want
}

// Limit is the bound in force (limits.max_buffered_bytes).
func (b *Budget) Limit() int64 { return b.limit.Load() }

// InUse is the number of bytes charged now.
func (b *Budget) InUse() int64 {
	if b == nil {
		return 0
	}
	return b.used.Load()
}
