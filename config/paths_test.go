package config

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// The path of a setting is the one an operator writes, for fields, list
// items, map values, inline structs and what a pointer leads to.
func TestPathsOf(t *testing.T) {
	c := Default()
	c.Networks["mainnet"].Hosts = []string{"a.example", "b.example"}
	c.Networks["mainnet"].TLS = &TLS{}
	c.RateLimit.Redis.Sentinel = &RedisSentinel{Addrs: []string{"s:1"}}
	c.Teams[1].Upstream = map[string]*Credentials{"testnet": {}}
	ps := pathsOf(c)
	for want, field := range map[string]any{
		"server":                                    &c.Server,
		"server.admin_listen":                       &c.Server.AdminListen,
		"realtime.resume_window":                    &c.Realtime.ResumeWindow,
		"networks":                                  &c.Networks,
		"networks.mainnet":                          c.Networks["mainnet"],
		"networks.mainnet.hosts[1]":                 &c.Networks["mainnet"].Hosts[1],
		"networks.mainnet.tls":                      c.Networks["mainnet"].TLS,
		"networks.mainnet.tls.cert_file":            &c.Networks["mainnet"].TLS.CertFile,
		"networks.testnet.upstream.budget":          &c.Networks["testnet"].Upstream.Budget,
		"networks.testnet.upstream.budget.rps":      &c.Networks["testnet"].Upstream.Budget.RPS,
		"networks.testnet.upstream.api_key":         &c.Networks["testnet"].Upstream.APIKey,
		"networks.testnet.upstream.api_secret":      &c.Networks["testnet"].Upstream.APISecret,
		"ratelimit.redis.sentinel":                  &c.RateLimit.Redis.Sentinel,
		"ratelimit.redis.sentinel.addrs[0]":         &c.RateLimit.Redis.Sentinel.Addrs[0],
		"teams[1]":                                  &c.Teams[1],
		"teams[1].feeds[4]":                         &c.Teams[1].Feeds[4],
		"teams[1].keys[0].rate.burst":               &c.Teams[1].Keys[0].Rate.Burst,
		"teams[1].upstream.testnet":                 c.Teams[1].Upstream["testnet"],
		"teams[1].upstream.testnet.api_secret_file": &c.Teams[1].Upstream["testnet"].APISecretFile,
		"tracing":              &c.Tracing,
		"tracing.sample_ratio": &c.Tracing.SampleRatio,
	} {
		assert.Equal(t, want, ps.of(field))
	}
	other := Default()
	assert.Panics(t, func() { ps.of(&other.Server.AdminListen) }, "a field of another Config has no path here")
	assert.Panics(t, func() { ps.of(c.Server.AdminListen) }, "a value is not a setting")
}

// Every leaf key of the schema is in config.example.yaml, and every key
// there is in the schema: the example documents each key once, where an
// operator looks for it. Keys shown only commented out (optional blocks)
// are found in the comments.
func TestExampleHasEveryKey(t *testing.T) {
	raw, err := os.ReadFile("../config.example.yaml")
	require.NoError(t, err)
	var doc yaml.Node
	require.NoError(t, yaml.Unmarshal(raw, &doc))
	inFile := map[string]bool{}
	schemaOf(t, doc.Content[0], reflect.TypeFor[Config](), "", inFile)

	commented := commentedKeys(string(raw))
	for _, key := range schemaKeys() {
		if inFile[key] {
			continue
		}
		last := key[strings.LastIndexAny(key, ".]")+1:]
		assert.True(t, commented[last], "config.example.yaml does not show %s", key)
	}
}

// schemaOf records the schema path of every leaf key of n, read as type t,
// and fails the test for a key that is not in the schema.
func schemaOf(t *testing.T, n *yaml.Node, typ reflect.Type, path string, out map[string]bool) {
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	switch {
	case typ.Kind() == reflect.Struct && n.Kind == yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i].Value
			f, ok := fieldByKey(typ, k)
			if !assert.True(t, ok, "%s: no such key", joinKey(path, k)) {
				continue
			}
			schemaOf(t, n.Content[i+1], f.Type, joinKey(path, k), out)
		}
	case typ.Kind() == reflect.Map && n.Kind == yaml.MappingNode:
		for i := 1; i < len(n.Content); i += 2 {
			schemaOf(t, n.Content[i], typ.Elem(), joinKey(path, "*"), out)
		}
	case typ.Kind() == reflect.Slice && structType(typ.Elem()) && n.Kind == yaml.SequenceNode:
		for _, item := range n.Content {
			schemaOf(t, item, typ.Elem(), path+"[]", out)
		}
	default:
		out[path] = true
	}
}

// fieldByKey finds the field of struct type t whose YAML key is key,
// looking into inline fields.
func fieldByKey(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		switch k, ok := yamlKey(f); {
		case !ok:
		case k == key:
			return f, true
		case k == "":
			if g, ok := fieldByKey(f.Type, key); ok {
				return g, true
			}
		}
	}
	return reflect.StructField{}, false
}

// commentedKeys returns the keys written as "key:" in the comments of the
// example: those of its commented-out blocks.
func commentedKeys(text string) map[string]bool {
	out := map[string]bool{}
	for line := range strings.Lines(text) {
		_, comment, ok := strings.Cut(line, "#")
		if !ok {
			continue
		}
		for _, w := range strings.FieldsFunc(comment, func(r rune) bool { return r == ' ' || r == '{' || r == ',' || r == '-' }) {
			if k, ok := strings.CutSuffix(w, ":"); ok {
				out[k] = true
			}
		}
	}
	return out
}
