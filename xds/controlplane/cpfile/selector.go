package cpfile

import (
	"fmt"
	"maps"
	"sort"
	"strconv"
	"strings"

	"github.com/stormgate/stormgate/settings"
	sg "github.com/stormgate/stormgate/settings/stormgatev1"
	"github.com/stormgate/stormgate/xds"
)

// Match is the condition of a selector: every field set must hold for a node
// (Labels: every label must be present with that value; Port: the node's
// provider ports include it). Zero fields are not conditions.
type Match struct {
	Namespace string
	Cluster   string
	Port      int32
	Labels    map[string]string
}

// Matches reports whether n satisfies every condition of m.
func (m Match) Matches(n xds.NodeInfo) bool {
	if m.Namespace != "" && m.Namespace != n.Namespace {
		return false
	}
	if m.Cluster != "" && m.Cluster != n.Cluster {
		return false
	}
	if m.Port != 0 && !containsPort(n.Ports, m.Port) {
		return false
	}
	for k, v := range m.Labels {
		if got, ok := n.Labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

func containsPort(ps []int32, p int32) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

// conditions is the number of conditions: a selector with more is more
// specific when the other's conditions are among its own.
func (m Match) conditions() int {
	n := len(m.Labels)
	for _, set := range []bool{m.Namespace != "", m.Cluster != "", m.Port != 0} {
		if set {
			n++
		}
	}
	return n
}

// within reports whether every condition of m is also a condition of o:
// o then selects a subset of what m selects.
func (m Match) within(o Match) bool {
	if m.Namespace != "" && m.Namespace != o.Namespace {
		return false
	}
	if m.Cluster != "" && m.Cluster != o.Cluster {
		return false
	}
	if m.Port != 0 && m.Port != o.Port {
		return false
	}
	for k, v := range m.Labels {
		if ov, ok := o.Labels[k]; !ok || ov != v {
			return false
		}
	}
	return true
}

func (m Match) equal(o Match) bool { return m.within(o) && o.within(m) }

// canOverlap reports whether some node can satisfy both m and o. A node has
// one namespace, one cluster and one value per label, but may have several
// provider ports.
func (m Match) canOverlap(o Match) bool {
	if m.Namespace != "" && o.Namespace != "" && m.Namespace != o.Namespace {
		return false
	}
	if m.Cluster != "" && o.Cluster != "" && m.Cluster != o.Cluster {
		return false
	}
	for k, v := range m.Labels {
		if ov, ok := o.Labels[k]; ok && ov != v {
			return false
		}
	}
	return true
}

// union is the conditions of both; ok is false when one selector cannot
// express them (two different ports).
func (m Match) union(o Match) (u Match, ok bool) {
	u = Match{Namespace: m.Namespace, Cluster: m.Cluster, Port: m.Port, Labels: maps.Clone(m.Labels)}
	if u.Namespace == "" {
		u.Namespace = o.Namespace
	}
	if u.Cluster == "" {
		u.Cluster = o.Cluster
	}
	if u.Port == 0 {
		u.Port = o.Port
	} else if o.Port != 0 && o.Port != u.Port {
		return u, false
	}
	for k, v := range o.Labels {
		if u.Labels == nil {
			u.Labels = map[string]string{}
		}
		u.Labels[k] = v
	}
	return u, true
}

// String prints the conditions the way a file writes them:
// {namespace: shop, labels: {app: payment}}.
func (m Match) String() string {
	var parts []string
	if m.Namespace != "" {
		parts = append(parts, "namespace: "+m.Namespace)
	}
	if m.Cluster != "" {
		parts = append(parts, "cluster: "+m.Cluster)
	}
	if m.Port != 0 {
		parts = append(parts, "port: "+strconv.Itoa(int(m.Port)))
	}
	if len(m.Labels) > 0 {
		keys := make([]string, 0, len(m.Labels))
		for k := range m.Labels {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for i, k := range keys {
			keys[i] = k + ": " + m.Labels[k]
		}
		parts = append(parts, "labels: {"+strings.Join(keys, ", ")+"}")
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// Selector gives settings to every node its Match selects. Among the
// selectors that match one node, a more specific one (whose conditions
// include all of the other's) wins field by field.
type Selector struct {
	Name     string
	Match    Match
	Settings *sg.Settings
	Origin   Origin
}

// Origin is where an entry of a control-plane file is defined.
type Origin struct {
	File string // base name; "" when only one file was read
	Line int
}

func (o Origin) String() string {
	switch {
	case o.File != "" && o.Line > 0:
		return o.File + " line " + strconv.Itoa(o.Line)
	case o.File != "":
		return o.File
	default:
		return "line " + strconv.Itoa(o.Line)
	}
}

// conflicts lists the fields a and b both set to different values, each as
// "path (a-value vs b-value)".
func conflicts(a, b *sg.Settings) (paths, shown []string) {
	for _, path := range settings.SetPaths(a) {
		if !settings.IsSet(b, path) || settings.SameAt(a, b, path) {
			continue
		}
		paths = append(paths, path)
		shown = append(shown, fmt.Sprintf("%s (%s vs %s)", path, settings.Shown(a, path), settings.Shown(b, path)))
	}
	return paths, shown
}

// checkSelectorPairs finds pairs of selectors whose order cannot be decided:
// they can select the same node, neither is more specific than the other,
// and they set a field to different values, with no third selector matching
// exactly both conditions that sets the field. It also refuses two
// selectors with the same conditions. With crossFile, only pairs defined in
// different files are checked (each file's own pairs were checked when it
// was parsed). settings.Problems are reported on the later selector and name both
// places.
func checkSelectorPairs(sels []*Selector, crossFile bool) settings.Problems {
	var ps settings.Problems
	for j, b := range sels {
		for _, a := range sels[:j] {
			if crossFile && a.Origin.File == b.Origin.File {
				continue
			}
			if !a.Match.canOverlap(b.Match) {
				continue
			}
			at := fmt.Sprintf("selectors.%s (%s)", a.Name, a.Origin)
			if a.Match.equal(b.Match) {
				ps = append(ps, settings.Problem{Field: "selectors." + b.Name, Line: b.Origin.Line, File: b.Origin.File,
					Message: "matches exactly the nodes " + at + " matches (" + b.Match.String() +
						"); merge the two into one selector"})
				continue
			}
			if a.Match.within(b.Match) || b.Match.within(a.Match) {
				continue // ordered: the more specific one wins
			}
			paths, shown := conflicts(a.Settings, b.Settings)
			u, expressible := a.Match.union(b.Match)
			var open []string
			for i, p := range paths {
				if !expressible || !settledBy(sels, u, p) {
					open = append(open, shown[i])
				}
			}
			if len(open) == 0 {
				continue
			}
			fix := "make one selector's match include all of the other's conditions"
			if expressible {
				fix += ", or add a selector matching " + u.String() + " that sets " + pathsOf(open)
			}
			ps = append(ps, settings.Problem{Field: "selectors." + b.Name, Line: b.Origin.Line, File: b.Origin.File,
				Message: fmt.Sprintf("overlaps %s: a node matching both %s and %s gets different %s, and neither "+
					"selector is more specific, so which wins would depend on order; %s",
					at, a.Match, b.Match, strings.Join(open, ", "), fix)})
		}
	}
	return ps
}

// settledBy reports whether a selector with exactly the conditions u sets
// path (it then decides the field for every node both others select).
func settledBy(sels []*Selector, u Match, path string) bool {
	for _, c := range sels {
		if c.Match.equal(u) {
			if settings.IsSet(c.Settings, path) {
				return true
			}
		}
	}
	return false
}

func pathsOf(shown []string) string {
	out := make([]string, len(shown))
	for i, s := range shown {
		out[i], _, _ = strings.Cut(s, " ")
	}
	return strings.Join(out, ", ")
}

// matching returns the selectors that select n, least specific first (the
// merge order: later ones win). Selectors with equal specificity that both
// match set no field differently (checkSelectorPairs), so their relative
// order does not change the result; file order breaks the tie.
func matching(sels []*Selector, n xds.NodeInfo) []*Selector {
	var out []*Selector
	for _, s := range sels {
		if s.Match.Matches(n) {
			out = append(out, s)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Match.conditions() < out[j].Match.conditions() })
	return out
}
