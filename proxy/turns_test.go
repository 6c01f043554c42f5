package proxy

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// tEntry is a test entry: consumer who, cost n, and a sequence number.
type tEntry struct {
	who string
	n   int
	seq int
}

type tTurns struct{}

func (tTurns) key(e tEntry) string { return e.who }
func (tTurns) cost(e tEntry) int   { return e.n }
func (tTurns) quantum() int        { return 100 }

// TestTurnsModel checks turns against a plain model of deficit round robin under random pushes, pops,
// peeks, removals and merges: the same entries leave in the same order, each consumer's in its order,
// and the counts and costs stay right.
func TestTurnsModel(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 1))
		var q turns[string, tEntry, tTurns]
		var m drrModel
		seq, low := 0, 0
		for step := range 400 {
			who := string(rune('a' + rng.IntN(5)))
			switch op := rng.IntN(10); {
			case op < 4:
				seq++
				e := tEntry{who, 1 + rng.IntN(250), seq}
				q.push(e)
				m.push(e)
			case op < 7:
				got, ok := q.pop()
				want, wok := m.pop()
				if ok != wok || got != want {
					t.Fatalf("seed %d step %d: pop %v %v, model %v %v", seed, step, got, ok, want, wok)
				}
			case op == 7:
				p := q.peek()
				want, ok := m.peekCopy()
				if (p != nil) != ok || p != nil && *p != want {
					t.Fatalf("seed %d step %d: peek %v, model %v %v", seed, step, p, want, ok)
				}
			case op == 8:
				// Remove one of who's entries, at random.
				var mine []int
				q.each(func(e *tEntry) {
					if e.who == who {
						mine = append(mine, e.seq)
					}
				})
				if len(mine) == 0 {
					if _, ok := q.remove(who, func(*tEntry) bool { return true }); ok {
						t.Fatalf("seed %d step %d: removed from an empty consumer", seed, step)
					}
					continue
				}
				s := mine[rng.IntN(len(mine))]
				got, ok := q.remove(who, func(e *tEntry) bool { return e.seq == s })
				if !ok || got.seq != s {
					t.Fatalf("seed %d step %d: remove %d got %v %v", seed, step, s, got, ok)
				}
				m.remove(who, s)
			default:
				// Entries come back older than who's queued ones: merge puts them first, in order.
				low -= 2
				es := []tEntry{{who, 1 + rng.IntN(250), low}, {who, 1 + rng.IntN(250), low + 1}}
				q.merge(who, es, func(a, b *tEntry) bool { return a.seq < b.seq })
				m.mergeFront(who, es)
			}
			if q.len() != m.len() || q.weight() != m.weight() || q.consumers() != len(m.active) {
				t.Fatalf("seed %d step %d: len %d weight %d consumers %d, model %d %d %d", seed, step,
					q.len(), q.weight(), q.consumers(), m.len(), m.weight(), len(m.active))
			}
		}
		rest := q.takeAll()
		if len(rest) != m.len() || q.len() != 0 || q.weight() != 0 || q.peek() != nil {
			t.Fatalf("seed %d: takeAll %d, model %d; after: len %d", seed, len(rest), m.len(), q.len())
		}
	}
}

// drrModel is deficit round robin written the textbook way, over slices.
type drrModel struct {
	active []string
	q      map[string][]tEntry
	def    map[string]int
	began  map[string]bool
	next   int
}

func (m *drrModel) push(e tEntry) {
	if m.q == nil {
		m.q, m.def, m.began = map[string][]tEntry{}, map[string]int{}, map[string]bool{}
	}
	if len(m.q[e.who]) == 0 {
		m.active = append(m.active, e.who)
	}
	m.q[e.who] = append(m.q[e.who], e)
}

func (m *drrModel) mergeFront(who string, es []tEntry) {
	if m.q == nil || len(m.q[who]) == 0 {
		for _, e := range es {
			m.push(e)
		}
		return
	}
	m.q[who] = append(slices.Clone(es), m.q[who]...)
}

func (m *drrModel) settle() bool {
	for len(m.active) > 0 {
		if m.next >= len(m.active) {
			m.next = 0
		}
		w := m.active[m.next]
		if !m.began[w] {
			m.began[w] = true
			m.def[w] += 100
		}
		if m.q[w][0].n > m.def[w] {
			m.began[w] = false
			m.next++
			continue
		}
		return true
	}
	return false
}

func (m *drrModel) peekCopy() (tEntry, bool) {
	if !m.settle() {
		return tEntry{}, false
	}
	return m.q[m.active[m.next]][0], true
}

func (m *drrModel) pop() (tEntry, bool) {
	if !m.settle() {
		return tEntry{}, false
	}
	w := m.active[m.next]
	e := m.q[w][0]
	m.q[w] = m.q[w][1:]
	m.def[w] -= e.n
	if len(m.q[w]) == 0 {
		m.leave(m.next)
	}
	return e, true
}

func (m *drrModel) remove(who string, seq int) {
	i := slices.IndexFunc(m.q[who], func(e tEntry) bool { return e.seq == seq })
	m.q[who] = slices.Delete(m.q[who], i, i+1)
	if len(m.q[who]) == 0 {
		m.leave(slices.Index(m.active, who))
	}
}

