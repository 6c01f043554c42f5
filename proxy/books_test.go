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
	d.Init(4)
	d.Add(7, pending{request: request{id: 1}})
	mustPanic("dubbo", func() { d.Add(7, pending{request: request{id: 2}}) })

	// HTTP/2's values are its calls (package proxy/triple): any pointer does here.
	type bookedCall struct{ down uint32 }
	var h Books[uint32, *bookedCall]
	h.Init(0)
	h.Add(3, &bookedCall{down: 1})
	mustPanic("h2", func() { h.Add(3, &bookedCall{down: 5}) })
}

// Each entry leaves once: a second take, or an answer for an id never entered, finds nothing.
func TestBooksTakeOnce(t *testing.T) {
	var b Books[int64, pending]
	b.Init(0)
	for id := int64(1); id <= 5; id++ {
		b.Add(id, pending{request: request{id: id * 10}})
	}
	if p, ok := b.Take(3); !ok || p.id != 30 {
		t.Fatalf("take(3) = %v, %v; want the entry for consumer id 30", p.id, ok)
	}
	if _, ok := b.Take(3); ok {
		t.Fatal("take(3) found the entry a second time")
	}
	if _, ok := b.Get(9); ok {
		t.Fatal("get(9) found an id never entered")
	}
	got := b.TakeIf(nil, func(p pending) bool { return p.id >= 40 })
	ids := make([]int64, 0, len(got))
	for _, p := range got {
		ids = append(ids, p.id)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []int64{40, 50}) || b.Len() != 2 {
		t.Fatalf("takeIf(id >= 40) took %v and left %d; want [40 50] and 2", ids, b.Len())
	}
	rest := b.TakeAll()
	if len(rest) != 2 || rest[1].id != 10 || rest[2].id != 20 || b.Len() != 0 {
		t.Fatalf("takeAll = %v, then len %d; want ids 1 and 2, then 0", rest, b.Len())
	}
}
