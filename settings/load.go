package settings

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"

	sg "github.com/stormgate/stormgate/settings/stormgatev1"
)

// LoadFile reads a settings file (YAML, or JSON which is YAML) in the
// stormgate.v1.Settings schema with snake_case names, durations written like
// "3s" or "500ms". It returns the partial settings the file sets (merge them
// with WithDefaults before use) or a Problems naming every unknown field or
// badly typed value with its line. It does not check ranges: see Validate and
// ValidateFile.
func LoadFile(path string) (*sg.Settings, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s, _, err := parseSettings(data)
	return s, err
}

// ParseYAML is LoadFile on bytes.
func ParseYAML(data []byte) (*sg.Settings, error) {
	s, _, err := parseSettings(data)
	return s, err
}

// ValidateFile checks a settings file: syntax, names, types and, after
// merging over the defaults, every range. It returns nil or a Problems, with
// line numbers where the file sets the field, every problem in one pass (see
// ValidateSettingsYAML). Control-plane files are checked by xds/controlplane/cpfile.
func ValidateFile(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return ValidateSettingsYAML(data)
}

// MaxFileProblems caps the problems reported for one settings file; past it
// the last entry says how many more there are.
const MaxFileProblems = 50

// ValidateSettingsYAML checks a settings file's bytes and reports every
// problem in one pass, in file order: a misspelt or badly typed field does
// not hide a range error elsewhere (the fields that decode are merged over
// the defaults and validated). At most MaxFileProblems are returned.
func ValidateSettingsYAML(data []byte) error {
	root, err := ParseYAMLRoot(data)
	if err != nil {
		return err
	}
	return validateSettingsDoc(root)
}

func validateSettingsDoc(root *yaml.Node) error {
	d := decoder{pos: map[string]int{}}
	s := &sg.Settings{}
	d.message(root, s.ProtoReflect(), "")
	ps := d.ps
	if err := AtLines(Validate(WithDefaults(s)), d.pos, ""); err != nil {
		ps = append(ps, err.(Problems)...)
	}
	if len(ps) == 0 {
		return nil
	}
	// File order; problems without a line (relations between fields not
	// set in the file) last.
	slices.SortStableFunc(ps, func(a, b Problem) int {
		switch {
		case a.Line == b.Line:
			return 0
		case a.Line == 0:
			return 1
		case b.Line == 0:
			return -1
		}
		return a.Line - b.Line
	})
	if len(ps) > MaxFileProblems {
		more := len(ps) - (MaxFileProblems - 1)
		ps = append(ps[:MaxFileProblems-1:MaxFileProblems-1],
			Problem{Message: strconv.Itoa(more) + " more problems not shown; fix these first"})
	}
	return ps
}

// SettingsFile is a settings file as `sidecar run --config` reads it: the
// partial settings it sets and the line of each field, for error messages.
type SettingsFile struct {
	Path     string
	Settings *sg.Settings
	lines    map[string]int
}

// ReadSettingsFile reads a settings file like LoadFile; every problem it
// returns names the file (Problem.File) and the line.
func ReadSettingsFile(path string) (*SettingsFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s, pos, err := parseSettings(data)
	if err != nil {
		return nil, inFile(err, path)
	}
	return &SettingsFile{Path: path, Settings: s, lines: pos}, nil
}

// Annotate names this file and the line in each problem of err about a
// field whose active value came from the file (sources says which).
func (f *SettingsFile) Annotate(err error, sources FieldSources) error {
	var ps Problems
	if !errors.As(err, &ps) {
		return err
	}
	out := make(Problems, len(ps))
	for i, p := range ps {
		if line := f.lines[p.Field]; line > 0 && sources[p.Field] == SourceFile {
			p.File, p.Line = f.Path, line
		}
		out[i] = p
	}
	return out
}

// inFile sets the file name of every problem in err.
func inFile(err error, path string) error {
	var ps Problems
	if !errors.As(err, &ps) {
		return err
	}
	out := make(Problems, len(ps))
	for i, p := range ps {
		p.File = path
		out[i] = p
	}
	return out
}

