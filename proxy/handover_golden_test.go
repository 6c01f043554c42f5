package proxy

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/handover/*.golden from this build")

// The snapshot a running binary hands to the next one reads the same in every later build: compactSample
// (every kind of consumer, every field set) encodes, as JSON objects and compact, to the bytes an older
// build wrote (testdata/handover, written at the move of HTTP/2 out of this package), and those bytes
// read back as the sample.
func TestSnapshotGolden(t *testing.T) {
	for _, compact := range []bool{false, true} {
		name := "sessions.json.golden"
		if compact {
			name = "sessions.compact.golden"
		}
		sn := compactSample(3)
		sn.SetCompact(compact)
		b, err := sn.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join("testdata", "handover", name)
		if *updateGolden {
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, want) {
			t.Errorf("%s: this build writes\n%q\nthe golden file has\n%q", name, b, want)
		}
		var back Snapshot
		if err := back.UnmarshalBinary(want); err != nil {
			t.Fatal(err)
		}
		back.SetCompact(compact)
		again, err := back.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again, want) {
			t.Errorf("%s read back and written again differs", name)
		}
	}
}
