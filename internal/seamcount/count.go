package main

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// use is one unexported identifier of the rest of the package and where the protocol's files use it.
type use struct {
	name  string // "pkg name" for a package-level one, else "Recv.name"
	n     int
	files string // comma-separated, sorted
}

// count type-checks the package in dir (its non-test files) and returns, sorted by name, the unexported
// identifiers declared outside the files beginning with prefix that those files use.
func count(dir, prefix string) ([]use, error) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		return nil, err
	}
	var files []*ast.File
	for _, p := range pkgs {
		for _, f := range p.Files {
			files = append(files, f)
		}
	}
	// The imports are type-checked from source; an error there (none expected) does not stop the count of
	// the package's own identifiers, which is what matters.
	conf := types.Config{Importer: importer.ForCompiler(fset, "source", nil), Error: func(error) {}}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}, Selections: map[*ast.SelectorExpr]*types.Selection{}}
	pkg, _ := conf.Check(filepath.Base(dir), fset, files, info)
	if pkg == nil {
		return nil, os.ErrInvalid
	}
	inProtocol := func(pos token.Pos) bool {
		return strings.HasPrefix(filepath.Base(fset.Position(pos).Filename), prefix)
	}
	byName := map[string]map[string]int{}
	note := func(name string, at token.Pos) {
		if byName[name] == nil {
			byName[name] = map[string]int{}
		}
		byName[name][filepath.Base(fset.Position(at).Filename)]++
	}
	for id, obj := range info.Uses {
		if obj == nil || obj.Exported() || obj.Pkg() != pkg || obj.Parent() != pkg.Scope() || !inProtocol(id.Pos()) || inProtocol(obj.Pos()) {
			continue
		}
		note("pkg "+obj.Name(), id.Pos())
	}
	for sel, s := range info.Selections {
		obj := s.Obj()
		if obj.Exported() || obj.Pkg() != pkg || !inProtocol(sel.Pos()) || inProtocol(obj.Pos()) {
			continue
		}
		note(types.TypeString(s.Recv(), func(*types.Package) string { return "" })+"."+obj.Name(), sel.Pos())
	}
	var out []use
	for name, where := range byName {
		u := use{name: name}
		var fs []string
		for f, n := range where {
			u.n += n
			fs = append(fs, f)
		}
		slices.Sort(fs)
		u.files = strings.Join(fs, ",")
		out = append(out, u)
	}
	slices.SortFunc(out, func(a, b use) int { return strings.Compare(a.name, b.name) })
	return out, nil
}
