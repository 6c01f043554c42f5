// Package varbin is the compact binary form of Stormgate's handover state (an HTTP/2 connection's
// state, the data plane's consumers): unsigned and signed varints, length-prefixed byte strings and
// booleans, written by a Writer and read by a Reader whose first error sticks. It exists because
// encoding/json's objects cost the upgrade's pause: tens of microseconds per consumer where this form
// costs about one.
package varbin

import "encoding/binary"

// Writer appends to B.
type Writer struct{ B []byte }

// Uvarint appends x.
func (w *Writer) Uvarint(x uint64) { w.B = binary.AppendUvarint(w.B, x) }

// Varint appends x.
func (w *Writer) Varint(x int64) { w.B = binary.AppendVarint(w.B, x) }

// Bytes appends p's length, then p.
func (w *Writer) Bytes(p []byte) {
	w.Uvarint(uint64(len(p)))
	w.B = append(w.B, p...)
}

// String appends s's length, then s.
func (w *Writer) String(s string) {
	w.Uvarint(uint64(len(s)))
	w.B = append(w.B, s...)
}

// Bool appends 1 or 0.
func (w *Writer) Bool(x bool) {
	if x {
		w.B = append(w.B, 1)
	} else {
		w.B = append(w.B, 0)
	}
}

// Reader reads what a Writer wrote. After the first thing out of place (input cut short, a value over
// its limit) every read returns zero values and Bad reports true.
type Reader struct {
	b   []byte
	bad bool
}

// NewReader reads b.
func NewReader(b []byte) *Reader { return &Reader{b: b} }

// Bad reports whether anything was out of place.
func (r *Reader) Bad() bool { return r.bad }

// Done reports whether everything was read and nothing was out of place.
func (r *Reader) Done() bool { return !r.bad && len(r.b) == 0 }

// Fail marks the input out of place (a check of the caller's own failed): reads return zero values.
func (r *Reader) Fail() {
	r.bad, r.b = true, nil
}

// Uvarint reads an unsigned varint.
func (r *Reader) Uvarint() uint64 { return r.UvarintMax(^uint64(0)) }

// UvarintMax reads an unsigned varint of at most limit.
func (r *Reader) UvarintMax(limit uint64) uint64 {
	x, n := binary.Uvarint(r.b)
	if n <= 0 || x > limit {
		r.Fail()
		return 0
	}
	r.b = r.b[n:]
	return x
}

// Varint reads a signed varint.
func (r *Reader) Varint() int64 {
	x, n := binary.Varint(r.b)
	if n <= 0 {
		r.Fail()
		return 0
	}
	r.b = r.b[n:]
	return x
}

// Bytes reads a length-prefixed byte string. It aliases the input, with its capacity cut to its length
// (appending to it copies); nil when empty.
func (r *Reader) Bytes() []byte {
	n := r.Uvarint()
	if r.bad || n > uint64(len(r.b)) {
		r.Fail()
		return nil
	}
	p := r.b[:n:n]
	r.b = r.b[n:]
	if n == 0 {
		return nil
	}
	return p
}

// String reads a length-prefixed string.
func (r *Reader) String() string { return string(r.Bytes()) }

// Bool reads 1 or 0.
func (r *Reader) Bool() bool { return r.UvarintMax(1) == 1 }

// Count reads a count of items that take at least min bytes each: more than the input can hold is out
// of place (so a count never makes a caller allocate more than the input's size warrants).
func (r *Reader) Count(min int) int {
	return int(r.UvarintMax(uint64(len(r.b) / max(min, 1))))
}
