package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Load reads the configuration file at path with Parse, expanding ${VAR}
// from the process environment. Relative secret file paths are relative to
// the directory of path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	cfg, err := parse(data, os.LookupEnv, filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("config %s:\n%w", path, err)
	}
	return cfg, nil
}

// Parse reads a configuration from YAML. It expands ${VAR} references in
// the raw text with lookupEnv (os.LookupEnv when nil; see the rules below),
// decodes the YAML refusing unknown keys, fills the defaults of omitted
// keys, lower-cases host names and stream IDs, reads secret files
// (relative paths are relative to the working directory) and validates.
//
// On failure the error is a Problems listing every problem found: in the
// variable references, in the YAML types and keys, and in validation.
// A validation problem of a key on whose lines (its own, or those of the
// keys and items below it) a reference or type problem was found is left
// out, as it would only repeat that problem.
//
// ${VAR} expansion:
//   - Only the form ${NAME} is expanded (NAME: a letter or '_', then
//     letters, digits or '_'); ${NAME:-default} and other shell forms are
//     errors, as is any other "${".
//   - $$ is a literal $; $${NAME} is the literal text ${NAME}. A lone $
//     followed by anything else is kept as it is.
//   - An unset variable is an error that names it and its line; one set to
//     "" expands to nothing. A value containing a line break is an error.
//   - Lines whose first non-blank character is '#' are comments and are not
//     expanded; a comment after a value on the same line is.
//   - Values are inserted verbatim: single-quote a reference whose value may
//     hold characters that YAML treats specially ('${SECRET}').
func Parse(data []byte, lookupEnv func(string) (string, bool)) (*Config, error) {
	return parse(data, lookupEnv, "")
}

// source is what a Config remembers of the text it was parsed from.
type source struct {
	baseDir string         // relative file paths are resolved against it
	lines   map[string]int // YAML path of every key present -> its line
}

// has reports whether the YAML path was present in the file.
func (s *source) has(path string) bool {
	if s == nil {
		return false
	}
	_, ok := s.lines[path]
	return ok
}

// line returns the line of path, or of its nearest ancestor present in the
// file, or 0.
func (s *source) line(path string) int {
	if s == nil {
		return 0
	}
	for path != "" {
		if l, ok := s.lines[path]; ok {
			return l
		}
		path = parentPath(path)
	}
	return 0
}

// touches reports whether a validation problem lies on one of the lines,
// at its own key or at a key below it: then it follows from a problem
// already reported there (an unset variable, a value of the wrong type).
func (s *source) touches(p Problem, lines map[int]bool) bool {
	if len(lines) == 0 {
		return false
	}
	if lines[p.Line] {
		return true
	}
	for path, l := range s.lines {
		if lines[l] && strings.HasPrefix(path, p.Path) && len(path) > len(p.Path) &&
			(path[len(p.Path)] == '.' || path[len(p.Path)] == '[') {
			return true
		}
	}
	return false
}

func parentPath(path string) string {
	if strings.HasSuffix(path, "]") {
		if i := strings.LastIndexByte(path, '['); i >= 0 {
			return path[:i]
		}
	}
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		return path[:i]
	}
	return ""
}

func parse(data []byte, lookup func(string) (string, bool), baseDir string) (*Config, error) {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	text, values, problems := expand(data, lookup)
	scrub := scrubber(values)

	var root yaml.Node
	if err := yaml.Unmarshal(text, &root); err != nil {
		return nil, append(problems, Problem{Msg: scrub(err.Error())})
	}
	src := &source{baseDir: baseDir, lines: map[string]int{}}
	budget := maxNodes
	src.walk(&root, "", &budget)
	if budget < 0 {
		return nil, append(problems, Problem{Msg: "the document is too large (aliases expand to too many nodes)"})
	}

	cfg := &Config{src: src}
	dec := yaml.NewDecoder(bytes.NewReader(text))
	dec.KnownFields(true)
	err := dec.Decode(cfg)
	var te *yaml.TypeError
	switch {
	case err == nil:
		var next yaml.Node
		if dec.Decode(&next) != io.EOF {
			problems = append(problems, Problem{Msg: "more than one YAML document"})
		}
	case errors.Is(err, io.EOF): // an empty file; validation says what is missing
	case errors.As(err, &te):
		for _, msg := range te.Errors {
			problems = append(problems, lineProblem(scrub(msg)))
		}
	default:
		return nil, append(problems, Problem{Msg: scrub(err.Error())})
	}

	cfg.applyDefaults()
	cfg.normalize()
	cfg.readSecretFiles()
	cfg.loadTLS()
	if err := cfg.Validate(); err != nil {
		var vp Problems
		if !errors.As(err, &vp) {
			return nil, append(problems, Problem{Msg: err.Error()})
		}
		seen := map[int]bool{}
		for _, p := range problems {
			if p.Line > 0 {
				seen[p.Line] = true
			}
		}
		for _, p := range vp {
			if !src.touches(p, seen) {
				problems = append(problems, p)
			}
		}
	}
	if len(problems) > 0 {
		problems.sortByLine()
		return nil, problems
	}
	return cfg, nil
}

