package varbin

import (
	"bytes"
	"testing"
)

// What a Writer writes reads back the same, and input cut anywhere is out of place, never a value.
func TestRoundTripAndCuts(t *testing.T) {
	var w Writer
	w.Uvarint(1 << 40)
	w.Varint(-5)
	w.Bytes([]byte("body"))
	w.String("")
	w.Bool(true)
	w.Uvarint(2) // a count of two items of at least 1 byte
	w.Bool(false)
	w.Bool(true)
	read := func(b []byte) (*Reader, []any) {
		r := NewReader(b)
		got := []any{r.Uvarint(), r.Varint(), r.Bytes(), r.String(), r.Bool()}
		for range r.Count(1) {
			got = append(got, r.Bool())
		}
		return r, got
	}
	r, got := read(w.B)
	if !r.Done() || got[0] != uint64(1<<40) || got[1] != int64(-5) || !bytes.Equal(got[2].([]byte), []byte("body")) ||
		got[3] != "" || got[4] != true || len(got) != 7 || got[5] != false || got[6] != true {
		t.Fatalf("read back %v (done %v)", got, r.Done())
	}
	if p := got[2].([]byte); cap(p) != len(p) {
		t.Errorf("Bytes' capacity %d beyond its length %d: an append would write into the input", cap(p), len(p))
	}
	for n := range len(w.B) {
		if r, _ := read(w.B[:n]); r.Done() {
			t.Errorf("input cut to %d of %d bytes read as whole", n, len(w.B))
		}
	}
	if r := NewReader([]byte{2}); r.Bool() || !r.Bad() {
		t.Error("a bool of 2 was read")
	}
	if r := NewReader([]byte{200, 1}); r.Count(1) != 0 || !r.Bad() {
		t.Error("a count larger than the input was read")
	}
}
