package proxy

import (
	"slices"
	"strings"
	"testing"
)

// An id is entered once: a second add of a live id would give one call the other's answer, so it panics
// (books.go; nothing in Stormgate recovers, so the process stops). Both tables' key types.
func TestBooksIDEnteredTwicePanics(t *testing.T) {
	mustPanic := func(name string, f func()) {
		t.Helper()
		defer func() {
			r := recover()
			if r == nil {
				t.Fatalf("%s: a second add of a live id did not panic", name)
			}
			if msg, _ := r.(string); !strings.Contains(msg, "entered twice") {
				t.Fatalf("%s: panic %v, want one naming the id entered twice", name, r)
			}
		}()
		f()
	}
	var d pendingTable
	d.init(4)
	d.add(7, pending{request: request{id: 1}})
	mustPanic("dubbo", func() { d.add(7, pending{request: request{id: 2}}) })

	var h books[uint32, *h2Call]
	h.init(0)
	h.add(3, &h2Call{down: 1})
	mustPanic("h2", func() { h.add(3, &h2Call{down: 5}) })
}

// Each entry leaves once: a second take, or an answer for an id never entered, finds nothing.
func TestBooksTakeOnce(t *testing.T) {
	var b books[int64, pending]
	b.init(0)
	for id := int64(1); id <= 5; id++ {
		b.add(id, pending{request: request{id: id * 10}})
	}
	if p, ok := b.take(3); !ok || p.id != 30 {
		t.Fatalf("take(3) = %v, %v; want the entry for consumer id 30", p.id, ok)
	}
	if _, ok := b.take(3); ok {
		t.Fatal("take(3) found the entry a second time")
	}
	if _, ok := b.get(9); ok {
		t.Fatal("get(9) found an id never entered")
	}
	got := b.takeIf(nil, func(p pending) bool { return p.id >= 40 })
	ids := make([]int64, 0, len(got))
	for _, p := range got {
		ids = append(ids, p.id)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []int64{40, 50}) || b.len() != 2 {
		t.Fatalf("takeIf(id >= 40) took %v and left %d; want [40 50] and 2", ids, b.len())
	}
	rest := b.takeAll()
	if len(rest) != 2 || rest[1].id != 10 || rest[2].id != 20 || b.len() != 0 {
		t.Fatalf("takeAll = %v, then len %d; want ids 1 and 2, then 0", rest, b.len())
	}
}
