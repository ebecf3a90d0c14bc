package main

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The tree's two size rules (ARCHITECTURE, "How it is checked"): no type
// has more than maxMethods methods unless its doc says why (names its
// methods), and no file of the packages where the work is has more than
// maxLines lines unless its opening comment says why (names its lines).
// Test files are not held to them.
const (
	maxMethods = 20
	maxLines   = 500
)

var linesHeld = []string{"proxy", "realtime", "wsgate", "ratelimit", "server", "config"}

func TestTreeSizes(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	type typeInfo struct {
		methods int
		doc     string
	}
	types := map[string]*typeInfo{} // package directory + "." + type name
	info := func(key string) *typeInfo {
		if types[key] == nil {
			types[key] = &typeInfo{}
		}
		return types[key]
	}
	files := 0
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, src, parser.ParseComments)
		if err != nil {
			return err
		}
		files++
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		dir := filepath.ToSlash(filepath.Dir(rel))
		if top, _, _ := strings.Cut(dir, "/"); slices.Contains(linesHeld, top) {
			if n := bytes.Count(src, []byte("\n")); n > maxLines {
				header := ""
				if len(f.Comments) > 0 && f.Comments[0].Pos() < f.Package {
					header = f.Comments[0].Text()
				}
				assert.Contains(t, header, "lines", "%s has %d lines (more than %d) and its opening comment does not say why", rel, n, maxLines)
			}
		}
		for _, decl := range f.Decls {
			switch decl := decl.(type) {
			case *ast.FuncDecl:
				if decl.Recv == nil || len(decl.Recv.List) == 0 {
					continue
				}
				if name := receiverType(decl.Recv.List[0].Type); name != "" {
					info(dir+"."+name).methods++
				}
			case *ast.GenDecl:
				for _, spec := range decl.Specs {
					ts, ok := spec.(*ast.TypeSpec)
					if !ok {
						continue
					}
					doc := ts.Doc
					if doc == nil {
						doc = decl.Doc
					}
					info(dir + "." + ts.Name.Name).doc = doc.Text()
				}
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, files, 100, "the tree was walked")
	for name, ti := range types {
		if ti.methods > maxMethods {
			assert.Contains(t, ti.doc, "methods", "%s has %d methods (more than %d) and its doc does not say why", name, ti.methods, maxMethods)
		}
	}
}

// receiverType is the name of a method receiver's type: T, *T, T[P], *T[P].
func receiverType(e ast.Expr) string {
	if s, ok := e.(*ast.StarExpr); ok {
		e = s.X
	}
	switch x := e.(type) {
	case *ast.IndexExpr:
		e = x.X
	case *ast.IndexListExpr:
		e = x.X
	}
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}
