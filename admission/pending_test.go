package admission

import (
	"math"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"
)

func pconn(src byte, seq int) Conn {
	return Conn{
		FD:         seq,
		Remote:     netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, src}), uint16(10000+seq)),
		AcceptedAt: time.Unix(0, int64(seq)),
	}
}

func TestPendingFairRoundRobin(t *testing.T) {
	q := newPendingQueue(time.Second)
	seq := 0
	for range 4 {
		q.push(pconn(1, seq)) // the heavy source first
		seq++
	}
	for src := byte(2); src <= 4; src++ {
		q.push(pconn(src, seq))
		seq++
	}
	var got []byte
	for q.len() > 0 {
		c, _ := q.popFair()
		got = append(got, c.Remote.Addr().As4()[3])
	}
	if want := "\x01\x02\x03\x04\x01\x01\x01"; string(got) != want {
		t.Errorf("fair order %v, want %v", got, []byte(want))
	}
	if _, ok := q.popFair(); ok {
		t.Error("pop from an empty queue")
	}
	if len(q.sources) != 0 || q.cursor != nil || q.head != nil || q.tail != nil {
		t.Errorf("empty queue keeps state: %+v", q)
	}
}

// TestPendingModel drives the queue with random pushes and pops against a plain slice model.
func TestPendingModel(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	q := newPendingQueue(time.Second)
	var model []Conn // accept order
	lastServed := map[netip.Addr]int{}
	seq := 0
	for step := range 20000 {
		switch op := r.IntN(10); {
		case op < 5:
			c := pconn(byte(1+r.IntN(6)), seq)
			seq++
			q.push(c)
			model = append(model, c)
		case op < 7:
			c, ok := q.popOldest()
			if ok != (len(model) > 0) {
				t.Fatalf("step %d: popOldest ok=%t with %d in model", step, ok, len(model))
			}
			if ok {
				if c != model[0] {
					t.Fatalf("step %d: popOldest %v, want %v", step, c.FD, model[0].FD)
				}
				model = model[1:]
			}
		default:
			c, ok := q.popFair()
			if ok != (len(model) > 0) {
				t.Fatalf("step %d: popFair ok=%t with %d in model", step, ok, len(model))
			}
			if !ok {
				continue
			}
			// It must be the oldest entry of its source.
			i := 0
			for model[i].Remote.Addr() != c.Remote.Addr() {
				i++
			}
			if model[i] != c {
				t.Fatalf("step %d: popFair gave %d, its source's oldest is %d", step, c.FD, model[i].FD)
			}
			model = append(model[:i], model[i+1:]...)
			lastServed[c.Remote.Addr()] = step
		}
		if q.len() != len(model) {
			t.Fatalf("step %d: len %d, model %d", step, q.len(), len(model))
		}
		if o := q.oldest(); (o == nil) != (len(model) == 0) || (o != nil && o.conn != model[0]) {
			t.Fatalf("step %d: oldest mismatch", step)
		}
		if len(q.sources) > 6 {
			t.Fatalf("step %d: %d sources tracked", step, len(q.sources))
		}
	}
	rest := q.takeAll()
	if len(rest) != len(model) {
		t.Fatalf("takeAll %d, model %d", len(rest), len(model))
	}
	for i := range rest {
		if rest[i] != model[i] {
			t.Fatalf("takeAll[%d] = %d, want %d", i, rest[i].FD, model[i].FD)
		}
	}
}

// TestPendingFairNoStarvation: with every source backlogged, k pops serve each source at
// least floor(k/sources) times.
func TestPendingFairNoStarvation(t *testing.T) {
	q := newPendingQueue(time.Second)
	seq := 0
	for src := byte(1); src <= 5; src++ {
		n := 3
		if src == 1 {
			n = 100
		}
		for range n {
			q.push(pconn(src, seq))
			seq++
		}
	}
	served := map[byte]int{}
	for range 10 {
		c, _ := q.popFair()
		served[c.Remote.Addr().As4()[3]]++
	}
	for src := byte(1); src <= 5; src++ {
		if served[src] != 2 {
			t.Errorf("source %d served %d of 10, want 2 (%v)", src, served[src], served)
		}
	}
}

func BenchmarkPendingPushPop(b *testing.B) {
	q := newPendingQueue(time.Second)
	for i := range 1000 {
		q.push(pconn(byte(i%50), i))
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		q.push(pconn(byte(i%50), i))
		q.popFair()
	}
}

func TestPendingDeadlineRate(t *testing.T) {
	q := newPendingQueue(time.Second)
	t0 := time.Now()
	if r := q.deadlineRate(t0, time.Second); r != 0 {
		t.Errorf("empty queue: rate %v", r)
	}
	for i := range 10 {
		c := pconn(1, i)
		c.AcceptedAt = t0
		q.push(c)
	}
	// 10 due within 0.5 s: at least 20/s (bucket starts are rounded down, so a bit more).
	if r := q.deadlineRate(t0.Add(500*time.Millisecond), time.Second); r < 20 || r > 22 {
		t.Errorf("rate %v, want about 20/s", r)
	}
	later := pconn(2, 10)
	later.AcceptedAt = t0.Add(900 * time.Millisecond)
	q.push(later)
	// The older ten still dominate: 10 within 0.5 s beats 11 within 1.4 s.
	if r := q.deadlineRate(t0.Add(500*time.Millisecond), time.Second); r < 20 || r > 22 {
		t.Errorf("rate %v, want about 20/s", r)
	}
	if r := q.deadlineRate(t0.Add(time.Second), time.Second); !math.IsInf(r, 1) {
		t.Errorf("overdue: rate %v, want +Inf", r)
	}
	q.takeAll()
	if len(q.ages.b) != 0 {
		t.Errorf("buckets left after takeAll: %+v", q.ages.b)
	}
	// MaxWait changes re-bucket.
	q.push(later)
	q.setMaxWait(10 * time.Second)
	if r := q.deadlineRate(later.AcceptedAt, 10*time.Second); r < 0.1 || r > 0.11 {
		t.Errorf("after setMaxWait: rate %v, want about 0.1/s", r)
	}
}
