package webhook

import (
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// Operation is one RFC 6902 JSON patch operation.
type Operation struct {
	Op    string // add, remove or replace
	Path  string // JSON pointer
	Value any    // for add and replace (null included)
}

// MarshalJSON writes the operation; add and replace always carry a value, even null.
func (o Operation) MarshalJSON() ([]byte, error) {
	if o.Op == "remove" {
		return json.Marshal(struct {
			Op   string `json:"op"`
			Path string `json:"path"`
		}{o.Op, o.Path})
	}
	return json.Marshal(struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value"`
	}{o.Op, o.Path, o.Value})
}

// Diff returns the JSON patch that turns the JSON document from into to. It is small where that is
// safe: objects are compared key by key, arrays of named objects (containers, volumes, env) element by
// element with insertions and removals, other arrays position by position when their lengths match;
// anything else is replaced whole. Touching only what changed leaves alone every field this binary's
// Kubernetes types do not know, on the objects it did not change.
func Diff(from, to []byte) ([]Operation, error) {
	var a, b any
	if err := json.Unmarshal(from, &a); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(to, &b); err != nil {
		return nil, err
	}
	return diff("", a, b), nil
}

func diff(path string, a, b any) []Operation {
	switch av := a.(type) {
	case map[string]any:
		if bv, ok := b.(map[string]any); ok {
			return diffObject(path, av, bv)
		}
	case []any:
		if bv, ok := b.([]any); ok {
			return diffArray(path, av, bv)
		}
	}
	if reflect.DeepEqual(a, b) {
		return nil
	}
	return []Operation{{Op: "replace", Path: path, Value: b}}
}

func diffObject(path string, a, b map[string]any) []Operation {
	var ops []Operation
	keys := make([]string, 0, len(a)+len(b))
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		p := path + "/" + escape(k)
		av, inA := a[k]
		bv, inB := b[k]
		switch {
		case inA && inB:
			ops = append(ops, diff(p, av, bv)...)
		case inA:
			ops = append(ops, Operation{Op: "remove", Path: p})
		default:
			ops = append(ops, Operation{Op: "add", Path: p, Value: bv})
		}
	}
	return ops
}

// diffArray matches elements by their "name" when both arrays are lists of uniquely named objects
// whose common names keep their order: it patches the common ones in place (at their old positions),
// removes the vanished ones from the end backwards, then adds the new ones at their final positions in
// increasing order, which leaves exactly b. Same-length arrays of anything else are patched position by
// position; any other change replaces the array.
func diffArray(path string, a, b []any) []Operation {
	na, okA := names(a)
	nb, okB := names(b)
	if okA && okB && sameOrder(na, nb) {
		inB := map[string]int{}
		for j, n := range nb {
			inB[n] = j
		}
		inA := map[string]bool{}
		var ops []Operation
		for i, n := range na {
			inA[n] = true
			if j, ok := inB[n]; ok {
				ops = append(ops, diff(path+"/"+strconv.Itoa(i), a[i], b[j])...)
			}
		}
		for i := len(na) - 1; i >= 0; i-- {
			if _, ok := inB[na[i]]; !ok {
				ops = append(ops, Operation{Op: "remove", Path: path + "/" + strconv.Itoa(i)})
			}
		}
		for j, n := range nb {
			if !inA[n] {
				ops = append(ops, Operation{Op: "add", Path: path + "/" + strconv.Itoa(j), Value: b[j]})
			}
		}
		return ops
	}
	if len(a) == len(b) {
		var ops []Operation
		for i := range a {
			ops = append(ops, diff(path+"/"+strconv.Itoa(i), a[i], b[i])...)
		}
		return ops
	}
	return []Operation{{Op: "replace", Path: path, Value: b}}
}

// names returns the "name" of every element, if every element is an object with a distinct one.
func names(arr []any) ([]string, bool) {
	out := make([]string, len(arr))
	seen := map[string]bool{}
	for i, e := range arr {
		m, ok := e.(map[string]any)
		if !ok {
			return nil, false
		}
		n, ok := m["name"].(string)
		if !ok || seen[n] {
			return nil, false
		}
		seen[n], out[i] = true, n
	}
	return out, true
}

// sameOrder reports whether the names a and b have in common appear in the same order in both.
func sameOrder(a, b []string) bool {
	inB := map[string]bool{}
	for _, n := range b {
		inB[n] = true
	}
	var common []string
	for _, n := range a {
		if inB[n] {
			common = append(common, n)
		}
	}
	k := 0
	for _, n := range b {
		if k < len(common) && n == common[k] {
			k++
		}
	}
	return k == len(common)
}

// escape makes a key a JSON pointer token (RFC 6901): ~ is ~0, / is ~1.
func escape(k string) string { return strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1") }
