package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"gopkg.in/yaml.v3"
)

func TestSecretFormats(t *testing.T) {
	s := Secret("hunter2-hunter2-hunter2")
	assert.Equal(t, "hunter2-hunter2-hunter2", s.Reveal())

	tests := []struct {
		format string
		want   string
	}{
		{"%v", "REDACTED"},
		{"%+v", "REDACTED"},
		{"%#v", `config.Secret("REDACTED")`},
		{"%s", "REDACTED"},
		{"%q", `"REDACTED"`},
		{"%x", "REDACTED"},
		{"%X", "REDACTED"},
		{"%d", "REDACTED"},
		{"%10s", "REDACTED"},
		{"%T", "config.Secret"},
	}
	for _, tc := range tests {
		t.Run(tc.format, func(t *testing.T) {
			assert.Equal(t, tc.want, fmt.Sprintf(tc.format, s))
		})
	}
	assert.Equal(t, "REDACTED", s.String())
	assert.Equal(t, `config.Secret("REDACTED")`, s.GoString())

	// An empty secret shows as empty, so that "unset" stays visible.
	assert.Equal(t, "", Secret("").String())
	assert.Equal(t, `config.Secret("")`, fmt.Sprintf("%#v", Secret("")))
}

func TestSecretMarshalling(t *testing.T) {
	s := Secret("hunter2-hunter2-hunter2")
	j, err := json.Marshal(map[string]Secret{"a": s, "b": ""})
	require.NoError(t, err)
	assert.JSONEq(t, `{"a":"REDACTED","b":""}`, string(j))

	y, err := yaml.Marshal(map[string]Secret{"a": s})
	require.NoError(t, err)
	assert.Equal(t, "a: REDACTED\n", string(y))

	text, err := s.MarshalText()
	require.NoError(t, err)
	assert.Equal(t, "REDACTED", string(text))

	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, nil)).Info("m", "secret", s)
	assert.Contains(t, buf.String(), "secret=REDACTED")
	assert.NotContains(t, buf.String(), "hunter2")

	// Secrets are read from YAML as plain strings.
	var k Key
	require.NoError(t, yaml.Unmarshal([]byte("id: k\nsecret: hunter2-hunter2-hunter2\n"), &k))
	assert.Equal(t, s, k.Secret)
}

