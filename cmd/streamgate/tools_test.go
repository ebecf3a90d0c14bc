package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/config"
	"streamgate/don"
)

// runTool runs the binary to completion with args and extra environment.
func runTool(t testing.TB, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("running streamgate %v: %v", args, err)
	}
	return out.String(), errOut.String(), code
}

func writeFile(t testing.TB, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
	return path
}

func TestCheck(t *testing.T) {
	t.Parallel()
	bad := writeFile(t, "bad.yaml", invalidConfig)
	good := writeFile(t, "good.yaml", testConfig{}.String())
	cases := []struct {
		name     string
		args     []string
		code     int
		stdout   []string
		stderr   []string
		noStderr []string
	}{
		{name: "a good file", args: []string{"check", "-config", good}, code: 0,
			stdout: []string{"ok (2 networks, 2 teams)", "networks.mainnet: reports verified, mode enforce, against the embedded simulator's DON"}},
		{name: "every problem of a bad file at once", args: []string{"check", "-config", bad}, code: 1,
			stderr: []string{
				"line 2: cannot unmarshal", // shutdown_timeout: soon
				"teams[0].name:",           // spaces
				`teams[0].networks[0]: no network named "nowhere"`,
				"teams[0].keys[0].secret: too short",
			},
			noStderr: []string{"tooShort42"}},
		{name: "a missing file", args: []string{"check", "-config", filepath.Join(t.TempDir(), "none.yaml")}, code: 1,
			stderr: []string{"no such file"}},
		{name: "a good file given as FILE", args: []string{"check", good}, code: 0,
			stdout: []string{good + ": ok (2 networks, 2 teams)"}},
		{name: "a bad file given as FILE", args: []string{"check", bad}, code: 1,
			stderr: []string{`teams[0].networks[0]: no network named "nowhere"`}, noStderr: []string{"tooShort42"}},
		{name: "no file", args: []string{"check"}, code: 2, stderr: []string{"streamgate check FILE"}},
		{name: "two files", args: []string{"check", good, bad}, code: 2, stderr: []string{"one configuration file is needed"}},
		{name: "serve refuses a bad file", args: []string{"-config", bad}, code: 1,
			stderr: []string{`no network named "nowhere"`}, noStderr: []string{"tooShort42"}},
		{name: "-watch needs a file", args: []string{"-watch"}, code: 2, stderr: []string{"-watch needs -config"}},
		{name: "unknown command", args: []string{"frobnicate"}, code: 2, stderr: []string{"unknown command"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			stdout, stderr, code := runTool(t, nil, c.args...)
			assert.Equal(t, c.code, code, "exit status; stderr:\n%s", stderr)
			for _, s := range c.stdout {
				assert.Contains(t, stdout, s)
			}
			for _, s := range c.stderr {
				assert.Contains(t, stderr, s)
			}
			for _, s := range c.noStderr {
				assert.NotContains(t, stderr, s)
			}
		})
	}
}

// A team's stream IDs are read by the one parser for check and serve
// alike: one in upper case is accepted, one that is not a stream ID is
// refused by both, named by its key path.
func TestTeamFeedsCheckAndServeAgree(t *testing.T) {
	t.Parallel()
	const id = "0x000359843a543ee2fe414dc14c7e7920ef10f4372990b79d6361cdc0dd1ba782"
	team := func(feeds string) string {
		return "  - name: research\n    networks: [mainnet]\n    feeds: " + feeds +
			"\n    keys: [{id: research-key, secret: research-secret-0123}]\n"
	}
	upper := writeFile(t, "upper.yaml", testConfig{extra: team(`["0X` + strings.ToUpper(id[2:]) + `"]`)}.String())
	stdout, stderr, code := runTool(t, nil, "check", upper)
	require.Equal(t, 0, code, "exit status; stderr:\n%s", stderr)
	assert.Contains(t, stdout, "ok (2 networks, 3 teams)")

	short := id[:len(id)-1]
	bad := writeFile(t, "bad.yaml", testConfig{extra: team(`["` + id + `", "` + short + `"]`)}.String())
	want := `teams[2].feeds[1]: "` + short + `" is not a stream ID (0x and 64 hex digits)`
	for _, args := range [][]string{{"check", bad}, {"-config", bad}} {
		_, stderr, code := runTool(t, nil, args...)
		assert.Equal(t, 1, code, "%v: exit status; stderr:\n%s", args, stderr)
		assert.Contains(t, stderr, want, "%v", args)
	}
}

