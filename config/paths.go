package config

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// A key's YAML path is derived from the structs, never typed by hand: the
// yaml tag of each field names its key, a list item is path[i] and a map
// value is path.name. Validation, defaults and the restart rules find a
// setting's path from a pointer to its field in the Config.

// paths maps the address of every setting of one Config (every field with
// a yaml key, every list item, every map value a pointer leads to) to its
// YAML path. It is built once per use and read while the Config does not
// change shape.
type paths map[setting]string

// setting identifies a value in memory. The type tells a struct from its
// first field, which share an address.
type setting struct {
	addr uintptr
	typ  reflect.Type
}

// pathsOf indexes the settings of c.
func pathsOf(c *Config) paths {
	ps := paths{}
	ps.walk(reflect.ValueOf(c).Elem(), "")
	return ps
}

func (ps paths) walk(v reflect.Value, path string) {
	if v.CanAddr() {
		ps[setting{v.UnsafeAddr(), v.Type()}] = path
	}
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			ps.walk(v.Elem(), path)
		}
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			if key, ok := yamlKey(t.Field(i)); ok {
				ps.walk(v.Field(i), joinKey(path, key))
			}
		}
	case reflect.Slice:
		for i := range v.Len() {
			ps.walk(v.Index(i), itemPath(path, i))
		}
	case reflect.Map:
		iter := v.MapRange()
		for iter.Next() {
			ps.walk(iter.Value(), joinKey(path, iter.Key().String()))
		}
	}
}

// of returns the YAML path of the setting that field points to. A pointer
// that is not into the indexed Config is a mistake in this package, and
// panics.
func (ps paths) of(field any) string {
	v := reflect.ValueOf(field)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		panic(fmt.Sprintf("config: path of %T: not a pointer to a setting", field))
	}
	p, ok := ps[setting{v.Pointer(), v.Type().Elem()}]
	if !ok {
		panic(fmt.Sprintf("config: path of %T: not a setting of this configuration", field))
	}
	return p
}

// yamlKey returns the YAML key of a struct field: "" for an inline field,
// false for a field that is not in the YAML.
func yamlKey(f reflect.StructField) (string, bool) {
	if !f.IsExported() {
		return "", false
	}
	tag, ok := f.Tag.Lookup("yaml")
	if !ok {
		return "", false
	}
	name, opts, _ := strings.Cut(tag, ",")
	if name == "-" {
		return "", false
	}
	if opts == "inline" {
		return "", true
	}
	return name, true
}

// joinKey returns the path of key under path.
func joinKey(path, key string) string {
	switch {
	case key == "":
		return path
	case path == "":
		return key
	}
	return path + "." + key
}

// itemPath returns the path of item i of the list at path.
func itemPath(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

// schemaKeys returns the path of every leaf key of the schema, a map key
// written "*" and a list item "[]": networks.*.upstream.budget.rps,
// teams[].keys[].id. A leaf is a key whose value is not a mapping of
// further keys; a list of mappings (teams, keys, dons) is not a leaf.
func schemaKeys() []string {
	var out []string
	var walk func(t reflect.Type, path string)
	walk = func(t reflect.Type, path string) {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch {
		case t.Kind() == reflect.Struct:
			for i := range t.NumField() {
				if key, ok := yamlKey(t.Field(i)); ok {
					walk(t.Field(i).Type, joinKey(path, key))
				}
			}
		case t.Kind() == reflect.Map:
			walk(t.Elem(), joinKey(path, "*"))
		case t.Kind() == reflect.Slice && structType(t.Elem()):
			walk(t.Elem(), path+"[]")
		default:
			out = append(out, path)
		}
	}
	walk(reflect.TypeFor[Config](), "")
	return out
}

func structType(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Kind() == reflect.Struct
}