func (m *drrModel) leave(i int) {
	w := m.active[i]
	m.def[w], m.began[w] = 0, false
	m.active = slices.Delete(m.active, i, i+1)
	if i < m.next {
		m.next--
	}
}

func (m *drrModel) len() (n int) {
	for _, q := range m.q {
		n += len(q)
	}
	return n
}

func (m *drrModel) weight() (w int) {
	for _, q := range m.q {
		for _, e := range q {
			w += e.n
		}
	}
	return w
}

// A long FIFO is compacted as it is served, and keeps its order through it.
func TestTurnsLongFIFO(t *testing.T) {
	var q turns[string, tEntry, tTurns]
	for i := range 5000 {
		q.push(tEntry{"a", 1, i})
		if i%3 == 0 {
			q.push(tEntry{"b", 1, i})
		}
	}
	last := map[string]int{"a": -1, "b": -1}
	for q.len() > 0 {
		e, _ := q.pop()
		if e.seq <= last[e.who] {
			t.Fatalf("%s's %d after %d", e.who, e.seq, last[e.who])
		}
		last[e.who] = e.seq
	}
	if f := q.flows["a"]; f != nil {
		t.Fatalf("an empty consumer stays in the turns: %+v", f)
	}
}

// TestHoldQueueTurnsByConsumer: requests held while the provider is away leave by consumer in turns, not
// in arrival order: one consumer's 64 held requests do not go out before another's one, whether held
// at arrival or coming back from a connection that died (each keeping its consumer's arrival order).
// In arrival order (before #26's step 3), b's requests left 53rd and 67th.
func TestHoldQueueTurnsByConsumer(t *testing.T) {
	srv := startWithoutProvider(t, func(c *Config) { c.HoldMaxBytesPerConsumer = 0 })
	p := srv.pools[0]
	a, b := &session{srv: srv, pool: p}, &session{srv: srv, pool: p}
	const size = 1 << 10
	frame := func(who byte, i int) []byte {
		f := bytes.Repeat([]byte{who}, size)
		copy(f[1:], fmt.Sprintf("%03d", i))
		return f
	}
	now := srv.now()
	for i := range 64 {
		p.hold.push(request{sess: a, arrived: now + int64(i), sendBy: NoDeadline}, frame('a', i))
	}
	p.hold.push(request{sess: b, arrived: now + 100, sendBy: NoDeadline}, frame('b', 1))
	// b's older request comes back from a connection that died, with one of a's.
	p.hold.rehold([]held{
		{request: request{sess: b, arrived: now + 50, sendBy: NoDeadline}, frame: frame('b', 0)},
		{request: request{sess: a, arrived: now + 10, sendBy: NoDeadline}, frame: frame('a', 999)},
	}, HoldReheld)
	var order []string
	p.hold.mu.Lock()
	for p.hold.Len() > 0 {
		e := p.hold.popLocked(laneSmall)
		order = append(order, string(e.frame[:4]))
	}
	p.hold.mu.Unlock()
	if len(order) != 67 {
		t.Fatalf("held %d, want 67", len(order))
	}
	ib0, ib1 := slices.Index(order, "b000"), slices.Index(order, "b001")
	// a's first turn is sendQuantum of bytes: 16 requests; then b's two.
	if turn := sendQuantum / size; ib0 != turn || ib1 != turn+1 {
		t.Fatalf("b's requests left %dth and %dth, want %dth and %dth; order %v", ib0+1, ib1+1, turn+1, turn+2, order)
	}
	var as []string
	for _, o := range order {
		if o[0] == 'a' {
			as = append(as, o)
		}
	}
	want := []string{"a000", "a001", "a002", "a003", "a004", "a005", "a006", "a007", "a008", "a009", "a010", "a999", "a011"}
	if !slices.Equal(as[:len(want)], want) {
		t.Fatalf("a's requests left out of their arrival order: %v", as)
	}
}

// Serving a send queue allocates nothing once its consumers' FIFOs have room: an entry handed by
// address to its rule's methods escaped to the heap, two allocations per request (push and pop).
func TestTurnsAllocs(t *testing.T) {
	var ss [4]session
	frame := make([]byte, 300)
	var q sendQueue
	for i := range 8 {
		q.push(queued{request: request{sess: &ss[i%4]}, frame: frame})
	}
	i := 0
	if n := testing.AllocsPerRun(1000, func() {
		q.push(queued{request: request{sess: &ss[i%4]}, frame: frame})
		i++
		if _, ok := q.pop(); !ok {
			t.Fatal("empty")
		}
	}); n != 0 {
		t.Fatalf("%v allocations per request through a send queue, want 0", n)
	}
}

// BenchmarkTurns: 64 requests of 8 consumers through a send queue.
func BenchmarkTurns(b *testing.B) {
	var ss [8]session
	frame := make([]byte, 300)
	var q sendQueue
	b.ReportAllocs()
	for b.Loop() {
		for i := range 64 {
			q.push(queued{request: request{sess: &ss[i%8]}, frame: frame})
		}
		for q.len() > 0 {
			q.pop()
		}
	}
}
