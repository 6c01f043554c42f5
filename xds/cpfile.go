package xds

import (
	"os"
	"sort"

	"go.yaml.in/yaml/v3"

	sg "github.com/stormgate/stormgate/xds/stormgatev1"
)

// ControlPlaneFile is the reference control plane's configuration:
//
//	default:            # a partial Settings, merged over Defaults()
//	  keepalive: { upstream_interval: 10s }
//	nodes:              # node id -> a partial Settings merged over default
//	  provider-0.shop:
//	    admission: { accept_rate: 5000 }
type ControlPlaneFile struct {
	Default *sg.Settings
	Nodes   map[string]*sg.Settings
}

// For returns the complete settings served to a node: Defaults(), then the
// file's default, then the node's override if it has one.
func (f *ControlPlaneFile) For(nodeID string) *sg.Settings {
	return Merge(WithDefaults(f.Default), f.Nodes[nodeID])
}

// Overlay returns what the control plane serves to a node: the file's
// default with the node's override merged over it, without the built-in
// defaults, so a sidecar merges it over its own startup settings and fields
// the file does not set (e.g. listener.address) keep their local value.
func (f *ControlPlaneFile) Overlay(nodeID string) *sg.Settings {
	return Merge(f.Default, f.Nodes[nodeID])
}

// NodeIDs returns the node ids with an override, sorted.
func (f *ControlPlaneFile) NodeIDs() []string {
	ids := make([]string, 0, len(f.Nodes))
	for id := range f.Nodes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// LoadControlPlaneFile reads and fully validates a control-plane file: the
// effective settings of the default and of every node must pass Validate.
// Problems name the field as "default.<path>" or "nodes.<id>.<path>".
func LoadControlPlaneFile(path string) (*ControlPlaneFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseControlPlaneYAML(data)
}

// ParseControlPlaneYAML is LoadControlPlaneFile on bytes.
func ParseControlPlaneYAML(data []byte) (*ControlPlaneFile, error) {
	root, err := parseRoot(data)
	if err != nil {
		return nil, err
	}
	return parseControlPlane(root)
}

func isControlPlaneDoc(root *yaml.Node) bool {
	if root.Kind != yaml.MappingNode {
		return false
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		if k := root.Content[i].Value; k == "default" || k == "nodes" {
			return true
		}
	}
	return false
}

func parseControlPlane(root *yaml.Node) (*ControlPlaneFile, error) {
	f := &ControlPlaneFile{Nodes: map[string]*sg.Settings{}}
	if isNull(root) {
		return f, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, Problems{{Message: "a control-plane file must be a mapping with default: and nodes:", Line: root.Line}}
	}
	var ps Problems
	var defPos map[string]int
	type nodeEntry struct {
		id  string
		pos map[string]int
	}
	var nodes []nodeEntry
	seen := map[string]bool{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if seen[k.Value] {
			ps = append(ps, Problem{Field: k.Value, Message: "set twice", Line: k.Line})
			continue
		}
		seen[k.Value] = true
		switch k.Value {
		case "default":
			s, pos, err := decodeSettings(v, "default.")
			if err != nil {
				ps = append(ps, err.(Problems)...)
				continue
			}
			f.Default, defPos = s, pos
		case "nodes":
			if v.Kind == yaml.AliasNode {
				v = v.Alias
			}
			if isNull(v) {
				continue
			}
			if v.Kind != yaml.MappingNode {
				ps = append(ps, Problem{Field: "nodes", Message: "must be a mapping of node id to settings", Line: v.Line})
				continue
			}
			for j := 0; j+1 < len(v.Content); j += 2 {
				id := v.Content[j].Value
				if _, dup := f.Nodes[id]; dup || id == "" {
					ps = append(ps, Problem{Field: "nodes." + id, Message: "node id empty or set twice", Line: v.Content[j].Line})
					continue
				}
				s, pos, err := decodeSettings(v.Content[j+1], "nodes."+id+".")
				if err != nil {
					ps = append(ps, err.(Problems)...)
					continue
				}
				f.Nodes[id] = s
				nodes = append(nodes, nodeEntry{id, pos})
			}
		default:
			ps = append(ps, Problem{Field: k.Value, Message: "unknown field; a control-plane file has default: and nodes:", Line: k.Line})
		}
	}
	if len(ps) > 0 {
		return nil, ps
	}
	defaultBad := false
	if err := annotate(Validate(WithDefaults(f.Default)), defPos, "default."); err != nil {
		ps = append(ps, err.(Problems)...)
		defaultBad = true
	}
	for _, n := range nodes {
		err := annotate(Validate(f.For(n.id)), n.pos, "nodes."+n.id+".")
		if err == nil {
			continue
		}
		for _, p := range err.(Problems) {
			// When the default is bad every node inherits its problems:
			// report only what the node itself sets.
			if !defaultBad || p.Line > 0 {
				ps = append(ps, p)
			}
		}
	}
	if len(ps) > 0 {
		return nil, ps
	}
	return f, nil
}
