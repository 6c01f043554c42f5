package settings

import (
	"google.golang.org/protobuf/reflect/protoreflect"

	sg "github.com/stormgate/stormgate/settings/stormgatev1"
)

// Layer is one source of settings: the fields it sets (partial settings) and
// where they came from (SourceDefaults, SourceFile, SourceFlag).
type Layer struct {
	Source   string
	Settings *sg.Settings
}

// Layered is complete settings merged from layers, with the source of every
// field. Treat it as immutable.
type Layered struct {
	Settings *sg.Settings
	// Source is what /config_dump shows as "source" at start (and after a
	// SIGHUP reload, which reads the same layers): SourceFile when there is a
	// settings file, whatever flags override in it (Sources says which field
	// came from where), else the most specific layer that set any field.
	Source string
	// Sources maps every leaf field path ("hold.timeout") to the source of
	// its value.
	Sources FieldSources
	// File is the settings file among the layers; "" when none.
	File string
}

// FieldSources maps each leaf setting path to the source of its value.
type FieldSources map[string]string

// MergeLayers merges layers, lowest precedence first (normally defaults,
// file, flags): a field set in a later layer replaces an earlier one's, as
// Merge does. file names the settings file for Layered.File ("" when none).
func MergeLayers(file string, layers ...Layer) Layered {
	l := Layered{Settings: &sg.Settings{}, Sources: FieldSources{}, File: file}
	for _, ly := range layers {
		if ly.Settings == nil {
			continue
		}
		l.Settings = Merge(l.Settings, ly.Settings)
		set := false
		for _, path := range settingPaths() {
			if _, ok := lookup(ly.Settings.ProtoReflect(), path); ok {
				l.Sources[path] = ly.Source
				set = true
			}
		}
		if set && (l.Source != SourceFile || file == "") {
			l.Source = ly.Source
		}
		if ly.Source == SourceFile && file != "" {
			l.Source = SourceFile // even an empty file: the settings are the file's
		}
	}
	return l
}

// sourcesAgainst returns the sources of next's fields when next replaces
// the settings of base as a whole (an xDS push merged over the startup
// settings): a field whose value equals base's keeps base's source, any
// other comes from source.
func sourcesAgainst(base Layered, next *sg.Settings, source string) FieldSources {
	out := make(FieldSources, len(base.Sources))
	for _, path := range settingPaths() {
		if sameField(base.Settings.ProtoReflect(), next.ProtoReflect(), path) {
			out[path] = base.Sources[path]
		} else {
			out[path] = source
		}
	}
	return out
}

// allFrom attributes every field of s to one source.
func allFrom(s *sg.Settings, source string) Layered {
	fs := make(FieldSources, len(fieldRules))
	for _, path := range settingPaths() {
		fs[path] = source
	}
	return Layered{Settings: s, Source: source, Sources: fs}
}

// settingPaths lists every leaf setting path in schema order.
func settingPaths() []string {
	out := make([]string, len(fieldRules))
	for i, r := range fieldRules {
		out[i] = r.path
	}
	return out
}

// IsSet reports whether s sets the leaf field at path (a list: non-empty).
func IsSet(s *sg.Settings, path string) bool {
	_, ok := lookup(s.ProtoReflect(), path)
	return ok
}

// SameAt reports whether a and b hold the same value at path (both unset
// counts as the same).
func SameAt(a, b *sg.Settings, path string) bool {
	return sameField(a.ProtoReflect(), b.ProtoReflect(), path)
}

// sameField reports whether a and b hold the same value at path (both unset
// counts as the same).
func sameField(a, b protoreflect.Message, path string) bool {
	av, aok := lookup(a, path)
	bv, bok := lookup(b, path)
	if aok != bok {
		return false
	}
	return !aok || av.Equal(bv)
}

// Change is one field whose value differs between two settings.
type Change struct {
	Field    string
	From, To string // as /config_dump and the docs print values; "unset" when not set
}

func (c Change) String() string { return c.Field + ": " + c.From + " -> " + c.To }

// Changes lists the fields whose values differ from prev to next, in schema
// order. prev nil means everything in next is new.
func Changes(prev, next *sg.Settings) []Change {
	if prev == nil {
		prev = &sg.Settings{}
	}
	var out []Change
	for _, path := range settingPaths() {
		if sameField(prev.ProtoReflect(), next.ProtoReflect(), path) {
			continue
		}
		out = append(out, Change{Field: path, From: Shown(prev, path), To: Shown(next, path)})
	}
	return out
}

// Shown prints the value s has at path as /config_dump and the docs print
// values; "unset" when s does not set it.
func Shown(s *sg.Settings, path string) string {
	v, ok := lookup(s.ProtoReflect(), path)
	if !ok {
		return "unset"
	}
	return formatValue(fieldDesc(path), v)
}

// ChangeStrings renders changes as "field: old -> new" lines, for a log field.
func ChangeStrings(cs []Change) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.String()
	}
	return out
}
