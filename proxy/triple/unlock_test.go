package triple

import (
	"go/ast"
	"testing"

	"github.com/stormgate/stormgate/internal/testkit"
)

// TestH2PoolMutexReleasedByUnlock: a batch of frames that claims a provider connection's writer
// under h2Pool.mu is written by h2Pool.unlock after the lock is released. Released any other way
// (hp.mu.Unlock()), the claim is never written and that connection's writer stays claimed: every
// later frame waits behind it, the provider sees nothing more, and its calls hang until the PING
// timeout. So every release of an h2Pool's mu goes through unlock; this test reads the package's
// source and fails on any other Unlock of a field mu reached through a value named hp.
func TestH2PoolMutexReleasedByUnlock(t *testing.T) {
	fset, files := testkit.ParseOwn(t, 0)
	for _, f := range files {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil || fn.Name.Name == "unlock" && recvType(fn) == "h2Pool" {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok || sel.Sel.Name != "Unlock" {
					return true
				}
				mu, ok := sel.X.(*ast.SelectorExpr)
				if !ok || mu.Sel.Name != "mu" {
					return true
				}
				if owner := lastName(mu.X); owner == "hp" {
					t.Errorf("%s: %s releases an h2Pool's mu without unlock", fset.Position(call.Pos()), fn.Name.Name)
				}
				return true
			})
		}
	}
}

func recvType(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return ""
	}
	t := fn.Recv.List[0].Type
	if st, ok := t.(*ast.StarExpr); ok {
		t = st.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

// lastName is the last identifier of x (hp in k.hp, hp).
func lastName(x ast.Expr) string {
	switch x := x.(type) {
	case *ast.Ident:
		return x.Name
	case *ast.SelectorExpr:
		return x.Sel.Name
	}
	return ""
}
