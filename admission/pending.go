package admission

import (
	"math"
	"net/netip"
	"slices"
	"time"
)

// pendingQueue holds accepted connections waiting for admission. It keeps two orders over the
// same entries: accept order (a doubly linked list: the oldest entry decides the MaxWait
// deadline) and per-source FIFOs on a round-robin ring of sources (for PerSourceFairness).
// Each source's FIFO is in accept order too, so the oldest entry is always the head of its
// source: removing it is O(1) in both orders. Not safe for concurrent use: the Admitter's
// mutex guards it.
type pendingQueue struct {
	head, tail *pendingConn // accept order
	n          int
	sources    map[netip.Addr]*sourceQueue
	cursor     *sourceQueue // next source to serve; nil when empty
	free       []*pendingConn
	ages       ageBuckets
}

type pendingConn struct {
	conn       Conn
	prev, next *pendingConn // accept order
	srcNext    *pendingConn // source FIFO
	src        *sourceQueue
}

// sourceQueue is one source IP's FIFO; it sits on the ring while it holds entries.
type sourceQueue struct {
	addr               netip.Addr
	head, tail         *pendingConn
	ringPrev, ringNext *sourceQueue
}

func newPendingQueue(maxWait time.Duration) *pendingQueue {
	q := &pendingQueue{sources: make(map[netip.Addr]*sourceQueue)}
	q.ages = ageBuckets{epoch: time.Now(), width: bucketWidth(maxWait)}
	return q
}

// setMaxWait re-buckets the pending entries for a new MaxWait.
func (q *pendingQueue) setMaxWait(maxWait time.Duration) {
	w := bucketWidth(maxWait)
	if w == q.ages.width {
		return
	}
	q.ages = ageBuckets{epoch: q.ages.epoch, width: w, b: q.ages.b[:0]}
	for p := q.head; p != nil; p = p.next {
		q.ages.add(p.conn.AcceptedAt)
	}
}

// deadlineRate is the lowest constant admission rate (per second) from now on that admits
// every pending connection, in accept order, before it has waited maxWait; +Inf when one is
// already overdue, 0 when the queue is empty. Entries are counted per age bucket, each at
// its bucket's start (so the estimate errs towards admitting early).
func (q *pendingQueue) deadlineRate(now time.Time, maxWait time.Duration) float64 {
	r, cum := 0.0, 0
	for _, b := range q.ages.b {
		if b.n == 0 {
			continue
		}
		cum += b.n
		left := q.ages.startOf(b).Add(maxWait).Sub(now)
		if left <= 0 {
			return math.Inf(1)
		}
		r = max(r, float64(cum)/left.Seconds())
	}
	return r
}

func (q *pendingQueue) len() int { return q.n }

// oldest returns the entry accepted first, or nil.
func (q *pendingQueue) oldest() *pendingConn { return q.head }

// push appends c in accept order and to its source's FIFO.
func (q *pendingQueue) push(c Conn) {
	var p *pendingConn
	if k := len(q.free); k > 0 {
		p, q.free = q.free[k-1], q.free[:k-1]
	} else {
		p = new(pendingConn)
	}
	p.conn = c
	p.prev, p.next = q.tail, nil
	if q.tail != nil {
		q.tail.next = p
	} else {
		q.head = p
	}
	q.tail = p
	q.n++
	q.ages.add(c.AcceptedAt)

	key := c.Remote.Addr()
	s := q.sources[key]
	if s == nil {
		s = &sourceQueue{addr: key}
		q.sources[key] = s
		q.ringInsert(s)
	}
	p.src = s
	if s.tail != nil {
		s.tail.srcNext = p
	} else {
		s.head = p
	}
	s.tail = p
}

// popOldest removes and returns the entry accepted first, or ok=false.
func (q *pendingQueue) popOldest() (Conn, bool) {
	if q.head == nil {
		return Conn{}, false
	}
	return q.remove(q.head), true
}

