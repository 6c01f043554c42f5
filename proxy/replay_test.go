package proxy

import (
	"bytes"
	"testing"
)

func TestReplayRing(t *testing.T) {
	var r replayRing
	if _, ok := r.copyOut(0, 1); ok {
		t.Fatal("empty ring returned a frame")
	}
	frame := func(i, n int) []byte { return bytes.Repeat([]byte{byte(i)}, n) }
	var off uint64
	offs := map[int]uint64{}
	for i := range 100 {
		n := 1000 + i*7
		offs[i] = off
		r.put(off, frame(i, n))
		off += uint64(n) + 16 // a control frame in between, never put
	}
	for i := range 100 {
		n := 1000 + i*7
		b, ok := r.copyOut(offs[i], n)
		inRing := off-16-offs[i] <= ReplaySize
		if ok != inRing {
			t.Fatalf("frame %d at %d: ok=%v, want %v", i, offs[i], ok, inRing)
		}
		if ok && !bytes.Equal(b, frame(i, n)) {
			t.Fatalf("frame %d came back changed", i)
		}
	}
	if _, ok := r.copyOut(offs[99], 0); ok {
		t.Fatal("an empty frame was returned")
	}
	r.put(off, frame(1, ReplaySize+1))
	if _, ok := r.copyOut(off, ReplaySize+1); ok {
		t.Fatal("a frame larger than the ring was kept")
	}
}
