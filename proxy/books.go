package proxy

import (
	"fmt"
	"iter"
	"maps"
)

// Books is one connection's table of calls by wire id: what each id it carries answers. Both protocols
// keep their pending books in it (issue 26, step 4b), with the same rules:
//
//	| table                    | key (the wire id)                        | value        | guarded by
//	|--------------------------|------------------------------------------|--------------|-------------
//	| upConn.pending (Dubbo)   | the upstream request id (upConn.nextID)  | pending      | upConn.mu
//	| h2Upstream.calls         | the upstream stream id (Conn.OpenStream) | *h2Call      | h2Pool.mu
//	| h2Session.calls          | the consumer's stream id                 | *h2Call      | h2Session.mu
//
// An id is entered once (Add) and leaves once (Take, or TakeAll when the connection ends): whoever takes
// it owns the call and settles it (pending.go). An answer whose id is not in the table (it ended, or was
// never sent) finds nothing and can reach no other call, because no connection reuses an id: Dubbo's ids
// count up from a random start, HTTP/2's stream ids are odd and increasing (RFC 9113 §5.1.1). Add checks that rule at no
// cost (the length of the map must grow) and panics when it is broken: a reused id would give one call
// another's answer, the worst thing a proxy can do, and Stormgate would rather stop than do it.
//
// The zero value is not usable: Init first. Not safe for concurrent use (the guard above).
type Books[K int64 | uint32, V any] struct {
	m map[K]V
}

// Init makes an empty table sized for n entries.
func (b *Books[K, V]) Init(n int) { b.m = make(map[K]V, n) }

// Add enters v under id, which must not be in the table (above).
func (b *Books[K, V]) Add(id K, v V) {
	n := len(b.m)
	b.m[id] = v
	if len(b.m) == n {
		panic(fmt.Sprintf("proxy: wire id %d entered twice in one connection's books", id))
	}
}

// Get returns the entry for id without removing it.
func (b *Books[K, V]) Get(id K) (V, bool) {
	v, ok := b.m[id]
	return v, ok
}

// Take removes and returns the entry for id.
func (b *Books[K, V]) Take(id K) (V, bool) {
	v, ok := b.m[id]
	if ok {
		delete(b.m, id)
	}
	return v, ok
}

// TakeAll empties the table and returns what it held (the connection ended). The table takes no entry
// afterwards until init.
func (b *Books[K, V]) TakeAll() map[K]V {
	m := b.m
	b.m = nil
	return m
}

// TakeIf removes and appends to dst every entry for which take says so.
func (b *Books[K, V]) TakeIf(dst []V, take func(V) bool) []V {
	for id, v := range b.m {
		if take(v) {
			delete(b.m, id)
			dst = append(dst, v)
		}
	}
	return dst
}

func (b *Books[K, V]) Len() int { return len(b.m) }

// All is every entry, in no order. The table may not change while it is read.
func (b *Books[K, V]) All() iter.Seq2[K, V] { return maps.All(b.m) }

// Values is every entry's value, in no order. The table may not change while it is read.
func (b *Books[K, V]) Values() iter.Seq[V] { return maps.Values(b.m) }