// TestKeygen checks the shape of a new key and that a configuration
// accepts it.
func TestKeygen(t *testing.T) {
	t.Parallel()
	re := regexp.MustCompile(`^id: ([0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12})\nsecret: ([0-9a-f]{64})\n$`)
	first, _, code := runTool(t, nil, "keygen")
	require.Equal(t, 0, code)
	m := re.FindStringSubmatch(first)
	require.NotNil(t, m, "keygen printed %q", first)
	second, _, _ := runTool(t, nil, "keygen")
	assert.NotEqual(t, first, second, "two keys alike")

	cfg := testConfig{extra: fmt.Sprintf("  - name: new\n    networks: [mainnet]\n    feeds: [\"*\"]\n    keys: [{id: %s, secret: %s}]\n", m[1], m[2])}
	stdout, stderr, code := runTool(t, nil, "check", "-config", writeFile(t, "c.yaml", cfg.String()))
	assert.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "3 teams")
}

// TestGet calls the running binary with "streamgate get".
func TestGet(t *testing.T) {
	p := start(t, testConfig{}.String(), []string{"mainnet", "testnet"})
	base := p.net["mainnet"]
	feed := feedIDs(t, base, 1)[0]
	env := []string{"STREAMGATE_KEY=" + config.DemoKeyID, "STREAMGATE_SECRET=" + config.DemoKeySecret, "STREAMGATE_URL=" + base}

	stdout, stderr, code := runTool(t, env, "get", "/api/v1/reports/latest?feedID="+feed)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stderr, "HTTP/1.1 200 OK")
	assert.Regexp(t, `(?m)^X-Cache: (MISS|HIT|COALESCED)$`, stderr)
	assert.True(t, strings.HasPrefix(stdout, "{\n  \"report\": {\n    \"feedID\": \""+feed), "pretty JSON:\n%s", stdout)
	var doc struct {
		Report struct{ FeedID string } `json:"report"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &doc))
	assert.Equal(t, feed, doc.Report.FeedID)

	// -decode prints the decoded fields and the verification.
	stdout, stderr, code = runTool(t, env, "get", "-decode", "/api/v1/reports/latest?feedID="+feed)
	require.Equal(t, 0, code, stderr)
	assert.True(t, strings.HasPrefix(stdout, "report "+feed+"\n"), stdout)
	assert.Regexp(t, `(?m)^  verification +verified: 2 signers of config digest 0x0009[0-9a-f]{60} \(mode enforce\)$`, stdout)
	assert.Regexp(t, `(?m)^  schema +V3$`, stdout)
	assert.Regexp(t, `(?m)^  price +[0-9]+ +[0-9]+\.[0-9]{18}$`, stdout)
	for _, field := range []string{"feedId", "validFromTimestamp", "observationsTimestamp", "nativeFee", "linkFee", "expiresAt", "bid", "ask"} {
		assert.Regexp(t, `(?m)^  `+field+` +[0-9x]`, stdout)
	}

	stdout, stderr, code = runTool(t, nil, "get", "-anonymous", "-url", p.net["testnet"], "api/v1/discovery")
	assert.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "\n  \"feeds\": [\n")

	// A refusal is printed and exits 1.
	_, stderr, code = runTool(t, []string{"STREAMGATE_SECRET=wrong-secret-0123456789"}, "get", "-url", base, "-key", config.DemoKeyID, "/api/v1/feeds")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "401 Unauthorized")
	// No credentials at all: a usage error before any request.
	_, stderr, code = runTool(t, []string{"STREAMGATE_KEY=", "STREAMGATE_SECRET="}, "get", "-url", base, "/api/v1/feeds")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "a key and a secret are needed")
}

// TestGetDecodeEverySchema: `streamgate get -decode` of a live stream of
// each schema prints every field of its schema, the scaled ones with their
// decimals, the market status and ripcord by name, and "verified".
func TestGetDecodeEverySchema(t *testing.T) {
	p := start(t, testConfig{}.String(), []string{"mainnet"})
	base := p.net["mainnet"]
	env := []string{"STREAMGATE_KEY=" + config.DemoKeyID, "STREAMGATE_SECRET=" + config.DemoKeySecret, "STREAMGATE_URL=" + base}
	code, body := mustGet(t, nil, base+"/api/v1/discovery")
	require.Equal(t, http.StatusOK, code, string(body))
	var doc struct {
		Feeds []struct {
			FeedID, Status, SchemaVersion string
		} `json:"feeds"`
	}
	require.NoError(t, json.Unmarshal(body, &doc))
	bySchema := map[string]string{}
	for _, f := range doc.Feeds {
		if f.Status == "live" && bySchema[f.SchemaVersion] == "" {
			bySchema[f.SchemaVersion] = f.FeedID
		}
	}
	require.Len(t, bySchema, len(don.Schemas), "a live stream of every schema: %v", bySchema)
	for _, s := range don.Schemas {
		feed := bySchema[s.String()]
		stdout, stderr, code := runTool(t, env, "get", "-decode", "/api/v1/reports/latest?feedID="+feed)
		require.Equal(t, 0, code, stderr)
		assert.True(t, strings.HasPrefix(stdout, "report "+feed+"\n"), stdout)
		assert.Regexp(t, `(?m)^  verification +verified: 2 signers of config digest 0x0009[0-9a-f]{60} \(mode enforce\)$`, stdout, s)
		assert.Regexp(t, `(?m)^  schema +`+s.String()+`$`, stdout)
		for _, name := range don.FieldNames(s) {
			assert.Regexp(t, `(?m)^  `+name+` +\S`, stdout, "%s: %s", s, name)
			switch name {
			case "marketStatus":
				assert.Regexp(t, `(?m)^  marketStatusName +(open|closed|unknown|pre-market|regular|post-market|overnight)$`, stdout, s)
			case "ripcord":
				assert.Regexp(t, `(?m)^  ripcordName +(normal|paused)$`, stdout, s)
			}
		}
		scaled := map[don.Schema]string{
			don.SchemaV1: "price", don.SchemaV2: "price", don.SchemaV3: "price", don.SchemaV4: "price",
			don.SchemaV5: "rate", don.SchemaV6: "price5", don.SchemaV7: "exchangeRate", don.SchemaV8: "midPrice",
			don.SchemaV9: "aum", don.SchemaV10: "tokenizedPrice", don.SchemaV11: "mid", don.SchemaV12: "nextNavPerShare",
			don.SchemaV13: "bestBid", don.SchemaV14: "goldmanRollPrice",
		}[s]
		assert.Regexp(t, `(?m)^  `+scaled+` +-?[0-9]+ +-?[0-9]+\.[0-9]{18}$`, stdout, "%s: %s with its decimals", s, scaled)
		t.Logf("%s", stdout)
	}
}

// TestCheckRedactsRedisPasswords: Redis addresses written as URLs with a
// password (or USER:PASSWORD@HOST:PORT, or PASSWORD@HOST:PORT) where
// HOST:PORT is wanted, in cluster.addrs and sentinel.addrs, are refused
// by check, which names them with the password redacted.
func TestCheckRedactsRedisPasswords(t *testing.T) {
	extra := `ratelimit:
  backend: redis
  redis:
    cluster: {addrs: ["redis://:Hunter2one@h:1", "user:Hunter2two@h:2", "Hunter2three@h:3"]}
cache:
  shared:
    backend: redis
    sentinel: {master: m, addrs: ["rediss://u:Hunter2four@h:1", "redis://:Hunter2five@h:2/0"]}
`
	stdout, stderr, code := runTool(t, nil, "check", "-config", writeFile(t, "redis.yaml", testConfig{}.String()+extra))
	assert.Equal(t, 1, code, stderr)
	for _, field := range []string{"ratelimit.redis.cluster.addrs[0]", "ratelimit.redis.cluster.addrs[1]", "ratelimit.redis.cluster.addrs[2]",
		"cache.shared.sentinel.addrs[0]", "cache.shared.sentinel.addrs[1]"} {
		assert.Contains(t, stderr, field+": ", "every address is refused")
	}
	assert.Contains(t, stderr, `"redis://:xxxxx@h:1" is not HOST:PORT`, "the address is named, redacted")
	assert.NotContains(t, stdout+stderr, "Hunter2", "check prints a password")
}

// TestGetBoundsTheAnswer: `get` does not trust the server with its
// memory or its terminal. Over a real listener: a megabyte of '[' (the
// decoded media type, with -decode, and plain JSON without) is refused
// unprinted, and made get allocate a few megabytes, not the hundreds
// json.Indent takes to fail on it; an answer longer than -max-body is
// refused unprinted; a valid answer of many values nested deep is printed
// as it came rather than indented to 60 times its size; an ordinary
// answer is still pretty-printed.
func TestGetBoundsTheAnswer(t *testing.T) {
	deep := bytes.Repeat([]byte("["), 1<<20)
	var wide bytes.Buffer // 60 levels, then 300k values
	wide.WriteString(strings.Repeat("[", 60))
	wide.WriteString(strings.Repeat("1,", 300_000))
	wide.WriteString("1" + strings.Repeat("]", 60))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/deep":
			w.Header().Set("Content-Type", r.Header.Get("Accept"))
			_, _ = w.Write(deep)
		case "/wide":
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(wide.Bytes())
		default:
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"a":[{"b":{"c":[1,2]}}],"secret-looking":"x"}`))
		}
	}))
	defer srv.Close()
	run := func(args ...string) (stdout, stderr string, err error, alloc uint64) {
		var out, errOut bytes.Buffer
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		before := m.TotalAlloc
		err = get(t.Context(), append([]string{"-anonymous", "-url", srv.URL}, args...), &out, &errOut)
		runtime.ReadMemStats(&m)
		return out.String(), errOut.String(), err, m.TotalAlloc - before
	}

	for _, args := range [][]string{{"-decode", "/deep"}, {"/deep"}} {
		stdout, stderr, err, alloc := run(args...)
		assert.Equal(t, usageError{code: 1}, err, "%v: %s", args, stderr)
		assert.Contains(t, stderr, "nests JSON deeper than 64 levels: not printed", args)
		assert.Empty(t, stdout, "%v: the body is printed", args)
		assert.Less(t, alloc, uint64(16<<20), "%v: bytes allocated", args)
	}

	stdout, stderr, err, _ := run("-max-body", "1000", "/wide")
	assert.Equal(t, usageError{code: 1}, err, stderr)
	assert.Contains(t, stderr, "the answer is longer than 1000 bytes (-max-body): not printed")
	assert.Empty(t, stdout)

	stdout, stderr, err, _ = run("/wide")
	require.NoError(t, err, stderr)
	assert.Equal(t, wide.String()+"\n", stdout, "printed as it came")

	stdout, stderr, err, _ = run("/plain")
	require.NoError(t, err, stderr)
	assert.Equal(t, "{\n  \"a\": [\n    {\n      \"b\": {\n        \"c\": [\n          1,\n          2\n        ]\n      }\n    }\n  ],\n  \"secret-looking\": \"x\"\n}\n", stdout)
}
