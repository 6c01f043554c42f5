package proxy

import (
	"fmt"
	"iter"
	"maps"
)

// books is one connection's table of calls by wire id: what each id it carries answers. Both protocols
// keep their pending books in it (issue 26, step 4b), with the same rules:
//
//	| table                    | key (the wire id)                        | value        | guarded by
//	|--------------------------|------------------------------------------|--------------|-------------
//	| upConn.pending (Dubbo)   | the upstream request id (upConn.nextID)  | pending      | upConn.mu
//	| h2Upstream.calls         | the upstream stream id (Conn.OpenStream) | *h2Call      | h2Pool.mu
//	| h2Session.calls          | the consumer's stream id                 | *h2Call      | h2Session.mu
//
// An id is entered once (add) and leaves once (take, or takeAll when the connection ends): whoever takes
// it owns the call and settles it (pending.go). An answer whose id is not in the table (it ended, or was
// never sent) finds nothing and can reach no other call, because no connection reuses an id: Dubbo's ids
// count up from a random start, HTTP/2's stream ids are odd and increasing (RFC 9113 §5.1.1). add checks that rule at no
// cost (the length of the map must grow) and panics when it is broken: a reused id would give one call
// another's answer, the worst thing a proxy can do, and Stormgate would rather stop than do it.
//
// The zero value is not usable: init first. Not safe for concurrent use (the guard above).
type books[K int64 | uint32, V any] struct {
	m map[K]V
}

// init makes an empty table sized for n entries.
func (b *books[K, V]) init(n int) { b.m = make(map[K]V, n) }

// add enters v under id, which must not be in the table (above).
func (b *books[K, V]) add(id K, v V) {
	n := len(b.m)
	b.m[id] = v
	if len(b.m) == n {
		panic(fmt.Sprintf("proxy: wire id %d entered twice in one connection's books", id))
	}
}

// get returns the entry for id without removing it.
func (b *books[K, V]) get(id K) (V, bool) {
	v, ok := b.m[id]
	return v, ok
}

// take removes and returns the entry for id.
func (b *books[K, V]) take(id K) (V, bool) {
	v, ok := b.m[id]
	if ok {
		delete(b.m, id)
	}
	return v, ok
}

// takeAll empties the table and returns what it held (the connection ended). The table takes no entry
// afterwards until init.
func (b *books[K, V]) takeAll() map[K]V {
	m := b.m
	b.m = nil
	return m
}

// takeIf removes and appends to dst every entry for which take says so.
func (b *books[K, V]) takeIf(dst []V, take func(V) bool) []V {
	for id, v := range b.m {
		if take(v) {
			delete(b.m, id)
			dst = append(dst, v)
		}
	}
	return dst
}

func (b *books[K, V]) len() int { return len(b.m) }

// all is every entry, in no order. The table may not change while it is read.
func (b *books[K, V]) all() iter.Seq2[K, V] { return maps.All(b.m) }

// values is every entry's value, in no order. The table may not change while it is read.
func (b *books[K, V]) values() iter.Seq[V] { return maps.Values(b.m) }
