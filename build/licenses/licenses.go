// Package licenses finds the license of every module linked into a Stormgate binary, from the
// LICENSE and NOTICE files in the module cache (no network), and says which of them Stormgate may
// ship under Apache-2.0. build/licenses_test.go runs it in `make test` over both builds (the
// data-plane build of every injected pod and the full binary of the control image) and keeps
// docs/licenses.md and NOTICE equal to what it finds; `make release` writes the license texts next
// to the binaries with cmd/mklicenses.
//
// The classifier is deliberately small: it recognises the permissive licenses the dependencies use
// (Apache-2.0, MIT, BSD-2-Clause, BSD-3-Clause, ISC) by their operative sentences, and anything it
// does not recognise, or any license with a copyleft or field-of-use marker, fails the check. A new
// dependency under another license needs a person's decision, not a pattern.
//
// Concurrency: pure functions, except Modules, which runs `go list`.
package licenses

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Allowed are the licenses compatible with shipping Stormgate under Apache-2.0 (the ASF's
// "category A"), in SPDX names.
var Allowed = []string{"Apache-2.0", "BSD-2-Clause", "BSD-3-Clause", "ISC", "MIT"}

// Module is one module linked into a build.
type Module struct {
	Path, Version string
	Dir           string   // where its files are (the module cache, or a replacement's directory)
	LicenseFiles  []string // names of its license files, sorted
	Licenses      []string // SPDX names found in them, sorted, without duplicates
	Texts         []string // the license files' contents, in LicenseFiles order
	Notice        string   // its NOTICE file, "" when it has none
	Main          bool     // Stormgate itself
}

// Problem says why m cannot ship, or "" when it can: no license file, a license the classifier
// does not know, or one outside Allowed.
func (m Module) Problem() string {
	switch {
	case len(m.LicenseFiles) == 0:
		return "no LICENSE, LICENCE or COPYING file in " + m.Dir
	case len(m.Licenses) == 0:
		return "license not recognised in " + strings.Join(m.LicenseFiles, ", ") + ": read it, and extend build/licenses only if it is compatible with Apache-2.0"
	}
	var bad []string
	for _, l := range m.Licenses {
		if !slices.Contains(Allowed, l) {
			bad = append(bad, l)
		}
	}
	if len(bad) > 0 {
		return strings.Join(bad, ", ") + " is not compatible with shipping Stormgate under Apache-2.0 (allowed: " + strings.Join(Allowed, ", ") + ")"
	}
	return ""
}

// String is "path version" (without version for the main module).
func (m Module) String() string {
	if m.Version == "" {
		return m.Path
	}
	return m.Path + " " + m.Version
}

// Modules lists the modules linked into `go build [-tags tags] pkg`, run in dir (the repository),
// each with its license files read and classified from the module cache (`go list` needs the
// modules there already, as after any build: it downloads nothing that a build would not). The standard library is not a module: it is
// under Go's BSD-3-Clause license (see docs/licenses.md).
func Modules(dir, pkg string, tags ...string) ([]Module, error) {
	args := []string{"list", "-deps", "-json=Module"}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	type gomod struct {
		Path, Version, Dir string
		Main               bool
		Replace            *gomod
	}
	seen := map[string]bool{}
	var mods []Module
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct{ Module *gomod }
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, err
		}
		gm := p.Module
		if gm == nil || seen[gm.Path] {
			continue // the standard library has no module
		}
		seen[gm.Path] = true
		m := Module{Path: gm.Path, Version: gm.Version, Dir: gm.Dir, Main: gm.Main}
		if gm.Replace != nil {
			m.Version, m.Dir = gm.Replace.Version, gm.Replace.Dir
			if m.Version == "" {
				m.Version = "=> " + gm.Replace.Path
			}
		}
		if err := m.read(); err != nil {
			return nil, err
		}
		mods = append(mods, m)
	}
	slices.SortFunc(mods, func(a, b Module) int { return strings.Compare(a.Path, b.Path) })
	return mods, nil
}

var (
	licenseFile = regexp.MustCompile(`(?i)^(licen[cs]e|copying)([-._][a-z0-9.]+)?$`)
	noticeFile  = regexp.MustCompile(`(?i)^notice(\.txt|\.md)?$`)
)

