package loadgen

// pendingRing is one connection's table of outstanding requests and heartbeats. Ids are issued
// sequentially per connection (1, 2, 3, ...), so the table is a ring indexed by id - head: O(1) to
// add, answer and expire, no allocation once it has grown to the connection's peak in-flight count.
// Deadlines grow with ids (a connection sends in schedule order), so expiry pops from the front.
// Guarded by consumer.mu.
type pendingRing struct {
	slots []slot
	head  int64 // oldest id still in the ring
	next  int64 // next id to issue
}

type slotKind uint8

const (
	slotNone slotKind = iota
	slotRequest
	slotHeartbeat
	slotDone
)

type slot struct {
	at   int64  // request: scheduled send time; heartbeat: actual send time (ns since run start)
	key  uint64 // checked-body requests: the body's key
	size int32  // checked-body requests: the body's size (0: not a checked body)
	kind slotKind
}

// outcome of matching a reply id.
type outcome uint8

const (
	matched   outcome = iota
	late              // id already retired (timed out, or answered and popped)
	unknown           // id never issued on this connection, or a reply of the wrong kind
	duplicate         // second reply for an id still in the window
)

func (p *pendingRing) reset() {
	if p.slots == nil {
		p.slots = make([]slot, 8)
	}
	if p.next == 0 {
		p.next = 1
	}
	clear(p.slots)
	p.head = p.next
}

func (p *pendingRing) push(kind slotKind, at int64) int64 {
	return p.pushSlot(slot{at: at, kind: kind})
}

// pushSlot adds s under the next id and returns the id.
func (p *pendingRing) pushSlot(s slot) int64 {
	if p.next-p.head == int64(len(p.slots)) {
		grown := make([]slot, 2*len(p.slots))
		mask := int64(len(p.slots) - 1)
		for id := p.head; id < p.next; id++ {
			grown[id&int64(len(grown)-1)] = p.slots[id&mask]
		}
		p.slots = grown
	}
	id := p.next
	p.slots[id&int64(len(p.slots)-1)] = s
	p.next++
	return id
}

// pending reports whether id is outstanding as kind (not answered, expired or dropped).
func (p *pendingRing) pending(id int64, kind slotKind) bool {
	return id >= p.head && id < p.next && p.slots[id&int64(len(p.slots)-1)].kind == kind
}

// complete matches a reply; on success it returns the slot as it was and retires it.
func (p *pendingRing) complete(id int64, want slotKind) (slot, outcome) {
	if id < p.head {
		return slot{}, late
	}
	if id >= p.next {
		return slot{}, unknown
	}
	mask := int64(len(p.slots) - 1)
	s := &p.slots[id&mask]
	switch s.kind {
	case slotDone:
		return slot{}, duplicate
	case want:
	default:
		return slot{}, unknown
	}
	got := *s
	s.kind = slotDone
	for p.head < p.next && p.slots[p.head&mask].kind == slotDone {
		p.slots[p.head&mask].kind = slotNone
		p.head++
	}
	return got, matched
}

// expire retires entries whose time is older than cutoff, counting them by kind.
func (p *pendingRing) expire(reqCutoff, hbCutoff int64) (reqs, hbs uint64) {
	mask := int64(len(p.slots) - 1)
	for p.head < p.next {
		s := &p.slots[p.head&mask]
		switch s.kind {
		case slotRequest:
			if s.at > reqCutoff {
				return
			}
			reqs++
		case slotHeartbeat:
			if s.at > hbCutoff {
				return
			}
			hbs++
		}
		s.kind = slotNone
		p.head++
	}
	return
}

// dropAll retires every outstanding entry (connection closed), counting them by kind.
func (p *pendingRing) dropAll() (reqs, hbs uint64) {
	if p.slots == nil {
		return 0, 0
	}
	mask := int64(len(p.slots) - 1)
	for ; p.head < p.next; p.head++ {
		s := &p.slots[p.head&mask]
		switch s.kind {
		case slotRequest:
			reqs++
		case slotHeartbeat:
			hbs++
		}
		s.kind = slotNone
	}
	return
}
