package webhook

import (
	"encoding/json"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
)

// TestDiffApplies: for each pair, the patch applied with evanphx/json-patch (the API server's library)
// gives exactly the second document, and the operations are the small ones where that is safe.
func TestDiffApplies(t *testing.T) {
	for _, tc := range []struct {
		name, from, to string
		ops            string // substring of the patch
	}{
		{"add key with slash and tilde", `{"a":{}}`, `{"a":{"x/y~z":1}}`, `"path":"/a/x~1y~0z"`},
		{"remove key", `{"a":1,"b":2}`, `{"a":1}`, `{"op":"remove","path":"/b"}`},
		{"replace with null", `{"a":1}`, `{"a":null}`, `{"op":"replace","path":"/a","value":null}`},
		{"named insert at front", `{"c":[{"name":"app"}]}`, `{"c":[{"name":"init"},{"name":"app"}]}`, `{"op":"add","path":"/c/0"`},
		{"named append and patch", `{"c":[{"name":"a","v":1},{"name":"b"}]}`, `{"c":[{"name":"a","v":2},{"name":"b"},{"name":"z"}]}`, `"path":"/c/0/v"`},
		{"named remove middle", `{"c":[{"name":"a"},{"name":"b"},{"name":"c"}]}`, `{"c":[{"name":"a"},{"name":"c"}]}`, `{"op":"remove","path":"/c/1"}`},
		{"named reorder, same length: positional", `{"c":[{"name":"a"},{"name":"b"}]}`, `{"c":[{"name":"b"},{"name":"a"}]}`, `"path":"/c/0/name"`},
		{"named reorder and insert replaces", `{"c":[{"name":"a"},{"name":"b"}]}`, `{"c":[{"name":"b"},{"name":"a"},{"name":"c"}]}`, `{"op":"replace","path":"/c"`},
		{"unnamed same length", `{"p":[{"port":1},{"port":2}]}`, `{"p":[{"port":1},{"port":3}]}`, `"path":"/p/1/port"`},
		{"unnamed longer replaces", `{"p":[1,2]}`, `{"p":[1,2,3]}`, `{"op":"replace","path":"/p"`},
		{"type change", `{"a":[1]}`, `{"a":{"b":1}}`, `{"op":"replace","path":"/a"`},
		{"duplicate names positional", `{"e":[{"name":"X","v":1},{"name":"X","v":2}]}`, `{"e":[{"name":"X","v":1},{"name":"X","v":3}]}`, `"path":"/e/1/v"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ops, err := Diff([]byte(tc.from), []byte(tc.to))
			if err != nil {
				t.Fatal(err)
			}
			raw, err := json.Marshal(ops)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(raw), tc.ops) {
				t.Errorf("patch %s lacks %s", raw, tc.ops)
			}
			p, err := jsonpatch.DecodePatch(raw)
			if err != nil {
				t.Fatal(err)
			}
			got, err := p.Apply([]byte(tc.from))
			if err != nil {
				t.Fatalf("%s does not apply: %v", raw, err)
			}
			if !jsonpatch.Equal(got, []byte(tc.to)) {
				t.Fatalf("patch %s gives %s, want %s", raw, got, tc.to)
			}
		})
	}
	if ops, err := Diff([]byte(`{"a":[1,{"b":null}]}`), []byte(`{"a":[1,{"b":null}]}`)); err != nil || len(ops) != 0 {
		t.Errorf("equal documents: %v %v", ops, err)
	}
	if _, err := Diff([]byte(`{`), []byte(`{}`)); err == nil {
		t.Error("bad JSON accepted")
	}
}
