package cpfile

import (
	"os"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/stormgate/stormgate/settings"
	sg "github.com/stormgate/stormgate/settings/stormgatev1"
	"github.com/stormgate/stormgate/xds"
)

// ControlPlaneFile is the reference control plane's configuration. Each
// level is a partial Settings merged over the one before it, field by field:
//
//	default:                 # every node
//	  keepalive: { upstream_interval: 10s }
//	namespaces:              # nodes reporting this namespace
//	  shop:
//	    hold: { timeout: 2s }
//	selectors:               # nodes matching every condition of match
//	  - name: payment
//	    match: { namespace: shop, labels: { app: payment } }
//	    settings:
//	      admission: { accept_rate: 5000 }
//	nodes:                   # one node id
//	  provider-0.shop:
//	    upstream: { connections: 8 }
//
// Precedence: default < namespaces < selectors < nodes. Among the selectors
// that match a node, a more specific one (its match includes every condition
// of the other) wins; two that can match the same node without one being
// more specific must not set a field to different values.
type File struct {
	Default    *sg.Settings
	Namespaces map[string]*sg.Settings
	Selectors  []*Selector
	Nodes      map[string]*sg.Settings

	// origins maps "namespaces.<ns>", "selectors.<name>" and "nodes.<id>"
	// to where they are defined.
	origins map[string]Origin
}

func newFile() *File {
	return &File{Namespaces: map[string]*sg.Settings{}, Nodes: map[string]*sg.Settings{},
		origins: map[string]Origin{}}
}

// Resolution is what a control-plane file serves one node: the partial
// settings (every level that applies merged in precedence order, without the
// built-in defaults, so fields the file does not set keep the sidecar's own
// value) and the entries merged, lowest precedence first.
type Resolution struct {
	Overlay *sg.Settings
	From    []string // "default", "namespaces.<ns>", "selectors.<name>", "nodes.<id>"
}

// Level is the most specific level that applied: "node", "selector",
// "namespace" or "default".
func (r Resolution) Level() string {
	last := r.From[len(r.From)-1]
	switch {
	case strings.HasPrefix(last, "nodes."):
		return "node"
	case strings.HasPrefix(last, "selectors."):
		return "selector"
	case strings.HasPrefix(last, "namespaces."):
		return "namespace"
	}
	return "default"
}

// Resolve returns what the file serves to node n.
func (f *File) Resolve(n xds.NodeInfo) Resolution {
	r := f.ResolveClass(n)
	if s, ok := f.Nodes[n.ID]; ok {
		r.Overlay = settings.Merge(r.Overlay, s)
		r.From = append(r.From, "nodes."+n.ID)
	}
	return r
}

// ResolveClass is Resolve without the nodes: level: the same for every node
// with n's metadata.
func (f *File) ResolveClass(n xds.NodeInfo) Resolution {
	r := Resolution{Overlay: settings.Merge(nil, f.Default), From: []string{"default"}}
	if s, ok := f.Namespaces[n.Namespace]; ok && n.Namespace != "" {
		r.Overlay = settings.Merge(r.Overlay, s)
		r.From = append(r.From, "namespaces."+n.Namespace)
	}
	for _, s := range matching(f.Selectors, n) {
		r.Overlay = settings.Merge(r.Overlay, s.Settings)
		r.From = append(r.From, "selectors."+s.Name)
	}
	return r
}

// For returns the complete settings served to a node that reports only its
// id: settings.Defaults(), then the file's default, then the node's entry.
func (f *File) For(nodeID string) *sg.Settings {
	return settings.WithDefaults(f.Overlay(nodeID))
}

// Overlay returns what the control plane serves to a node that reports only
// its id (no namespace, labels, cluster or ports): the file's default with
// the node's entry merged over it.
func (f *File) Overlay(nodeID string) *sg.Settings {
	return f.Resolve(xds.NodeInfo{ID: nodeID}).Overlay
}

