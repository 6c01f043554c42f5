package proxy

// turns is the order in which consumers' waiting work leaves a queue they share: one FIFO per
// consumer, served in deficit round robin. Each turn a consumer may take up to its rule's quantum in
// cost; an entry that costs more than the consumer has left waits for what the consumer saves over
// its turns. So an entry waits behind about one quantum of each other consumer with work waiting,
// never behind the whole backlog of one, and over many rounds each consumer gets the same share.
//
// Every wait of either protocol is one of these, and each counts what its wait is short of:
//
//	| queue                              | waits for                        | key           | cost        | quantum
//	|------------------------------------|----------------------------------|---------------|-------------|-------------
//	| a Dubbo connection's send queue    | the writer of a shared           | consumer      | frame bytes | sendQuantum
//	| (sendq.go)                         | connection                       | session       |             |
//	| the Dubbo hold queue (hold.go),    | room in a connection's send      | consumer      | frame bytes | sendQuantum
//	| one per lane                       | queue, a connection that is up   | session       |             |
//	| HTTP/2's waiting calls (holdcalls.go) | a provider stream: one per call, | consumer      | 1           | 1
//	|                                    | whatever its size                | session       |             |
//
// A consumer's entries stay in the order they were pushed (merge keeps an order given by the caller).
// A consumer whose FIFO empties leaves the turns and forgets what it had saved, as in DRR.
//
// Not safe for concurrent use: each queue is guarded by its owner's mutex. The zero value is an
// empty queue.
type turns[K comparable, E any, R turnRule[K, E]] struct {
	flows  map[K]*turnFlow[K, E]
	active []*turnFlow[K, E] // consumers with entries, in turn order; active[next] is served next
	next   int
	n      int // entries
	cost   int // their total cost
}

// turnRule is what a queue's entries are to its turns: whose they are, and what each costs. Rules are
// zero-size types; their methods must not look at anything but the entry.
//
// They take entries by value: an entry's address handed to a rule's method (a call through the
// instantiation's dictionary, which escape analysis cannot see through) would move it to the heap.
type turnRule[K comparable, E any] interface {
	key(E) K
	cost(E) int
	quantum() int
}

// turnFlow is one consumer's entries: q[head:] wait, in order.
type turnFlow[K comparable, E any] struct {
	key     K
	q       []E
	head    int
	deficit int  // cost it may still take this turn
	turn    bool // its turn has begun (the quantum is added once per turn)
}

// len is the number of entries; weight their total cost.
func (t *turns[K, E, R]) len() int    { return t.n }
func (t *turns[K, E, R]) weight() int { return t.cost }

// consumers is the number of consumers with entries.
func (t *turns[K, E, R]) consumers() int { return len(t.active) }

// push queues e behind its consumer's other entries; a consumer new to the queue takes its turn
// after every other.
func (t *turns[K, E, R]) push(e E) {
	var r R
	f := t.flow(r.key(e))
	f.q = append(f.q, e)
	t.n++
	t.cost += r.cost(e)
}

// flow is k's FIFO, made (last in turn) when k has none.
func (t *turns[K, E, R]) flow(k K) *turnFlow[K, E] {
	if t.flows == nil {
		t.flows = make(map[K]*turnFlow[K, E])
	}
	f := t.flows[k]
	if f == nil {
		f = &turnFlow[K, E]{key: k}
		t.flows[k] = f
		t.active = append(t.active, f)
	}
	return f
}

// merge puts es, which are all k's and in the order before gives, among k's entries, keeping that
// order: entries that come back to a queue they had left (hold.go's rehold) take their place again.
func (t *turns[K, E, R]) merge(k K, es []E, before func(a, b *E) bool) {
	if len(es) == 0 {
		return
	}
	var r R
	f := t.flow(k)
	queued := f.q[f.head:]
	merged := make([]E, 0, len(queued)+len(es))
	for i := range es {
		for len(queued) > 0 && !before(&es[i], &queued[0]) {
			merged = append(merged, queued[0])
			queued = queued[1:]
		}
		merged = append(merged, es[i])
		t.cost += r.cost(es[i])
	}
	merged = append(merged, queued...)
	clear(f.q)
	f.q, f.head = merged, 0
	t.n += len(es)
}

