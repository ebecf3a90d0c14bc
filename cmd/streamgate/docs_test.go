package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// fence matches a fenced block of the README: its language and its text.
var fence = regexp.MustCompile("(?ms)^```([a-z]*)\n(.*?)^```")

// exportLine is an "export NAME=VALUE" line, in a shell block of the
// README or a comment at the top of config.example.yaml.
var exportLine = regexp.MustCompile(`(?m)^(?:#\s+)?export ([A-Z][A-Z0-9_]*)=(\S+)$`)

// varRef is a ${NAME} reference of a configuration.
var varRef = regexp.MustCompile(`\$\{([A-Z][A-Z0-9_]*)\}`)

// exports returns the variables that text sets with export lines.
func exports(text string) map[string]string {
	out := map[string]string{}
	for _, m := range exportLine.FindAllStringSubmatch(text, -1) {
		out[m[1]] = m[2]
	}
	return out
}

// referenced returns the variables text refers to outside comment lines.
func referenced(text string) []string {
	var out []string
	for line := range strings.Lines(text) {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		for _, m := range varRef.FindAllStringSubmatch(line, -1) {
			out = append(out, m[1])
		}
	}
	return out
}

// envOf turns vars into NAME=VALUE entries, which override the test's own
// environment.
func envOf(vars map[string]string) []string {
	var env []string
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	return env
}

// merge lays the top-level keys of a fragment over base, map into map.
func merge(base, over map[string]any) {
	for k, v := range over {
		if bm, ok := base[k].(map[string]any); ok {
			if om, ok := v.(map[string]any); ok {
				merge(bm, om)
				continue
			}
		}
		base[k] = v
	}
}

// TestReadmeConfigurationsPassCheck runs "streamgate check" on every YAML
// block of the README, with the variables the README's shell blocks
// export. A block without networks is a fragment (such as cache.shared):
// it is checked laid over the README's first complete configuration.
func TestReadmeConfigurationsPassCheck(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	vars := map[string]string{}
	var blocks []string
	for _, m := range fence.FindAllStringSubmatch(string(readme), -1) {
		switch m[1] {
		case "sh":
			for k, v := range exports(m[2]) {
				vars[k] = v
			}
		case "yaml":
			blocks = append(blocks, m[2])
		}
	}
	require.GreaterOrEqual(t, len(blocks), 2, "the short configuration and the shared cache's")
	var full map[string]any
	for i, b := range blocks {
		for _, v := range referenced(b) {
			assert.Contains(t, vars, v, "README yaml block %d uses ${%s}: the README must list it in an export line", i+1, v)
		}
		var doc map[string]any
		require.NoError(t, yaml.Unmarshal([]byte(b), &doc), "README yaml block %d", i+1)
		text := b
		if _, complete := doc["networks"]; complete {
			if full == nil {
				full = doc
			}
		} else {
			require.NotNil(t, full, "README yaml block %d is a fragment before any complete configuration", i+1)
			var base map[string]any
			require.NoError(t, yaml.Unmarshal([]byte(blocks[0]), &base))
			merge(base, doc)
			out, err := yaml.Marshal(base)
			require.NoError(t, err)
			text = string(out)
		}
		stdout, stderr, code := runTool(t, envOf(vars), "check", writeFile(t, "readme.yaml", text))
		assert.Equal(t, 0, code, "README yaml block %d:\n%s\nstreamgate check: %s", i+1, b, stderr)
		assert.Contains(t, stdout, ": ok (")
	}
}

// TestExampleConfigPassesCheck runs "streamgate check" on
// config.example.yaml with exactly the variables its header exports, and
// checks that the header exports every variable the file uses.
func TestExampleConfigPassesCheck(t *testing.T) {
	t.Parallel()
	path := filepath.Join("..", "..", "config.example.yaml")
	text, err := os.ReadFile(path)
	require.NoError(t, err)
	header, _, _ := strings.Cut(string(text), "\nserver:")
	vars := exports(header)
	used := referenced(string(text))
	require.NotEmpty(t, used)
	for _, v := range used {
		assert.Contains(t, vars, v, "config.example.yaml uses ${%s}: its header must export it", v)
	}
	for k := range vars {
		assert.Contains(t, used, k, "the header exports %s, which the file does not use", k)
	}
	// The variables unset first, so that only the header's values count.
	var env []string
	for _, v := range used {
		env = append(env, v+"=")
	}
	env = append(env, envOf(vars)...)
	stdout, stderr, code := runTool(t, env, "check", path)
	assert.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "ok (2 networks, 2 teams)")

	// Without them it fails, naming each: the header is what makes it pass.
	var unset []string
	for _, v := range used {
		unset = append(unset, v+"=")
	}
	_, stderr, code = runTool(t, unset, "check", path)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "secret")
}

// TestReadmeLayoutNamesEveryPackage: the README's layout table has a row
// for every folder of the repository that holds Go code, and none for a
// folder that is gone.
func TestReadmeLayoutNamesEveryPackage(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	_, layout, ok := strings.Cut(string(readme), "\n## Layout\n")
	require.True(t, ok, "README has a Layout section")
	if end := strings.Index(layout, "\n## "); end >= 0 {
		layout = layout[:end]
	}
	rows := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z0-9/_-]+)` \\|").FindAllStringSubmatch(layout, -1) {
		rows[m[1]] = true
	}
	dirs := map[string]bool{}
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() && path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(name, ".go") {
			rel, err := filepath.Rel(root, filepath.Dir(path))
			if err != nil {
				return err
			}
			dirs[filepath.ToSlash(rel)] = true
		}
		return nil
	})
	require.NoError(t, err)
	for dir := range dirs {
		assert.True(t, rows[dir], "README's layout table has no row for %s", dir)
	}
	for row := range rows {
		if _, err := os.Stat(filepath.Join(root, row)); err != nil {
			assert.NoError(t, err, "README's layout table names %s", row)
		}
	}
}