// maxNodes bounds the nodes that walk visits, aliases expanded, so that a
// document of nested aliases cannot make it run for ever.
const maxNodes = 100_000

// walk records the line of every mapping key and sequence item under n,
// by YAML path: server.admin_listen, teams[1].keys[0].secret. Aliases are
// followed and merge keys (<<) add their keys to the mapping they are in,
// as the decoder does.
func (s *source) walk(n *yaml.Node, path string, budget *int) {
	if *budget--; *budget < 0 || n == nil {
		return
	}
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			s.walk(c, path, budget)
		}
	case yaml.AliasNode:
		s.walk(n.Alias, path, budget)
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p := path + "[" + strconv.Itoa(i) + "]"
			s.lines[p] = c.Line
			s.walk(c, p, budget)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
				s.walkMerge(v, path, budget)
				continue
			}
			p := k.Value
			if path != "" {
				p = path + "." + k.Value
			}
			if _, dup := s.lines[p]; !dup {
				s.lines[p] = k.Line
			}
			s.walk(v, p, budget)
		}
	}
}

func (s *source) walkMerge(v *yaml.Node, path string, budget *int) {
	if v.Kind == yaml.AliasNode {
		v = v.Alias
	}
	if v.Kind == yaml.SequenceNode {
		for _, c := range v.Content {
			s.walkMerge(c, path, budget)
		}
		return
	}
	s.walk(v, path, budget)
}

var lineRE = regexp.MustCompile(`^line (\d+): (.*)$`)

// lineProblem turns a decoder message "line N: text" into a Problem.
func lineProblem(msg string) Problem {
	if m := lineRE.FindStringSubmatch(msg); m != nil {
		if n, err := strconv.Atoi(m[1]); err == nil {
			return Problem{Line: n, Msg: m[2]}
		}
	}
	return Problem{Msg: msg}
}

// The decoder quotes up to ten characters of a value it cannot convert
// ("cannot unmarshal !!str `s3cr...` into int"); the value could be a
// secret that was written in the wrong place, so it is dropped.
var quotedValueRE = regexp.MustCompile("(cannot unmarshal !![a-z]+) `[^`]*`")

// The parser quotes an anchor's name ("unknown anchor 's3cr…' referenced"),
// and a value written as "*s3cr…" is an alias to such an anchor: a secret
// beginning with "*" left unquoted. The decoder also prints a map key it
// cannot use. Both are dropped.
var (
	anchorRE = regexp.MustCompile(`(unknown anchor|anchor) '[^']*'`)
	mapKeyRE = regexp.MustCompile(`(invalid map key): .*$`)
)

// scrubber returns a function that removes quoted values, anchor names,
// map keys and the values of expanded variables from a decoder message.
func scrubber(values []string) func(string) string {
	return func(msg string) string {
		msg = quotedValueRE.ReplaceAllString(msg, "$1")
		msg = anchorRE.ReplaceAllString(msg, "$1 "+Redacted)
		msg = mapKeyRE.ReplaceAllString(msg, "$1 "+Redacted)
		for _, v := range values {
			if len(v) >= 4 {
				msg = strings.ReplaceAll(msg, v, Redacted)
			}
		}
		return msg
	}
}