// read finds and classifies m's license files and reads its NOTICE.
func (m *Module) read() error {
	if m.Dir == "" {
		return fmt.Errorf("%s: not in the module cache (run go mod download)", m)
	}
	entries, err := os.ReadDir(m.Dir)
	if err != nil {
		return err
	}
	found := map[string]bool{}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		name := e.Name()
		switch {
		case licenseFile.MatchString(name):
			b, err := os.ReadFile(filepath.Join(m.Dir, name))
			if err != nil {
				return err
			}
			m.LicenseFiles = append(m.LicenseFiles, name)
			m.Texts = append(m.Texts, string(b))
			for _, l := range Classify(string(b)) {
				found[l] = true
			}
		case noticeFile.MatchString(name):
			b, err := os.ReadFile(filepath.Join(m.Dir, name))
			if err != nil {
				return err
			}
			m.Notice = strings.TrimSpace(string(b))
		}
	}
	for l := range found {
		m.Licenses = append(m.Licenses, l)
	}
	slices.Sort(m.Licenses)
	return nil
}

// A license is recognised by all of its sentences (normalised: lower case, words only).
var known = []struct {
	spdx      string
	all       []string
	none      []string // with these, it is another license
	anyOfMore []string // one of these is needed too, when set
}{
	{spdx: "Apache-2.0", all: []string{"apache license version 2 0"},
		anyOfMore: []string{"terms and conditions for use reproduction and distribution", "licensed under the apache license version 2 0"}},
	{spdx: "MIT", all: []string{"permission is hereby granted free of charge to any person obtaining a copy",
		"the above copyright notice and this permission notice shall be included"}},
	{spdx: "BSD-3-Clause", all: []string{"redistribution and use in source and binary forms with or without modification are permitted",
		"neither the name of"}, none: []string{"all advertising materials"}},
	{spdx: "BSD-2-Clause", all: []string{"redistribution and use in source and binary forms with or without modification are permitted"},
		none: []string{"neither the name of", "all advertising materials"}},
	{spdx: "ISC", all: []string{"permission to use copy modify and or distribute this software for any purpose with or without fee is hereby granted"}},
}

// Markers of licenses Stormgate cannot ship under Apache-2.0 (or that need a person to read them):
// each is reported under its own name, which is never in Allowed.
var refused = []struct{ name, phrase string }{
	{"GPL", "gnu general public license"},
	{"LGPL", "gnu lesser general public license"},
	{"LGPL", "gnu library general public license"},
	{"AGPL", "gnu affero general public license"},
	{"MPL", "mozilla public license"},
	{"EPL", "eclipse public license"},
	{"CDDL", "common development and distribution license"},
	{"SSPL", "server side public license"},
	{"BUSL", "business source license"},
	{"Commons-Clause", "commons clause"},
	{"non-commercial", "noncommercial"},
	{"JSON (\"Good, not Evil\")", "shall be used for good not evil"},
	{"BSD-4-Clause", "all advertising materials mentioning features"},
}

var nonWord = regexp.MustCompile(`[^a-z0-9]+`)

// normalise lowercases text and reduces it to words separated by single spaces, so that line
// breaks, indentation, bullets and quotes do not matter.
func normalise(text string) string {
	return " " + strings.TrimSpace(nonWord.ReplaceAllString(strings.ToLower(text), " ")) + " "
}

// Classify returns the SPDX names of the licenses in a license file's text, sorted (a file may
// hold several, as go.yaml.in/yaml's MIT and Apache-2.0); refused licenses by the names in
// refused. Empty when nothing is recognised.
func Classify(text string) []string {
	n := normalise(text)
	has := func(p string) bool { return strings.Contains(n, " "+p+" ") }
	set := map[string]bool{}
	for _, k := range known {
		ok := true
		for _, p := range k.all {
			ok = ok && has(p)
		}
		for _, p := range k.none {
			ok = ok && !has(p)
		}
		if ok && len(k.anyOfMore) > 0 {
			ok = slices.ContainsFunc(k.anyOfMore, has)
		}
		if ok {
			set[k.spdx] = true
		}
	}
	for _, r := range refused {
		if has(r.phrase) {
			set[r.name] = true
		}
	}
	out := make([]string, 0, len(set))
	for l := range set {
		out = append(out, l)
	}
	slices.Sort(out)
	return out
}