// peek is the entry whose turn it is; nil when the queue is empty. It moves the turns on to that
// entry (a consumer whose next entry costs more than it has left saves it for its next turn), so a
// pop after it takes the same entry, and a peek again without a pop finds it again.
func (t *turns[K, E, R]) peek() *E {
	var r R
	for len(t.active) > 0 {
		if t.next >= len(t.active) {
			t.next = 0
		}
		f := t.active[t.next]
		if !f.turn {
			f.turn = true
			f.deficit += max(r.quantum(), 1)
		}
		e := &f.q[f.head]
		if r.cost(*e) > f.deficit {
			f.turn = false
			t.next++
			continue
		}
		return e
	}
	return nil
}

// pop takes the entry whose turn it is; false when the queue is empty.
func (t *turns[K, E, R]) pop() (E, bool) {
	var zero E
	if t.peek() == nil {
		return zero, false
	}
	var r R
	f := t.active[t.next]
	e := f.q[f.head]
	c := r.cost(e)
	f.deficit -= c
	f.q[f.head] = zero
	f.head++
	t.n--
	t.cost -= c
	if f.head == len(f.q) {
		t.forget(t.next) // the next consumer moves into this turn
	} else if f.head > 1024 && f.head*2 > len(f.q) {
		n := copy(f.q, f.q[f.head:])
		clear(f.q[n:])
		f.q, f.head = f.q[:n], 0
	}
	return e, true
}

// remove takes out k's first entry for which match is true; false when there is none.
func (t *turns[K, E, R]) remove(k K, match func(*E) bool) (E, bool) {
	var zero E
	f := t.flows[k]
	if f == nil {
		return zero, false
	}
	for i := f.head; i < len(f.q); i++ {
		if !match(&f.q[i]) {
			continue
		}
		var r R
		e := f.q[i]
		copy(f.q[i:], f.q[i+1:])
		f.q[len(f.q)-1] = zero
		f.q = f.q[:len(f.q)-1]
		t.n--
		t.cost -= r.cost(e)
		if f.head == len(f.q) {
			t.forget(t.index(f))
		}
		return e, true
	}
	return zero, false
}

// removeIf takes out every entry for which drop is true, keeping the order of the rest, and returns
// them.
func (t *turns[K, E, R]) removeIf(drop func(*E) bool) []E {
	var r R
	var out []E
	for i := 0; i < len(t.active); {
		f := t.active[i]
		kept := f.q[:f.head]
		for j := f.head; j < len(f.q); j++ {
			if drop(&f.q[j]) {
				out = append(out, f.q[j])
				t.n--
				t.cost -= r.cost(f.q[j])
				continue
			}
			kept = append(kept, f.q[j])
		}
		clear(f.q[len(kept):])
		f.q = kept
		if f.head == len(f.q) {
			t.forget(i)
			continue
		}
		i++
	}
	return out
}

// takeAll empties the queue and returns every entry, each consumer's in order.
func (t *turns[K, E, R]) takeAll() []E {
	var out []E
	for _, f := range t.active {
		out = append(out, f.q[f.head:]...)
	}
	*t = turns[K, E, R]{}
	return out
}

// each calls f for every entry, each consumer's in order.
func (t *turns[K, E, R]) each(f func(*E)) {
	for _, fl := range t.active {
		for i := fl.head; i < len(fl.q); i++ {
			f(&fl.q[i])
		}
	}
}

// eachFirst calls f for every consumer's first entry.
func (t *turns[K, E, R]) eachFirst(f func(*E)) {
	for _, fl := range t.active {
		f(&fl.q[fl.head])
	}
}

// index is f's place in the turns.
func (t *turns[K, E, R]) index(f *turnFlow[K, E]) int {
	for i, a := range t.active {
		if a == f {
			return i
		}
	}
	panic("proxy: turns: a flow that is not in the turns")
}

// forget drops the emptied consumer at active[i]; the turn stays with whoever comes after it.
func (t *turns[K, E, R]) forget(i int) {
	delete(t.flows, t.active[i].key)
	t.active = append(t.active[:i], t.active[i+1:]...)
	if i < t.next {
		t.next--
	}
}