// YAMLFiles lists the settings files of a directory as `sidecar validate
// DIR` and `control-plane --config DIR` read them: every *.yaml and *.yml
// file, not hidden ones, not recursively, in name order.
func YAMLFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || strings.HasPrefix(n, ".") || (!strings.HasSuffix(n, ".yaml") && !strings.HasSuffix(n, ".yml")) {
			continue
		}
		files = append(files, filepath.Join(dir, n))
	}
	return files, nil
}

// AtLines sets the line of each problem of err from lines (a field's own
// line, or its nearest parent's) and puts prefix before its field path: for
// files that hold settings inside a larger document (the control plane's).
func AtLines(err error, pos map[string]int, prefix string) error {
	var ps Problems
	if !errors.As(err, &ps) {
		return err
	}
	out := make(Problems, len(ps))
	for i, p := range ps {
		for f := p.Field; f != "" && p.Line == 0; {
			p.Line = pos[f]
			if j := strings.LastIndexAny(f, ".["); j >= 0 {
				f = f[:j]
			} else {
				f = ""
			}
		}
		if prefix != "" {
			p.Field = prefix + p.Field
		}
		out[i] = p
	}
	return out
}

// ParseYAMLRoot parses a YAML document and returns its root node; a syntax
// error is a Problems with its line.
func ParseYAMLRoot(data []byte) (*yaml.Node, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, Problems{{Message: strings.TrimPrefix(err.Error(), "yaml: ")}}
	}
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		return doc.Content[0], nil
	}
	return &doc, nil // empty document
}

func parseSettings(data []byte) (*sg.Settings, map[string]int, error) {
	root, err := ParseYAMLRoot(data)
	if err != nil {
		return nil, nil, err
	}
	return DecodeYAML(root, "")
}

// DecodeYAML turns a YAML node (a mapping as a settings file holds it) into
// partial Settings, checking names and types against the schema, or returns a
// Problems. prefix is prepended to reported field paths. It returns the line
// of every field set, keyed by path without prefix.
func DecodeYAML(n *yaml.Node, prefix string) (*sg.Settings, map[string]int, error) {
	d := decoder{prefix: prefix, pos: map[string]int{}}
	s := &sg.Settings{}
	d.message(n, s.ProtoReflect(), "")
	if len(d.ps) > 0 {
		return nil, nil, d.ps
	}
	return s, d.pos, nil
}

type decoder struct {
	prefix string
	ps     Problems
	pos    map[string]int
}

func (d *decoder) problem(n *yaml.Node, path, msg string) {
	d.ps = append(d.ps, Problem{Field: d.prefix + path, Message: msg, Line: n.Line})
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func isNull(n *yaml.Node) bool {
	return n.Kind == 0 || (n.Kind == yaml.ScalarNode && n.Tag == "!!null")
}

func (d *decoder) message(n *yaml.Node, m protoreflect.Message, path string) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if isNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		d.problem(n, path, "must be a mapping of "+string(m.Descriptor().Name())+" fields")
		return
	}
	fields := m.Descriptor().Fields()
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		name := k.Value
		fd := fields.ByName(protoreflect.Name(name))
		if fd == nil {
			fd = fields.ByJSONName(name)
		}
		if fd == nil {
			msg := "unknown field"
			if s := Suggest(name, fieldNames(fields)); s != "" {
				msg += "; did you mean " + s + "?"
			}
			d.problem(k, join(path, name), msg)
			continue
		}
		p := join(path, string(fd.Name()))
		if seen[p] {
			d.problem(k, p, "set twice")
			continue
		}
		seen[p] = true
		d.pos[p] = k.Line
		if v.Kind == yaml.AliasNode {
			v = v.Alias
		}
		if isNull(v) {
			continue
		}
		d.field(v, m, fd, p)
	}
}