// NodeIDs returns the node ids with an entry, sorted.
func (f *File) NodeIDs() []string {
	ids := make([]string, 0, len(f.Nodes))
	for id := range f.Nodes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// LoadControlPlaneFile reads and fully validates a control-plane file (see
// ParseControlPlaneYAML).
func Load(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(data)
}

// ParseControlPlaneYAML reads a control-plane file and checks it: every
// entry's effective settings (merged over the file's default and the
// built-in defaults) must pass Validate; no entry may set a field that
// cannot change live (every sidecar would NACK it); selectors must be
// orderable (checkSelectorPairs). Problems name the field as
// "default.<path>", "namespaces.<ns>.<path>", "selectors.<name>.<path>" or
// "nodes.<id>.<path>", with its line.
func Parse(data []byte) (*File, error) {
	f, err := parseBytes(data)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// parseControlPlaneBytes is ParseControlPlaneYAML that also returns, with its
// problems, what it could read of an invalid file (nil when even that failed):
// a directory's cross-file checks still see its keys.
func parseBytes(data []byte) (*File, error) {
	root, err := settings.ParseYAMLRoot(data)
	if err != nil {
		return nil, err
	}
	return parse(root)
}

// controlPlaneKeys are the top-level keys of a control-plane file.
var controlPlaneKeys = []string{"default", "namespaces", "selectors", "nodes"}

func isDoc(root *yaml.Node) bool {
	if root.Kind != yaml.MappingNode {
		return false
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		for _, k := range controlPlaneKeys {
			if root.Content[i].Value == k {
				return true
			}
		}
	}
	return false
}

// looksLikeSettings reports whether every top-level key of a mapping is a
// top-level field of the settings schema.
func looksLikeSettings(root *yaml.Node) bool {
	fields := (&sg.Settings{}).ProtoReflect().Descriptor().Fields()
	for i := 0; i+1 < len(root.Content); i += 2 {
		if fields.ByName(protoreflect.Name(root.Content[i].Value)) == nil {
			return false
		}
	}
	return len(root.Content) > 0
}

// entry is one decoded level of a file, for validation.
type entry struct {
	key    string       // "default", "namespaces.shop", ...
	s      *sg.Settings // what it sets
	pos    map[string]int
	ns     string // selectors: the namespace its match requires
	origin Origin
}

func parse(root *yaml.Node) (*File, error) {
	f := newFile()
	if isNull(root) {
		return f, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, settings.Problems{{Message: "a control-plane file must be a mapping with default:, namespaces:, selectors: and nodes:", Line: root.Line}}
	}
	if looksLikeSettings(root) {
		return nil, settings.Problems{{Line: root.Content[0].Line, Message: "this is a sidecar settings file (its top level is " +
			root.Content[0].Value + ": ...), not a control-plane file; to serve these settings to every node, indent them under default:"}}
	}
	var ps settings.Problems
	var entries []entry
	seen := map[string]bool{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if seen[k.Value] {
			ps = append(ps, settings.Problem{Field: k.Value, Message: "set twice", Line: k.Line})
			continue
		}
		seen[k.Value] = true
		if v.Kind == yaml.AliasNode {
			v = v.Alias
		}
		switch k.Value {
		case "default":
			s, pos, err := settings.DecodeYAML(v, "default.")
			if err != nil {
				ps = append(ps, err.(settings.Problems)...)
				continue
			}
			f.Default = s
			entries = append(entries, entry{key: "default", s: s, pos: pos, origin: Origin{Line: k.Line}})
		case "namespaces", "nodes":
			entries = append(entries, f.parseKeyed(k.Value, v, &ps)...)
		case "selectors":
			entries = append(entries, f.parseSelectors(v, &ps)...)
		default:
			msg := "unknown field; a control-plane file has default:, namespaces:, selectors: and nodes:"
			if s := settings.Suggest(k.Value, controlPlaneKeys); s != "" {
				msg += "; did you mean " + s + "?"
			}
			ps = append(ps, settings.Problem{Field: k.Value, Message: msg, Line: k.Line})
		}
	}
	ps = append(ps, f.checkEntries(entries)...)
	ps = append(ps, checkSelectorPairs(f.Selectors, false)...)
	if len(ps) > 0 {
		return f, ps // what was read, for a directory's cross-file checks (ParseControlPlaneYAML drops it)
	}
	return f, nil
}

// parseKeyed reads namespaces: or nodes: (a mapping of name to settings).
func (f *File) parseKeyed(section string, v *yaml.Node, ps *settings.Problems) []entry {
	if isNull(v) {
		return nil
	}
	what := map[string]string{"namespaces": "namespace", "nodes": "node id"}[section]
	if v.Kind != yaml.MappingNode {
		*ps = append(*ps, settings.Problem{Field: section, Message: "must be a mapping of " + what + " to settings", Line: v.Line})
		return nil
	}
	dst := map[string]map[string]*sg.Settings{"namespaces": f.Namespaces, "nodes": f.Nodes}[section]
	var out []entry
	for j := 0; j+1 < len(v.Content); j += 2 {
		kn := v.Content[j]
		key := section + "." + kn.Value
		if kn.Value == "" {
			*ps = append(*ps, settings.Problem{Field: key, Message: what + " empty", Line: kn.Line})
			continue
		}
		if o, dup := f.origins[key]; dup {
			*ps = append(*ps, settings.Problem{Field: key, Message: "set twice (first at " + o.String() + ")", Line: kn.Line})
			continue
		}
		f.origins[key] = Origin{Line: kn.Line}
		s, pos, err := settings.DecodeYAML(v.Content[j+1], key+".")
		if err != nil {
			*ps = append(*ps, err.(settings.Problems)...)
			continue
		}
		dst[kn.Value] = s
		out = append(out, entry{key: key, s: s, pos: pos, origin: Origin{Line: kn.Line}})
	}
	return out
}

// parseSelectors reads selectors: a list of {name, match, settings}.
func (f *File) parseSelectors(v *yaml.Node, ps *settings.Problems) []entry {
	if isNull(v) {
		return nil
	}
	if v.Kind != yaml.SequenceNode {
		*ps = append(*ps, settings.Problem{Field: "selectors", Message: "must be a list of {name, match, settings}", Line: v.Line})
		return nil
	}
	var out []entry
	for i, item := range v.Content {
		if item.Kind == yaml.AliasNode {
			item = item.Alias
		}
		field := "selectors[" + strconv.Itoa(i) + "]"
		if item.Kind != yaml.MappingNode {
			*ps = append(*ps, settings.Problem{Field: field, Message: "must be a mapping with name, match and settings", Line: item.Line})
			continue
		}
		var name, match, body *yaml.Node
		bad := false
		for j := 0; j+1 < len(item.Content); j += 2 {
			k, val := item.Content[j], item.Content[j+1]
			if val.Kind == yaml.AliasNode {
				val = val.Alias
			}
			slot := map[string]**yaml.Node{"name": &name, "match": &match, "settings": &body}[k.Value]
			switch {
			case slot == nil:
				msg := "unknown field; a selector has name, match and settings"
				if s := settings.Suggest(k.Value, []string{"name", "match", "settings"}); s != "" {
					msg += "; did you mean " + s + "?"
				}
				*ps = append(*ps, settings.Problem{Field: field + "." + k.Value, Message: msg, Line: k.Line})
				bad = true
			case *slot != nil:
				*ps = append(*ps, settings.Problem{Field: field + "." + k.Value, Message: "set twice", Line: k.Line})
				bad = true
			default:
				*slot = val
			}
		}
		if name == nil || name.Kind != yaml.ScalarNode || name.Value == "" {
			*ps = append(*ps, settings.Problem{Field: field + ".name", Message: "missing; every selector needs a name (it is logged for each node it matches)", Line: item.Line})
			continue
		}
		key := "selectors." + name.Value
		if o, dup := f.origins[key]; dup {
			*ps = append(*ps, settings.Problem{Field: key, Message: "name used twice (first at " + o.String() + ")", Line: name.Line})
			continue
		}
		f.origins[key] = Origin{Line: item.Line}
		m, mok := parseMatch(match, key, item.Line, ps)
		if body == nil {
			*ps = append(*ps, settings.Problem{Field: key + ".settings", Message: "missing; a selector needs settings", Line: item.Line})
			continue
		}
		s, pos, err := settings.DecodeYAML(body, key+".")
		if err != nil {
			*ps = append(*ps, err.(settings.Problems)...)
			continue
		}
		if !mok || bad {
			continue
		}
		sel := &Selector{Name: name.Value, Match: m, Settings: s, Origin: Origin{Line: item.Line}}
		f.Selectors = append(f.Selectors, sel)
		out = append(out, entry{key: key, s: s, pos: pos, ns: m.Namespace, origin: sel.Origin})
	}
	return out
}

// parseMatch reads a selector's match: {namespace, cluster, port, labels}.
func parseMatch(n *yaml.Node, key string, line int, ps *settings.Problems) (Match, bool) {
	var m Match
	field := key + ".match"
	if n == nil || isNull(n) {
		*ps = append(*ps, settings.Problem{Field: field, Message: "missing; give at least one of labels, cluster, port (and optionally namespace); for every node use default:", Line: line})
		return m, false
	}
	if n.Kind != yaml.MappingNode {
		*ps = append(*ps, settings.Problem{Field: field, Message: "must be a mapping with namespace, cluster, port and/or labels", Line: n.Line})
		return m, false
	}
	ok := true
	bad := func(k *yaml.Node, msg string) {
		*ps = append(*ps, settings.Problem{Field: field + "." + k.Value, Message: msg, Line: k.Line})
		ok = false
	}
	for j := 0; j+1 < len(n.Content); j += 2 {
		k, v := n.Content[j], n.Content[j+1]
		if v.Kind == yaml.AliasNode {
			v = v.Alias
		}
		switch k.Value {
		case "namespace", "cluster":
			if v.Kind != yaml.ScalarNode || v.Tag != "!!str" || v.Value == "" {
				bad(k, "must be a non-empty string")
				continue
			}
			if k.Value == "namespace" {
				m.Namespace = v.Value
			} else {
				m.Cluster = v.Value
			}
		case "port":
			p, err := strconv.Atoi(v.Value)
			if v.Kind != yaml.ScalarNode || v.Tag != "!!int" || err != nil || p < 1 || p > 65535 {
				bad(k, strconv.Quote(v.Value)+" is not a port; must be between 1 and 65535 (a provider port the sidecar forwards to)")
				continue
			}
			m.Port = int32(p)
		case "labels":
			if v.Kind != yaml.MappingNode || len(v.Content) == 0 {
				bad(k, "must be a non-empty mapping of label to value")
				continue
			}
			m.Labels = map[string]string{}
			for i := 0; i+1 < len(v.Content); i += 2 {
				lk, lv := v.Content[i], v.Content[i+1]
				if lv.Kind != yaml.ScalarNode || lk.Value == "" {
					bad(k, "label "+strconv.Quote(lk.Value)+": must be key: value")
					continue
				}
				if _, dup := m.Labels[lk.Value]; dup {
					bad(k, "label "+strconv.Quote(lk.Value)+" set twice")
					continue
				}
				m.Labels[lk.Value] = lv.Value // numbers and booleans are label text too
			}
		default:
			msg := "unknown field; match has namespace, cluster, port and labels"
			if s := settings.Suggest(k.Value, []string{"namespace", "cluster", "port", "labels"}); s != "" {
				msg += "; did you mean " + s + "?"
			}
			bad(k, msg)
		}
	}
	if !ok {
		return m, false
	}
	if m.conditions() == 0 {
		*ps = append(*ps, settings.Problem{Field: field, Message: "empty; give at least one of labels, cluster, port (and optionally namespace); for every node use default:", Line: n.Line})
		return m, false
	}
	if m.conditions() == 1 && m.Namespace != "" {
		*ps = append(*ps, settings.Problem{Field: field, Message: "matches a whole namespace: put these settings under namespaces: " + m.Namespace +
			" (precedence: default < namespaces < selectors < nodes)", Line: n.Line})
		return m, false
	}
	return m, true
}

// checkEntries checks every entry: no field that cannot change live, and
// its effective settings (over the file's default and, for a selector that
// requires a namespace, that namespace's entry) must be valid. When the
// default itself is invalid, entries report only what they set themselves,
// not the default's problems once more per entry.
func (f *File) checkEntries(entries []entry) settings.Problems {
	var ps settings.Problems
	base := settings.WithDefaults(f.Default)
	defaultBad := settings.Validate(base) != nil
	for _, e := range entries {
		ps = append(ps, fixedFieldProblems(e)...)
		eff := base
		if e.key != "default" {
			if ns, ok := f.Namespaces[e.ns]; ok && e.ns != "" {
				eff = settings.Merge(eff, ns)
			}
			eff = settings.Merge(eff, e.s)
		}
		err := settings.AtLines(settings.Validate(eff), e.pos, e.key+".")
		if err == nil {
			continue
		}
		for _, p := range err.(settings.Problems) {
			if p.Line == 0 && e.key != "default" {
				if defaultBad {
					continue
				}
				p.Line = e.origin.Line // a cross-field rule: point at the entry
			}
			ps = append(ps, p)
		}
	}
	return ps
}

// fixedFieldProblems refuses fields a sidecar cannot change while it runs:
// served by a control plane, every sidecar would NACK them.
func fixedFieldProblems(e entry) settings.Problems {
	var ps settings.Problems
	for _, path := range settings.SetPaths(e.s) {
		why := settings.FixedReason(path)
		if why == "" {
			continue
		}
		ps = append(ps, settings.Problem{Field: e.key + "." + path, Line: e.pos[path],
			Message: "cannot be served by a control plane: " + why +
				", so every sidecar would NACK the push; set it in each sidecar's own settings file or flags"})
	}
	return ps
}

func isNull(n *yaml.Node) bool {
	return n.Kind == 0 || (n.Kind == yaml.ScalarNode && n.Tag == "!!null")
}