// secretConfig returns a parsed configuration with a secret in every place
// one can be, and those secrets.
func secretConfig(t *testing.T) (*Config, []string) {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "key"), []byte("file-key-secret-AAAAAAAAAAAAAAAA\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "api"), []byte("file-api-secret-BBBBBBBBBBBBBBBB\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "redis"), []byte("file-redis-password-CCCCCCCCCCCC\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "streamgate.yaml"), []byte(`
networks:
  mainnet:
    listen: ":8080"
    upstream:
      url: https://api.example.com
      api_key: org
      api_secret: ${ORG_SECRET}
  testnet:
    listen: ":8081"
    upstream:
      url: embedded
      api_key: sim
      api_secret_file: api
ratelimit:
  backend: redis
  redis: {password_file: redis}
teams:
  - name: trading
    networks: [mainnet, testnet]
    feeds: ["*"]
    upstream:
      mainnet: {api_key: trading, api_secret: team-upstream-secret-DDDDDDDD}
    keys:
      - id: k1
        secret: inline-key-secret-EEEEEEEEEEEEEEEE
      - id: k2
        secrets: [rotating-new-secret-FFFFFFFFFFFF, rotating-old-secret-GGGGGGGGGGGG]
      - id: k3
        secret_file: key
`), 0o600))
	t.Setenv("ORG_SECRET", "env-org-secret-HHHHHHHHHHHHHHHH")
	cfg, err := Load(filepath.Join(dir, "streamgate.yaml"))
	require.NoError(t, err)
	secrets := []string{
		"file-key-secret-AAAA", "file-api-secret-BBBB", "file-redis-password-CCCC", "team-upstream-secret-DDDD",
		"inline-key-secret-EEEE", "rotating-new-secret-FFFF", "rotating-old-secret-GGGG", "env-org-secret-HHHH",
	}
	// The secrets really are in the Config.
	assert.Equal(t, "file-key-secret-AAAAAAAAAAAAAAAA", cfg.Teams[0].Keys[2].Secrets()[0].Reveal())
	assert.Equal(t, "file-redis-password-CCCCCCCCCCCC", cfg.RateLimit.Redis.Password.Reveal())
	return cfg, secrets
}

func assertNoSecret(t *testing.T, what, out string, secrets []string) {
	t.Helper()
	for _, s := range secrets {
		assert.NotContains(t, out, s, what)
	}
	assert.Contains(t, out, "REDACTED", what)
}

func TestConfigNeverShowsASecret(t *testing.T) {
	cfg, secrets := secretConfig(t)
	team, key := cfg.Teams[0], cfg.Teams[0].Keys[0]
	net := cfg.Network("mainnet")

	for _, format := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%t", "%10.3v"} {
		assertNoSecret(t, format+" config", fmt.Sprintf(format, cfg), secrets)
		assertNoSecret(t, format+" *config", fmt.Sprintf(format, *cfg), secrets)
		assertNoSecret(t, format+" team", fmt.Sprintf(format, team), secrets)
		assertNoSecret(t, format+" key", fmt.Sprintf(format, key), secrets)
		assertNoSecret(t, format+" network", fmt.Sprintf(format, net), secrets)
		assertNoSecret(t, format+" upstream", fmt.Sprintf(format, net.Upstream), secrets)
		assertNoSecret(t, format+" redis", fmt.Sprintf(format, cfg.RateLimit), secrets)
		assertNoSecret(t, format+" team credentials", fmt.Sprintf(format, team.Upstream["mainnet"]), secrets)
	}

	j, err := json.Marshal(cfg)
	require.NoError(t, err)
	assertNoSecret(t, "json", string(j), secrets)
	var back map[string]any
	require.NoError(t, json.Unmarshal(j, &back), "the JSON is well formed")

	y, err := yaml.Marshal(cfg)
	require.NoError(t, err)
	assertNoSecret(t, "yaml", string(y), secrets)
	// Marshalled YAML reads back, and then fails on the redacted secrets
	// instead of running with them.
	_, err = Parse(y, fakeEnv(nil))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "teams[0].keys[1].secrets[0]: too short: 8 bytes")
	assertNoSecret(t, "problems", err.Error()+" REDACTED", secrets)
}

func TestZapNeverShowsASecret(t *testing.T) {
	cfg, secrets := secretConfig(t)
	var buf bytes.Buffer
	logger := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(&buf), zap.DebugLevel))

	team := &cfg.Teams[0]
	logger.Info("all",
		zap.Any("config", cfg),
		zap.Any("config_value", *cfg),
		zap.Object("team", team),
		zap.Object("key", &team.Keys[1]),
		zap.Object("network", cfg.Network("mainnet")),
		zap.Object("upstream", &cfg.Network("testnet").Upstream),
		zap.Object("credentials", team.Upstream["mainnet"]),
		zap.Object("redis", &cfg.RateLimit.Redis),
		zap.Any("secret", team.Keys[0].Secret),
		zap.Stringer("stringer", team.Keys[0].Secret),
		zap.Any("secrets", team.Keys[1].SecretList),
		zap.Any("team_value", *team),
	)
	require.NoError(t, logger.Sync())
	out := buf.String()
	assertNoSecret(t, "zap", out, secrets)

	var entry map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &entry), out)
	assert.Equal(t, "REDACTED", entry["secret"])
	assert.Equal(t, map[string]any{"id": "k2", "secrets": float64(2)}, entry["key"])
	assert.Equal(t, []any{"REDACTED", "REDACTED"}, entry["secrets"])
	teamLog, ok := entry["team"].(map[string]any)
	require.True(t, ok, out)
	assert.Equal(t, "trading", teamLog["name"])
	assert.Equal(t, "*", teamLog["feeds"])
	assert.Len(t, teamLog["keys"], 3)
	assert.Equal(t, "REDACTED", entry["redis"].(map[string]any)["password"])
	assert.Equal(t, "REDACTED", entry["credentials"].(map[string]any)["api_secret"])
}

func TestProblemsNeverShowASecret(t *testing.T) {
	// Mistakes that put a secret where it does not belong: the decoder
	// would quote part of the value.
	const secret = "misplaced-secret-IIIIIIIIIIIIIIII"
	_, err := Parse([]byte(`
networks:
  mainnet:
    listen: ":8080"
    upstream:
      timeout: ${SECRET}
      retries: misplaced-secret-IIIIIIIIIIIIIIII
      budget: short-s3cret
`), fakeEnv(map[string]string{"SECRET": secret}))
	require.Error(t, err)
	msg := err.Error()
	for _, part := range []string{secret, "misplac", "short-s"} {
		assert.NotContains(t, msg, part)
	}
	assert.Contains(t, msg, "line 6: cannot unmarshal !!str into time.Duration")
	assert.Contains(t, msg, "line 7: cannot unmarshal !!str into int")
	assert.Contains(t, msg, "line 8: cannot unmarshal !!str into config.Rate")
	assert.Equal(t, 2, strings.Count(msg, "\n"), msg)
}

func TestPointerFormats(t *testing.T) {
	n := &Network{Listen: ":8080", Upstream: Upstream{URL: "https://a.example", Credentials: Credentials{APIKey: "k", APISecret: "hunter2-hunter2-hunter2"}}}
	nets := map[string]*Network{"mainnet": n}
	creds := map[string]*Credentials{"mainnet": &n.Upstream.Credentials}
	tests := []struct {
		format string
		arg    any
		want   string
	}{
		{"%v", nets, "map[mainnet:&{:8080 [] <nil> [] {https://a.example {k REDACTED  {false <nil>}} 0s 0 {0 0} 0s 0  0 0 []} { []  [] {false <nil>}}}]"},
		{"%+v", n, "&{Listen::8080 Hosts:[] TLS:<nil> PassThrough:[] Upstream:{URL:https://a.example Credentials:{APIKey:k APISecret:REDACTED APISecretFile: file:{read:false err:<nil>}} Timeout:0s Retries:0 Budget:{RPS:0 Burst:0} BudgetMargin:0s MaxBulk:0 WSURL: WSMaxConnections:0 WSFeedsPerConnection:0 WSPinned:[]} Verify:{Mode: DONs:[] DONsFile: fileDONs:[] file:{read:false err:<nil>}}}"},
		{"%s", creds, "map[mainnet:&{k REDACTED  {%!s(bool=false) <nil>}}]"},
		{"%v", &n.Upstream, "&{https://a.example {k REDACTED  {false <nil>}} 0s 0 {0 0} 0s 0  0 0 []}"},
		{"%v", (*Network)(nil), "<nil>"},
		{"%s", map[string]*Credentials{"x": nil}, "map[x:<nil>]"},
	}
	for _, tc := range tests {
		t.Run(tc.format, func(t *testing.T) {
			assert.Equal(t, tc.want, fmt.Sprintf(tc.format, tc.arg))
		})
	}
	gs := fmt.Sprintf("%#v", nets)
	assert.True(t, strings.HasPrefix(gs, `map[string]*config.Network{"mainnet":&config.Network{Listen:":8080"`), gs)
	assert.Contains(t, gs, `APISecret:config.Secret("REDACTED")`)
	assert.NotContains(t, gs, "hunter2")
}