func (d *decoder) field(n *yaml.Node, m protoreflect.Message, fd protoreflect.FieldDescriptor, path string) {
	switch {
	case fd.IsMap():
		d.problem(n, path, "map fields are not supported")
	case fd.IsList():
		if n.Kind != yaml.SequenceNode {
			d.problem(n, path, "must be a list")
			return
		}
		l := m.Mutable(fd).List()
		for i, item := range n.Content {
			if v, ok := d.scalar(item, fd, fmt.Sprintf("%s[%d]", path, i)); ok {
				l.Append(v)
			}
		}
		if l.Len() == 0 {
			m.Clear(fd)
		}
	case fd.Message() != nil && !isAtomic(fd.Message()):
		d.message(n, m.Mutable(fd).Message(), path)
	default:
		if v, ok := d.scalar(n, fd, path); ok {
			m.Set(fd, v)
		}
	}
}

// scalar decodes one value of fd's kind (for lists: one element).
func (d *decoder) scalar(n *yaml.Node, fd protoreflect.FieldDescriptor, path string) (protoreflect.Value, bool) {
	bad := func(want string) (protoreflect.Value, bool) {
		shown := n.Value
		if n.Kind != yaml.ScalarNode {
			shown = "a " + map[yaml.Kind]string{yaml.MappingNode: "mapping", yaml.SequenceNode: "list"}[n.Kind]
		} else {
			shown = strconv.Quote(shown)
		}
		d.problem(n, path, shown+" is not "+want)
		return protoreflect.Value{}, false
	}
	if n.Kind != yaml.ScalarNode {
		return bad(kindName(fd))
	}
	switch fd.Kind() {
	case protoreflect.BoolKind:
		var b bool
		if n.Tag != "!!bool" || n.Decode(&b) != nil {
			return bad("true or false")
		}
		return protoreflect.ValueOfBool(b), true
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		if IsByteSize(fd) {
			i, ok := yamlBytes(n)
			switch {
			case !ok:
				return bad(byteSizeWant)
			case i > math.MaxInt32:
				return bad("at most 2147483647 bytes (2GiB - 1)")
			}
			return protoreflect.ValueOfInt32(int32(i)), true
		}
		i, ok := yamlInt(n)
		if !ok || i < math.MinInt32 || i > math.MaxInt32 {
			return bad("a 32-bit integer")
		}
		return protoreflect.ValueOfInt32(int32(i)), true
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		i, ok := yamlInt(n)
		if IsByteSize(fd) {
			i, ok = yamlBytes(n)
		}
		if !ok {
			return bad("an integer")
		}
		return protoreflect.ValueOfInt64(i), true
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		i, ok := yamlInt(n)
		if !ok || i < 0 || i > math.MaxUint32 {
			return bad("a non-negative 32-bit integer")
		}
		return protoreflect.ValueOfUint32(uint32(i)), true
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		i, ok := yamlInt(n)
		if !ok || i < 0 {
			return bad("a non-negative integer")
		}
		return protoreflect.ValueOfUint64(uint64(i)), true
	case protoreflect.DoubleKind, protoreflect.FloatKind:
		var f float64
		if (n.Tag != "!!float" && n.Tag != "!!int") || n.Decode(&f) != nil {
			return bad("a number")
		}
		if fd.Kind() == protoreflect.FloatKind {
			return protoreflect.ValueOfFloat32(float32(f)), true
		}
		return protoreflect.ValueOfFloat64(f), true
	case protoreflect.StringKind:
		if n.Tag != "!!str" {
			return bad("a string (quote it)")
		}
		// A field with a fixed set of values takes them in any case, as enums do.
		for _, c := range stringChoices[path] {
			if strings.EqualFold(c, n.Value) {
				return protoreflect.ValueOfString(c), true
			}
		}
		return protoreflect.ValueOfString(n.Value), true
	case protoreflect.EnumKind:
		// Any case: "hold" is HOLD. The unspecified zero value is never a choice.
		names := enumNames(fd.Enum())
		if n.Tag == "!!str" {
			for i := 0; i < fd.Enum().Values().Len(); i++ {
				if ev := fd.Enum().Values().Get(i); ev.Number() != 0 && strings.EqualFold(string(ev.Name()), n.Value) {
					return protoreflect.ValueOfEnum(ev.Number()), true
				}
			}
		}
		return bad("one of " + strings.Join(names, ", ") + " (any case)")
	case protoreflect.MessageKind:
		if fd.Message().FullName() == "google.protobuf.Duration" {
			dd, ok := yamlDuration(n)
			if !ok {
				return bad(`a duration like "3s" or "500ms"`)
			}
			return protoreflect.ValueOfMessage(durationpb.New(dd).ProtoReflect()), true
		}
	}
	d.problem(n, path, "fields of type "+kindName(fd)+" are not supported in files")
	return protoreflect.Value{}, false
}

