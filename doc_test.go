package leaserouter_test

import (
	"go/ast"
	"go/build"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// publishedPackages are the directories of the packages users import,
// across the published modules.
var publishedPackages = []string{".", "pgrouter", "pgrouter/pgtest", "console", "otel", "prometheus"}

// notForUsers matches what a user's godoc must not point at: the team's
// design pages and seeds, which the repository does not ship, and source
// files, which are not documentation.
var notForUsers = regexp.MustCompile(`DESIGN|\.\./shared|\b[Ss]eeds?\b|\b[\w/.-]+\.go\b`)

// TestExportedDocsCiteNoDesignFileSeedOrSourceFile: no doc comment of an
// exported identifier (package overviews, types and their exported fields
// and methods, functions, constants, variables) in a published package
// cites a design file, a seed or a source file: godoc says what users
// need itself.
func TestExportedDocsCiteNoDesignFileSeedOrSourceFile(t *testing.T) {
	for _, dir := range publishedPackages {
		for name, text := range exportedDocs(t, dir) {
			for s := range strings.Lines(text) {
				if m := notForUsers.FindString(s); m != "" {
					t.Errorf("%s: %s's doc cites %q: %s", dir, name, m, strings.TrimSpace(s))
				}
			}
		}
	}
}

// exportedDocs are the doc comments users see of the package in dir (its
// non-test files for this system), by identifier.
func exportedDocs(t *testing.T, dir string) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	entries, err := os.ReadDir(filepath.FromSlash(dir))
	require.NoError(t, err)
	var files []*ast.File
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		if ok, err := build.Default.MatchFile(filepath.FromSlash(dir), name); err != nil || !ok {
			require.NoError(t, err)
			continue // another system's file
		}
		f, err := parser.ParseFile(fset, filepath.Join(filepath.FromSlash(dir), name), nil, parser.ParseComments)
		require.NoError(t, err)
		files = append(files, f)
	}
	d, err := doc.NewFromFiles(fset, files, dir)
	require.NoError(t, err)
	docs := map[string]string{}
	add := func(name string, groups ...*ast.CommentGroup) {
		for _, g := range groups {
			if g != nil {
				docs[name] += g.Text()
			}
		}
	}
	docs["package "+d.Name] += d.Doc
	values := func(prefix string, vs []*doc.Value) {
		for _, v := range vs {
			docs[prefix+strings.Join(v.Names, ",")] += v.Doc
			for _, s := range v.Decl.Specs {
				vs := s.(*ast.ValueSpec)
				if ast.IsExported(vs.Names[0].Name) {
					add(vs.Names[0].Name, vs.Doc, vs.Comment)
				}
			}
		}
	}
	funcs := func(prefix string, fs []*doc.Func) {
		for _, f := range fs {
			docs[prefix+f.Name] += f.Doc
		}
	}
	values("", d.Consts)
	values("", d.Vars)
	funcs("", d.Funcs)
	for _, ty := range d.Types {
		docs[ty.Name] += ty.Doc
		values("", ty.Consts)
		values("", ty.Vars)
		funcs("", ty.Funcs)
		funcs(ty.Name+".", ty.Methods)
		for _, s := range ty.Decl.Specs {
			ts := s.(*ast.TypeSpec)
			var fields *ast.FieldList
			switch x := ts.Type.(type) {
			case *ast.StructType:
				fields = x.Fields
			case *ast.InterfaceType:
				fields = x.Methods
			}
			if fields == nil {
				continue
			}
			for _, f := range fields.List {
				for _, n := range f.Names {
					if n.IsExported() {
						add(ty.Name+"."+n.Name, f.Doc, f.Comment)
					}
				}
				if len(f.Names) == 0 { // embedded
					add(ty.Name+"."+types(f.Type), f.Doc, f.Comment)
				}
			}
		}
	}
	return docs
}

// types is the name of an embedded field's type.
func types(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.Ident:
		return x.Name
	case *ast.SelectorExpr:
		return x.Sel.Name
	case *ast.StarExpr:
		return types(x.X)
	}
	return "?"
}
