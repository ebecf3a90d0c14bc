package config

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// A key's text lives in one place for each reader: the doc comment of its
// field (for Go readers, with its default) and its line in
// config.example.yaml (for operators). The README points to the example
// and repeats no key's text. These tests hold the places to the schema and
// to the one table of defaults (defaultsFor), so that none drifts.

// fieldDocs returns the doc comment of every struct field of the package,
// by "Type.Field".
func fieldDocs(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	docs := map[string]string{}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		require.NoError(t, err)
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, spec := range gd.Specs {
				ts := spec.(*ast.TypeSpec)
				doc := ts.Doc
				if doc == nil {
					doc = gd.Doc
				}
				docs[ts.Name.Name] = strings.Join(strings.Fields(doc.Text()), " ")
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					continue
				}
				for _, fld := range st.Fields.List {
					for _, id := range fld.Names {
						docs[ts.Name.Name+"."+id.Name] = strings.Join(strings.Fields(fld.Doc.Text()), " ")
					}
					if len(fld.Names) == 0 { // embedded: Credentials
						docs[ts.Name.Name+"."+typeName(fld.Type)] = strings.Join(strings.Fields(fld.Doc.Text()), " ")
					}
				}
			}
		}
	}
	return docs
}

func typeName(e ast.Expr) string {
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

// defaultRE finds the default a doc comment states: "Default 5s.",
// "Default {rps: 10, burst: 10}.", `Default "info".`, "Default none".
var defaultRE = regexp.MustCompile(`\bDefault ("[^"]*"|\{[^}]*\}|\[[^\]]*\]|[^ ,;:(]+?)(?:[ ,;:(]|\.(?: |$)|$)`)

// Every key's field has a doc comment, and a default it states is the one
// in the table of defaults: the demo configuration's sections, a known
// network's upstream, nothing below a team or an optional block.
func TestFieldDocsStateTheDefaults(t *testing.T) {
	docs := fieldDocs(t)
	shape := &Config{Networks: map[string]*Network{"mainnet": {}}, Teams: []Team{{Keys: []Key{{}}}}}
	def := reflect.ValueOf(defaultsFor(shape)).Elem()
	checked := 0
	var walk func(v reflect.Value, path string)
	walk = func(v reflect.Value, path string) {
		t.Helper()
		typ := v.Type()
		for i := range typ.NumField() {
			f := typ.Field(i)
			key, ok := yamlKey(f)
			if !ok {
				continue
			}
			p := joinKey(path, key)
			doc := docs[typ.Name()+"."+f.Name]
			if doc == "" { // a section: its type's doc describes it
				doc = docs[elemType(f.Type).Name()]
			}
			assert.NotEmpty(t, doc, "%s (%s.%s) has no doc comment", p, typ.Name(), f.Name)
			fv := v.Field(i)
			if m := defaultRE.FindStringSubmatch(doc); m != nil && f.Type.Kind() != reflect.Struct {
				checked++
				assert.Equal(t, fv.Interface(), docValue(t, m[1], f.Type), "%s: the doc says Default %s", p, m[1])
			}
			for fv.Kind() == reflect.Pointer {
				if fv.IsNil() { // an optional block: its keys have no default
					fv = reflect.New(fv.Type().Elem())
				}
				fv = fv.Elem()
			}
			switch {
			case fv.Kind() == reflect.Struct:
				walk(fv, p)
			case fv.Kind() == reflect.Map && structType(fv.Type().Elem()):
				if iter := fv.MapRange(); iter.Next() {
					walk(iter.Value().Elem(), joinKey(p, "*"))
				} else {
					walk(reflect.New(fv.Type().Elem().Elem()).Elem(), joinKey(p, "*"))
				}
			case fv.Kind() == reflect.Slice && structType(fv.Type().Elem()):
				if fv.Len() > 0 {
					walk(fv.Index(0), p+"[]")
				} else {
					walk(reflect.New(fv.Type().Elem()).Elem(), p+"[]")
				}
			}
		}
	}
	walk(def, "")
	assert.Greater(t, checked, 60, "defaults found in the docs")
	t.Logf("%d defaults checked", checked)
}

// elemType returns the struct type of a field: its own, or what its
// pointer, map or list holds.
func elemType(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Map || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	return t
}

// docValue decodes the default a doc states as a value of type typ; none
// and no (no limit) are the zero value.
func docValue(t *testing.T, text string, typ reflect.Type) any {
	t.Helper()
	v := reflect.New(typ)
	if text != "none" && text != "no" {
		require.NoError(t, yaml.Unmarshal([]byte(text), v.Interface()), "Default %s as %s", text, typ)
	}
	return v.Elem().Interface()
}

// config.example.yaml shows every key "with its default": each key it
// gives that has a default in the table has that value, but for those
// whose line says why it differs.
func TestExampleShowsTheDefaults(t *testing.T) {
	ex := parseExample(t)
	got, want := map[string]reflect.Value{}, map[string]reflect.Value{}
	indexValues(reflect.ValueOf(ex).Elem(), "", got)
	indexValues(reflect.ValueOf(defaultsFor(ex)).Elem(), "", want)
	checked := 0
	for path := range ex.src.lines {
		d, ok := want[path]
		if !ok || d.IsZero() || structType(d.Type()) || d.Kind() == reflect.Map ||
			d.Kind() == reflect.Slice && structType(d.Type().Elem()) {
			continue // a key without a default, or a mapping of keys
		}
		checked++
		assert.Equal(t, d.Interface(), got[path].Interface(), "config.example.yaml: %s", path)
	}
	assert.Greater(t, checked, 50, "keys with a default in the example")
}

// indexValues records the value of every setting under v by its path.
func indexValues(v reflect.Value, path string, out map[string]reflect.Value) {
	out[path] = v
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			indexValues(v.Elem(), path, out)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if key, ok := yamlKey(v.Type().Field(i)); ok {
				indexValues(v.Field(i), joinKey(path, key), out)
			}
		}
	case reflect.Map:
		iter := v.MapRange()
		for iter.Next() {
			indexValues(iter.Value(), joinKey(path, iter.Key().String()), out)
		}
	case reflect.Slice:
		for i := range v.Len() {
			indexValues(v.Index(i), itemPath(path, i), out)
		}
	}
}

