package cpfile

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/stormgate/stormgate/settings"
	sg "github.com/stormgate/stormgate/settings/stormgatev1"
)

// IsControlPlaneConfig reports whether path is what `sidecar control-plane
// --config` reads: a directory, or a YAML file whose top level has default:,
// namespaces:, selectors: or nodes:. Unreadable paths report false (the
// settings-file check then reports why).
func IsConfig(path string) bool {
	fi, err := os.Stat(path)
	if err != nil {
		return false
	}
	if fi.IsDir() {
		return true
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	root, err := settings.ParseYAMLRoot(data)
	return err == nil && isDoc(root)
}

// ValidateControlPlane checks a control-plane file, or a directory of them,
// exactly as the control plane does before publishing: each file alone
// (ParseControlPlaneYAML), then what the files make together (a namespace,
// selector name or node id defined in two files, selectors in different
// files that cannot be ordered, every entry over the merged default). Each
// problem names its file when a directory was read; cross-file problems
// name both files. It returns nil or a settings.Problems.
func Validate(path string) error {
	_, _, err := Read(path)
	return err
}

// controlPlaneFiles lists what a control-plane path stands for: the file
// itself, or the directory's *.yaml and *.yml files (not hidden, not
// recursive) in name order.
func configFiles(path string) ([]string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return []string{path}, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		n := e.Name()
		if strings.HasPrefix(n, ".") || (!strings.HasSuffix(n, ".yaml") && !strings.HasSuffix(n, ".yml")) {
			continue
		}
		p := filepath.Join(path, n)
		// Kubernetes mounts ConfigMap keys as symlinks: follow them.
		if st, err := os.Stat(p); err != nil || st.IsDir() {
			continue
		}
		files = append(files, p)
	}
	sort.Strings(files)
	return files, nil
}

// readControlPlaneConfig reads a file or a directory and returns the hash of
// what it read (names and contents) and the validated config.
func Read(path string) ([32]byte, *File, error) {
	var sum [32]byte
	files, err := configFiles(path)
	if err != nil {
		return sum, nil, err
	}
	h := sha256.New()
	datas := make([][]byte, len(files))
	for i, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return sum, nil, err
		}
		datas[i] = b
		fmt.Fprintf(h, "%s\x00%d\x00", f, len(b))
		h.Write(b)
	}
	h.Sum(sum[:0])
	if len(files) == 1 {
		f, err := Parse(datas[0])
		return sum, f, err
	}
	var ps settings.Problems
	parsed := make([]*File, 0, len(files))
	names := make([]string, 0, len(files))
	var read []*File // also what could be read of invalid files
	var readNames []string
	for i, f := range files {
		one, err := parseBytes(datas[i])
		if one != nil {
			read, readNames = append(read, one), append(readNames, filepath.Base(f))
		}
		if err != nil {
			var fps settings.Problems
			if !errors.As(err, &fps) {
				return sum, nil, fmt.Errorf("%s: %w", f, err)
			}
			for _, p := range fps {
				p.File = filepath.Base(f)
				ps = append(ps, p)
			}
			continue
		}
		parsed = append(parsed, one)
		names = append(names, filepath.Base(f))
	}
	if len(ps) > 0 {
		// One run shows every problem: a file's own mistakes do not hide a
		// namespace, selector or node id that two files define.
		return sum, nil, append(ps, duplicateKeys(readNames, read)...)
	}
	out, ps := combine(names, parsed)
	if len(ps) > 0 {
		return sum, nil, ps
	}
	return sum, out, nil
}

// combine merges files that were each valid alone, in name order: their
// defaults merge in that order; a namespace, selector or node id may be
// defined in one file only.
func combine(names []string, parsed []*File) (*File, settings.Problems) {
	out := newFile()
	var ps settings.Problems
	add := func(key, file string, o Origin) bool {
		o.File = file
		if first, dup := out.origins[key]; dup {
			ps = append(ps, settings.Problem{Field: key, File: o.File, Line: o.Line,
				Message: "defined in two files: also at " + first.String() + "; keep one"})
			return false
		}
		out.origins[key] = o
		return true
	}
	for i, one := range parsed {
		out.Default = settings.Merge(out.Default, one.Default)
		for _, ns := range sortedKeys(one.Namespaces) {
			if add("namespaces."+ns, names[i], one.origins["namespaces."+ns]) {
				out.Namespaces[ns] = one.Namespaces[ns]
			}
		}
		for _, s := range one.Selectors {
			if add("selectors."+s.Name, names[i], s.Origin) {
				c := *s
				c.Origin.File = names[i]
				out.Selectors = append(out.Selectors, &c)
			}
		}
		for _, id := range sortedKeys(one.Nodes) {
			if add("nodes."+id, names[i], one.origins["nodes."+id]) {
				out.Nodes[id] = one.Nodes[id]
			}
		}
	}
	ps = append(ps, checkSelectorPairs(out.Selectors, true)...)
	if len(ps) > 0 {
		return nil, ps
	}
	// Each file was valid over its own default; check every entry over the
	// merged one.
	base := settings.WithDefaults(out.Default)
	if err := settings.Validate(base); err != nil {
		return nil, prefixed(err, "default.", Origin{})
	}
	check := func(key string, s *sg.Settings) {
		if err := settings.Validate(settings.Merge(base, s)); err != nil {
			ps = append(ps, prefixed(err, key+".", out.origins[key])...)
		}
	}
	for _, ns := range sortedKeys(out.Namespaces) {
		check("namespaces."+ns, out.Namespaces[ns])
	}
	for _, s := range out.Selectors {
		if ns, ok := out.Namespaces[s.Match.Namespace]; ok && s.Match.Namespace != "" {
			check("selectors."+s.Name, settings.Merge(ns, s.Settings))
		} else {
			check("selectors."+s.Name, s.Settings)
		}
	}
	for _, id := range out.NodeIDs() {
		check("nodes."+id, out.Nodes[id])
	}
	if len(ps) > 0 {
		return nil, ps
	}
	return out, nil
}

// duplicateKeys names each namespace, selector or node id that more than one
// of the files defines, with both files (combine reports the same for valid files).
func duplicateKeys(names []string, files []*File) settings.Problems {
	first := map[string]Origin{}
	var ps settings.Problems
	for i, one := range files {
		for _, key := range sortedKeys(one.origins) {
			o := one.origins[key]
			o.File = names[i]
			if f, dup := first[key]; dup {
				ps = append(ps, settings.Problem{Field: key, File: o.File, Line: o.Line,
					Message: "defined in two files: also at " + f.String() + "; keep one"})
				continue
			}
			first[key] = o
		}
	}
	return ps
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// prefixed puts prefix before each problem's field and points it at o.
func prefixed(err error, prefix string, o Origin) settings.Problems {
	var ps settings.Problems
	errors.As(err, &ps)
	for i := range ps {
		ps[i].Field = prefix + ps[i].Field
		ps[i].File, ps[i].Line = o.File, o.Line
	}
	return ps
}