// popFair removes and returns the head of the source at the ring cursor and moves the cursor
// to the next source, or ok=false.
func (q *pendingQueue) popFair() (Conn, bool) {
	s := q.cursor
	if s == nil {
		return Conn{}, false
	}
	q.cursor = s.ringNext // remove may unlink s; the cursor then moves on correctly either way
	return q.remove(s.head), true
}

// remove unlinks p, which must be the head of its source FIFO, and recycles the entry.
func (q *pendingQueue) remove(p *pendingConn) Conn {
	if p.prev != nil {
		p.prev.next = p.next
	} else {
		q.head = p.next
	}
	if p.next != nil {
		p.next.prev = p.prev
	} else {
		q.tail = p.prev
	}
	q.n--
	q.ages.remove(p.conn.AcceptedAt)

	s := p.src
	s.head = p.srcNext
	if s.head == nil {
		s.tail = nil
		q.ringRemove(s)
		delete(q.sources, s.addr)
	}
	c := p.conn
	*p = pendingConn{}
	if len(q.free) < 1024 {
		q.free = append(q.free, p)
	}
	return c
}

// ringInsert puts s last in the round, just before the cursor.
func (q *pendingQueue) ringInsert(s *sourceQueue) {
	if q.cursor == nil {
		s.ringPrev, s.ringNext = s, s
		q.cursor = s
		return
	}
	last := q.cursor.ringPrev
	s.ringPrev, s.ringNext = last, q.cursor
	last.ringNext = s
	q.cursor.ringPrev = s
}

func (q *pendingQueue) ringRemove(s *sourceQueue) {
	if s.ringNext == s {
		q.cursor = nil
	} else {
		s.ringPrev.ringNext = s.ringNext
		s.ringNext.ringPrev = s.ringPrev
		if q.cursor == s {
			q.cursor = s.ringNext
		}
	}
	s.ringPrev, s.ringNext = nil, nil
}

// takeAll empties the queue and returns its connections in accept order.
func (q *pendingQueue) takeAll() []Conn {
	out := make([]Conn, 0, q.n)
	for q.head != nil {
		out = append(out, q.remove(q.head))
	}
	return out
}

// ageBuckets counts pending entries by accept time, in buckets of width, oldest first, so
// that deadlineRate costs O(buckets) rather than O(pending). Accept times arrive in
// non-decreasing order (one accept goroutine, monotonic clock), so add appends at the tail;
// remove may hit any bucket (fair order), and emptied buckets are dropped from the front.
type ageBuckets struct {
	epoch time.Time // bucket k starts at epoch + k·width (monotonic, immune to clock steps)
	width time.Duration
	b     []ageBucket
}

type ageBucket struct {
	start int64 // bucket number
	n     int
}

// bucketWidth keeps about 32 buckets across MaxWait.
func bucketWidth(maxWait time.Duration) time.Duration {
	return max(maxWait/32, time.Millisecond)
}

func (a *ageBuckets) index(t time.Time) int64 { return int64(t.Sub(a.epoch) / a.width) }

func (a *ageBuckets) startOf(b ageBucket) time.Time {
	return a.epoch.Add(time.Duration(b.start) * a.width)
}

func (a *ageBuckets) add(t time.Time) {
	k := a.index(t)
	if n := len(a.b); n > 0 && a.b[n-1].start >= k {
		a.b[n-1].n++ // same bucket
		return
	}
	a.b = append(a.b, ageBucket{start: k, n: 1})
}

func (a *ageBuckets) remove(t time.Time) {
	k := a.index(t)
	i, found := slices.BinarySearchFunc(a.b, k, func(b ageBucket, k int64) int {
		switch {
		case b.start < k:
			return -1
		case b.start > k:
			return 1
		}
		return 0
	})
	if !found || a.b[i].n == 0 {
		return // not ours (cannot happen with monotonic accept times)
	}
	a.b[i].n--
	j := 0
	for j < len(a.b) && a.b[j].n == 0 {
		j++
	}
	if j > 0 {
		a.b = append(a.b[:0], a.b[j:]...)
	}
}