// keyRefRE is a key written in backquotes in the documents: `realtime.grace`,
// `cache.shared.*`, `tls.client_auth`.
var keyRefRE = regexp.MustCompile("`([a-z_]+(?:\\.[a-z_*]+)+)(?:[:=][^`]*)?`")

var fileExt = regexp.MustCompile(`\.(go|md|ya?ml|json|sh|lua)$`)

// Every key the README and ARCHITECTURE.md name by its path is a key of
// the schema: renaming a key cannot leave a document naming the old one.
// A path may start at a section (`realtime.grace`) or below one
// (`tls.client_auth`, `upstream.ws_url`); `.*` names every key of a block.
func TestDocumentsNameKeysThatExist(t *testing.T) {
	var suffixes []string
	for _, k := range schemaKeys() {
		k = strings.NewReplacer("[]", "", ".*", "").Replace(k)
		for p := k; p != ""; p = parentPath(p) {
			suffixes = append(suffixes, p)
		}
		segs := strings.Split(k, ".")
		for i := range segs {
			for j := i + 1; j <= len(segs); j++ {
				suffixes = append(suffixes, strings.Join(segs[i:j], "."))
			}
		}
	}
	known := map[string]bool{}
	for _, s := range suffixes {
		known[s] = true
	}
	sections := map[string]bool{}
	for _, k := range schemaKeys() {
		sections[strings.FieldsFunc(k, func(r rune) bool { return r == '.' || r == '[' })[0]] = true
	}
	named := 0
	for _, doc := range []string{"../README.md", "../ARCHITECTURE.md"} {
		text, err := os.ReadFile(doc)
		require.NoError(t, err)
		for _, m := range keyRefRE.FindAllStringSubmatch(string(text), -1) {
			ref := strings.TrimSuffix(m[1], ".*")
			first, _, _ := strings.Cut(ref, ".")
			if !sections[first] && !known[first] || fileExt.MatchString(ref) {
				continue // not a key: a file name, a Go name
			}
			named++
			assert.True(t, known[ref], "%s names `%s`, which is not a key", doc, m[1])
		}
	}
	t.Logf("%d key references", named)
}