func yamlInt(n *yaml.Node) (int64, bool) {
	var i int64
	if n.Tag != "!!int" || n.Decode(&i) != nil {
		return 0, false
	}
	return i, true
}

// byteSizeWant is what a byte-size field takes, for error messages and the docs.
const byteSizeWant = "a byte size: a number of bytes, or with a unit: 512KiB, 64MiB, 1GiB (also Ki, Mi, Gi; KB, MB, GB are powers of 1000)"

// IsByteSize reports whether a field counts bytes: by the schema's naming rule, an integer
// field whose name has the word "bytes" (max_bytes, max_queued_bytes_per_connection) or ends in
// "size" (http2.initial_window_size, HTTP/2's own names for byte counts). Such
// fields take units ("64MiB") in files, --set and annotations; /config_dump and xDS carry plain
// numbers.
func IsByteSize(fd protoreflect.FieldDescriptor) bool {
	switch fd.Kind() {
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		words := strings.Split(string(fd.Name()), "_")
		return slices.Contains(words, "bytes") || words[len(words)-1] == "size"
	}
	return false
}

// byteUnits are the multipliers ParseByteSize knows, by lower-case suffix.
var byteUnits = map[string]int64{
	"": 1, "b": 1,
	"k": 1 << 10, "ki": 1 << 10, "kib": 1 << 10, "kb": 1000,
	"m": 1 << 20, "mi": 1 << 20, "mib": 1 << 20, "mb": 1000 * 1000,
	"g": 1 << 30, "gi": 1 << 30, "gib": 1 << 30, "gb": 1000 * 1000 * 1000,
}

// ParseByteSize reads a byte count: digits with an optional unit, "8388608", "64MiB", "64Mi",
// "512 KiB", "1GB". Binary units (KiB, Ki, K) are powers of 1024, decimal ones (KB) of 1000, as
// Kubernetes quantities. It refuses fractions, negative sizes and counts past 2^62.
func ParseByteSize(s string) (int64, bool) {
	s = strings.TrimSpace(s)
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 || i > 18 {
		return 0, false
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	mult, ok := byteUnits[strings.ToLower(strings.TrimSpace(s[i:]))]
	if err != nil || !ok || n > (1<<62)/mult {
		return 0, false
	}
	return n * mult, true
}

// yamlBytes accepts an integer or a string ParseByteSize reads.
func yamlBytes(n *yaml.Node) (int64, bool) {
	if i, ok := yamlInt(n); ok {
		return i, true
	}
	if n.Tag != "!!str" {
		return 0, false
	}
	return ParseByteSize(n.Value)
}

// yamlDuration accepts Go durations ("3s", "0.05s", "500ms", "1m30s") and a
// bare 0.
func yamlDuration(n *yaml.Node) (time.Duration, bool) {
	if n.Tag == "!!int" && n.Value == "0" {
		return 0, true
	}
	if n.Tag != "!!str" {
		return 0, false
	}
	dd, err := time.ParseDuration(n.Value)
	return dd, err == nil
}

func enumNames(ed protoreflect.EnumDescriptor) []string {
	var out []string
	for i := 0; i < ed.Values().Len(); i++ {
		if ev := ed.Values().Get(i); ev.Number() != 0 {
			out = append(out, string(ev.Name()))
		}
	}
	return out
}

func kindName(fd protoreflect.FieldDescriptor) string {
	if fd.IsList() {
		return "a list"
	}
	if fd.Message() != nil {
		if fd.Message().FullName() == "google.protobuf.Duration" {
			return "a duration"
		}
		return "a mapping"
	}
	return "a " + fd.Kind().String()
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
