package settings

import (
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/reflect/protoreflect"

	sg "github.com/stormgate/stormgate/settings/stormgatev1"
)

// Assignment is one setting given on its own, by its path: `sidecar run --set hold.timeout=10s`,
// or an injected pod's settings annotation.
type Assignment struct {
	Path  string // snake_case path, "hold.timeout"
	Value string // as it would be written in the settings file: "10s", "64MiB", "hold", "[20880]"
}

// ParseAssignment splits "path=value".
func ParseAssignment(s string) (Assignment, bool) {
	path, value, ok := strings.Cut(s, "=")
	path = strings.TrimSpace(path)
	return Assignment{Path: path, Value: value}, ok && path != ""
}

// ParseAssignments decodes assignments with the settings file's own decoder, as if each were
// written "path: value" in a file: the same names (with "did you mean"), types, enums and fixed
// choices in any case, durations and byte sizes with units. It returns the partial settings they
// set (merge them over the defaults, a file or a push as any layer), or a Problems naming each
// bad one by its path. A path set twice, or both as a section and inside it, is a problem.
func ParseAssignments(as []Assignment) (*sg.Settings, error) {
	root := &yaml.Node{Kind: yaml.MappingNode}
	var ps Problems
	for _, a := range as {
		parts := strings.Split(a.Path, ".")
		if slices.Contains(parts, "") {
			ps = append(ps, Problem{Field: a.Path, Message: "not a setting path; write section.field, e.g. hold.timeout"})
			continue
		}
		value, msg := assignedValue(a)
		if msg != "" {
			ps = append(ps, Problem{Field: a.Path, Message: msg})
			continue
		}
		m := root
		for i, name := range parts {
			var next *yaml.Node
			for j := 0; j+1 < len(m.Content); j += 2 {
				if m.Content[j].Value == name {
					next = m.Content[j+1]
				}
			}
			if i == len(parts)-1 {
				if next != nil {
					ps = append(ps, Problem{Field: a.Path, Message: "set twice"})
				} else {
					m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: name}, value)
				}
				break
			}
			if next == nil {
				next = &yaml.Node{Kind: yaml.MappingNode}
				m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: name}, next)
			} else if next.Kind != yaml.MappingNode {
				ps = append(ps, Problem{Field: a.Path, Message: "set twice (as " + strings.Join(parts[:i+1], ".") + " and inside it)"})
				break
			}
			m = next
		}
	}
	if len(ps) > 0 {
		return nil, ps
	}
	s, _, err := DecodeYAML(root, "")
	return s, err
}

// assignedValue is the YAML node for an assignment's value, or why there is none. A field whose
// value is text (strings, enums, durations, byte sizes) takes the value verbatim, so that
// "[::]:15006" is an address and "off" a string, not YAML's list or boolean; any other is read as
// YAML ("4", "true", "[20880, 20881]", "{timeout: 3s}").
func assignedValue(a Assignment) (*yaml.Node, string) {
	if strings.TrimSpace(a.Value) == "" {
		return nil, "no value; unset fields keep the value of the layer below"
	}
	if fd := fieldDesc(a.Path); fd != nil && !fd.IsList() && (fd.Kind() == protoreflect.StringKind ||
		fd.Kind() == protoreflect.EnumKind || IsByteSize(fd) || (fd.Message() != nil && isAtomic(fd.Message()))) {
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: strings.TrimSpace(a.Value)}, ""
	}
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(a.Value), &doc); err != nil {
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		if _, after, ok := strings.Cut(msg, ": "); ok && strings.HasPrefix(msg, "line ") {
			msg = after // the value's own line 1
		}
		return nil, msg
	}
	if len(doc.Content) == 0 || isNull(doc.Content[0]) {
		return nil, "no value; unset fields keep the value of the layer below"
	}
	noLines(doc.Content[0])
	return doc.Content[0], ""
}

// noLines clears the line numbers yaml gave a value parsed on its own: a problem with it has no
// file line to name.
func noLines(n *yaml.Node) {
	n.Line, n.Column = 0, 0
	for _, c := range n.Content {
		noLines(c)
	}
}

// SetPaths lists the leaf fields s sets, in schema order.
func SetPaths(s *sg.Settings) []string {
	var out []string
	m := s.ProtoReflect()
	for _, p := range settingPaths() {
		if _, ok := lookup(m, p); ok {
			out = append(out, p)
		}
	}
	return out
}

// Suggest returns the candidate nearest to a misspelt name within a few edits (fewer for short
// names), or "": for "did you mean" in errors about names the schema derives (fields,
// annotations).
func Suggest(name string, candidates []string) string {
	best, bestD := "", min(3, max(1, len(name)/3))+1
	for _, c := range candidates {
		if dd := editDistance(name, c); dd < bestD {
			best, bestD = c, dd
		}
	}
	return best
}

// fieldNames lists the names of a message's fields.
func fieldNames(fields protoreflect.FieldDescriptors) []string {
	out := make([]string, fields.Len())
	for i := range out {
		out[i] = string(fields.Get(i).Name())
	}
	return out
}
