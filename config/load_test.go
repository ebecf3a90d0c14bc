package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const examplePath = "../config.example.yaml"

// exampleEnv provides every variable config.example.yaml refers to.
var exampleEnv = map[string]string{
	"STREAMS_MAINNET_API_KEY":    "org-mainnet-key",
	"STREAMS_MAINNET_API_SECRET": "org-mainnet-secret-value",
	"TRADING_STREAMS_API_KEY":    "trading-upstream-key",
	"TRADING_STREAMS_API_SECRET": "trading-upstream-secret-value",
	"TRADING_KEY_SECRET":         "trading-client-secret-0123456789",
	"RESEARCH_KEY_SECRET_NEW":    "research-new-secret-0123456789",
	"RESEARCH_KEY_SECRET_OLD":    "research-old-secret-0123456789",
}

func parseExample(t *testing.T) *Config {
	t.Helper()
	data, err := os.ReadFile(examplePath)
	require.NoError(t, err)
	cfg, err := Parse(data, fakeEnv(exampleEnv))
	require.NoError(t, err)
	return cfg
}

func TestExampleLoads(t *testing.T) {
	cfg := parseExample(t)

	assert.Equal(t, []string{"mainnet", "testnet"}, cfg.NetworkNames())
	main := cfg.Network("mainnet")
	require.NotNil(t, main)
	assert.Equal(t, ":8080", main.Listen)
	assert.True(t, main.Upstream.Embedded())
	assert.Equal(t, "org-mainnet-key", main.Upstream.APIKey)
	assert.Equal(t, "org-mainnet-secret-value", main.Upstream.Secret().Reveal())
	assert.Equal(t, ":8081", cfg.Network("testnet").Listen)
	assert.Nil(t, cfg.Network("devnet"))

	require.Len(t, cfg.Teams, 2)
	trading := cfg.Team("trading")
	require.NotNil(t, trading)
	assert.True(t, trading.AllFeeds())
	assert.True(t, trading.HasNetwork("testnet"))
	assert.Equal(t, Rate{RPS: 50, Burst: 100}, trading.Rate)
	require.Contains(t, trading.Upstream, "mainnet")
	assert.Equal(t, "trading-upstream-key", trading.Upstream["mainnet"].APIKey)
	assert.Equal(t, "trading-upstream-secret-value", trading.Upstream["mainnet"].Secret().Reveal())
	require.Len(t, trading.Keys, 1)
	assert.Equal(t, "2f6a3c7e-5b1d-4e8a-9c0f-1a2b3c4d5e6f", trading.Keys[0].ID)
	assert.Equal(t, []Secret{"trading-client-secret-0123456789"}, trading.Keys[0].Secrets())
	assert.Equal(t, Rate{RPS: 10, Burst: 20}, trading.Keys[0].Rate)

	research := cfg.Team("research")
	require.NotNil(t, research)
	assert.False(t, research.AllFeeds())
	assert.False(t, research.HasNetwork("mainnet"))
	assert.Equal(t, StreamIDs{"0x000359843a543ee2fe414dc14c7e7920ef10f4372990b79d6361cdc0dd1ba782"}, research.Feeds)
	assert.Equal(t, int64(10000), research.DailyQuota)
	assert.Equal(t, []Secret{"research-new-secret-0123456789", "research-old-secret-0123456789"}, research.Keys[0].Secrets())
	assert.Equal(t, Rate{}, research.Keys[0].Rate)
	assert.Nil(t, cfg.Team("nobody"))
}

func TestExampleNeedsItsVariables(t *testing.T) {
	data, err := os.ReadFile(examplePath)
	require.NoError(t, err)
	_, err = Parse(data, fakeEnv(nil))
	var ps Problems
	require.ErrorAs(t, err, &ps)
	var got []string
	for _, p := range ps {
		got = append(got, p.Msg)
	}
	for name := range exampleEnv {
		assert.Contains(t, got, "environment variable "+name+" is not set")
	}
	assert.Len(t, got, len(exampleEnv), "one problem per variable, nothing that merely repeats it:\n%v", err)
}

// minimal is the smallest valid file: every other key takes its default.
const minimal = `networks:
  mainnet:
    listen: ":8080"
`

// TestDefaults pins the default of every key to the value documented in
// config.example.yaml.
func TestDefaults(t *testing.T) {
	cfg, err := Parse([]byte(minimal), fakeEnv(nil))
	require.NoError(t, err)

	want := &Config{
		Server: Server{
			AdminListen:       "127.0.0.1:9090",
			ShutdownTimeout:   15 * time.Second,
			ReadHeaderTimeout: 10 * time.Second,
			IdleTimeout:       120 * time.Second,
			ReadTimeout:       30 * time.Second,
			WriteTimeout:      60 * time.Second,
			AdminToken:        "", // no token by default
			AdminTokenFile:    "",
		},
		Log: Log{Level: "info", Format: "json", Audit: false},
		Networks: map[string]*Network{
			"mainnet": {
				Listen: ":8080",
				Upstream: Upstream{
					URL:     "embedded",
					Timeout: 5 * time.Second,
					Retries: 2,
					Budget:  Rate{RPS: 10, Burst: 10}, BudgetMargin: 20 * time.Millisecond,
					MaxBulk: 100,

					WSMaxConnections: 6, WSFeedsPerConnection: 50,
				},
			},
		},
		Auth: Auth{MaxSkew: 5 * time.Second, ReplayProtection: true, ReplayGrace: time.Second, AnonymousCatalog: true,
			AnonymousRate: Rate{RPS: 20, Burst: 40}, ReplayMaxEntries: 1000000},
		Cache: Cache{MaxBytes: 256 << 20, CatalogTTL: 300 * time.Second, LatestTTL: 500 * time.Millisecond, NegativeTTL: time.Second,
			LatestMaxStale: 3 * time.Second, LatestMaxWait: time.Second, LatestBulkRefresh: true,
			Shared: SharedCache{Backend: "off", TTL: 24 * time.Hour, MaxEntryBytes: 1 << 20, Lease: 2 * time.Second}},
		RateLimit: RateLimit{
			Backend: "memory",
			Redis:   Redis{URL: "redis://127.0.0.1:6379/0", FailMode: "open"},
		},
		Realtime: Realtime{ClientQueue: 256, PingInterval: 15 * time.Second, TeamConnections: 100, Grace: 30 * time.Second, LatestFromStream: true,
			Share: true, ShareLease: 3 * time.Second,
			ClientOrigins: []string{"001", "002"}, DrainDelay: 5 * time.Second, ResumeWindow: 60 * time.Second, ResumeRecordsPerTeam: 200, ResumeRecords: 5000, BackfillMax: 2 * time.Minute, SinceMax: 15 * time.Minute},
		Tracing: Tracing{Protocol: "http/protobuf", SampleRatio: 0.01},
		Archive: Archive{Retention: 720 * time.Hour, ReadTimeout: 250 * time.Millisecond, Queue: 65536},
		Sharing: "organisation",
	}
	want.src = cfg.src
	assert.Equal(t, want, cfg)
}

// TestExampleDocumentsTheDefaults checks that the values written in
// config.example.yaml for the sections it leaves at their defaults are the
// defaults an almost empty file gets.
func TestExampleDocumentsTheDefaults(t *testing.T) {
	example := parseExample(t)
	defaults, err := Parse([]byte(minimal), fakeEnv(nil))
	require.NoError(t, err)

	assert.Equal(t, defaults.Server, example.Server)
	assert.Equal(t, defaults.Log, example.Log)
	assert.Equal(t, defaults.Auth, example.Auth)
	assert.Equal(t, defaults.Cache, example.Cache)
	assert.Equal(t, defaults.RateLimit, example.RateLimit)
	assert.Equal(t, defaults.Realtime, example.Realtime)
	assert.Equal(t, defaults.Tracing, example.Tracing)

	// The example's mainnet spells every upstream key out; its testnet
	// gives only the url.
	want := defaults.Network("mainnet").Upstream
	for _, name := range []string{"mainnet", "testnet"} {
		got := example.Network(name).Upstream
		got.Credentials = Credentials{}
		if len(got.WSPinned) == 0 {
			got.WSPinned = nil // "ws_pinned: []" spells the default out
		}
		assert.Equal(t, want, got, name)
	}
	assert.Empty(t, example.Network("mainnet").Hosts)
}

func TestExampleKeysAreAllDocumented(t *testing.T) {
	// Every key of the schema, read from the structs' yaml tags, appears in
	// the example, so that it documents each one, new keys included.
	data, err := os.ReadFile(examplePath)
	require.NoError(t, err)
	text := string(data)
	keys := map[string]bool{}
	var walk func(reflect.Type)
	walk = func(typ reflect.Type) {
		for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice || typ.Kind() == reflect.Map {
			typ = typ.Elem()
		}
		if typ.Kind() != reflect.Struct {
			return
		}
		for i := range typ.NumField() {
			f := typ.Field(i)
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name != "" && name != "-" {
				keys[name+":"] = true
			}
			walk(f.Type)
		}
	}
	walk(reflect.TypeOf(Config{}))
	require.Greater(t, len(keys), 50, "the walk found the schema")
	for key := range keys {
		assert.True(t, strings.Contains(text, key), "config.example.yaml does not document %s", key)
	}
}

func TestParseKeepsExplicitValues(t *testing.T) {
	// Presence, not the zero value, decides whether a default applies.
	cfg, err := Parse([]byte(`
server: {admin_listen: ""}
log: {audit: true}
networks:
  mainnet:
    listen: "127.0.0.1:0"
    upstream: {retries: 0, budget: {rps: 2.5}}
auth: {replay_protection: false, anonymous_catalog: false}
teams:
  - name: t
    networks: [mainnet]
    feeds: ["*"]
    rate: {rps: 0.5}
    keys:
      - id: k
        secret: "0123456789abcdef"
        rate: {rps: 3, burst: 7}
`), fakeEnv(nil))
	require.NoError(t, err)
	assert.Equal(t, "", cfg.Server.AdminListen)
	assert.True(t, cfg.Log.Audit)
	up := cfg.Network("mainnet").Upstream
	assert.Equal(t, 0, up.Retries)
	assert.Equal(t, Rate{RPS: 2.5, Burst: 3}, up.Budget, "burst defaults to rps rounded up")
	assert.False(t, cfg.Auth.ReplayProtection)
	assert.False(t, cfg.Auth.AnonymousCatalog)
	assert.Equal(t, Rate{RPS: 0.5, Burst: 1}, cfg.Teams[0].Rate)
	assert.Equal(t, Rate{RPS: 3, Burst: 7}, cfg.Teams[0].Keys[0].Rate)
	assert.False(t, cfg.Teams[0].Rate.Unlimited())
	assert.True(t, Rate{}.Unlimited())
}

func TestParseNormalizesCase(t *testing.T) {
	cfg, err := Parse([]byte(`
networks:
  mainnet: {listen: ":8080", hosts: [Main.Example.COM]}
  testnet: {listen: ":8080", hosts: [test.example.com]}
teams:
  - name: t
    networks: [mainnet]
    feeds: ["0x000359843A543EE2FE414DC14C7E7920EF10F4372990B79D6361CDC0DD1BA782"]
    keys: [{id: k, secret: "0123456789abcdef"}]
`), fakeEnv(nil))
	require.NoError(t, err)
	assert.Equal(t, []string{"main.example.com"}, cfg.Network("mainnet").Hosts)
	assert.Equal(t, StreamIDs{"0x000359843a543ee2fe414dc14c7e7920ef10f4372990b79d6361cdc0dd1ba782"}, cfg.Teams[0].Feeds)
}

func TestParseDurations(t *testing.T) {
	tests := []struct {
		name    string
		value   string
		want    time.Duration
		wantErr string
	}{
		{"milliseconds", "500ms", 500 * time.Millisecond, ""},
		{"seconds over a minute", "300s", 5 * time.Minute, ""},
		{"mixed units", "1m30s", 90 * time.Second, ""},
		{"quoted", `"2s"`, 2 * time.Second, ""},
		{"plain number is refused, not taken as nanoseconds", "5", 0, "line 1: cannot unmarshal !!int into time.Duration"},
		{"unknown unit", "5sec", 0, "line 1: cannot unmarshal !!str into time.Duration"},
		{"zero", "0s", 0, "cache.latest_ttl: must be positive (line 1)"},
		{"negative", "-1s", 0, "cache.latest_ttl: must be positive (line 1)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse([]byte("cache: {latest_ttl: "+tc.value+"}\n"+minimal), fakeEnv(nil))
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Equal(t, tc.wantErr, err.Error())
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, cfg.Cache.LatestTTL)
		})
	}
}

func TestParseTextProblems(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"unknown top-level key", minimal + "serverr: {}\n", "line 4: field serverr not found in type config.Config"},
		{"unknown nested key", minimal + "    upstream: {tmeout: 5s}\n", "line 4: field tmeout not found in type config.Upstream"},
		{"unknown key of a key", minimal + "teams: [{name: t, networks: [mainnet], feeds: ['*'], keys: [{id: k, secret: '0123456789abcdef', secert: x}]}]\n", "line 4: field secert not found in type config.Key"},
		{"syntax error", "networks: [\n", "yaml: line 1: did not find expected node content"},
		{"two documents", minimal + "---\nlog: {}\n", "more than one YAML document"},
		{"document is a list", "- a\n", "line 1: cannot unmarshal !!seq into config.Config"},
		{"empty file", "", "networks: none configured: at least one network is required"},
		{"duplicate key", minimal + "log: {}\nlog: {}\n", "line 5: mapping key \"log\" already defined at line 4"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.in), fakeEnv(nil))
			require.Error(t, err)
			assert.Contains(t, strings.Split(err.Error(), "\n"), tc.want, "all problems:\n%v", err)
		})
	}
}

func TestParseAliasesCountAsPresent(t *testing.T) {
	cfg, err := Parse([]byte(`
networks:
  mainnet:
    listen: ":8080"
    upstream:
      budget: &slow {rps: 1, burst: 5}
  testnet:
    listen: ":8081"
    upstream:
      budget: *slow
      <<: {retries: 0}
`), fakeEnv(nil))
	require.NoError(t, err)
	assert.Equal(t, Rate{RPS: 1, Burst: 5}, cfg.Network("testnet").Upstream.Budget)
	assert.Equal(t, 0, cfg.Network("testnet").Upstream.Retries, "a merged key is present")
	assert.Equal(t, 2, cfg.Network("mainnet").Upstream.Retries)
}

func TestSecretFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600))
	}
	write("key", "0123456789abcdef-from-file\r\n\n")
	write("api", "upstream-secret\n")
	write("redis", "redis-pass\n")
	write("empty", "\n")
	write("short", "short\n")
	write("streamgate.yaml", `
networks:
  mainnet:
    listen: ":8080"
    upstream:
      url: https://api.example.com
      api_key: org
      api_secret_file: api
ratelimit:
  redis: {password_file: redis}
teams:
  - name: t
    networks: [mainnet]
    feeds: ["*"]
    keys: [{id: k, secret_file: key}]
`)

	t.Run("read relative to the file, line breaks trimmed", func(t *testing.T) {
		cfg, err := Load(filepath.Join(dir, "streamgate.yaml"))
		require.NoError(t, err)
		assert.Equal(t, []Secret{"0123456789abcdef-from-file"}, cfg.Teams[0].Keys[0].Secrets())
		assert.Equal(t, "upstream-secret", cfg.Network("mainnet").Upstream.Secret().Reveal())
		assert.Equal(t, "redis-pass", cfg.RateLimit.Redis.Password.Reveal())
		assert.NoError(t, cfg.Validate(), "validating again reads nothing new and finds nothing")
	})

	t.Run("absolute path with Parse", func(t *testing.T) {
		cfg, err := Parse([]byte(minimal+`teams: [{name: t, networks: [mainnet], feeds: ["*"], keys: [{id: k, secret_file: `+filepath.Join(dir, "key")+`}]}]`+"\n"), fakeEnv(nil))
		require.NoError(t, err)
		assert.Equal(t, []Secret{"0123456789abcdef-from-file"}, cfg.Teams[0].Keys[0].Secrets())
	})

	t.Run("problems", func(t *testing.T) {
		write("bad.yaml", `
networks:
  mainnet:
    listen: ":8080"
    upstream:
      url: https://api.example.com
      api_key: org
      api_secret_file: missing
teams:
  - name: t
    networks: [mainnet]
    feeds: ["*"]
    keys:
      - {id: a, secret_file: empty}
      - {id: b, secret_file: short}
      - {id: c, secret_file: nowhere}
`)
		_, err := Load(filepath.Join(dir, "bad.yaml"))
		var ps Problems
		require.ErrorAs(t, err, &ps)
		assert.True(t, strings.HasPrefix(err.Error(), "config "+filepath.Join(dir, "bad.yaml")+":\n"), err.Error())
		require.Len(t, ps, 4, err.Error())
		assert.Equal(t, "networks.mainnet.upstream.api_secret_file", ps[0].Path)
		assert.Contains(t, ps[0].Msg, "no such file")
		assert.Equal(t, Problem{Path: "teams[0].keys[0].secret_file", Line: 14, Msg: "the file is empty"}, ps[1])
		assert.Equal(t, Problem{Path: "teams[0].keys[1].secret_file", Line: 15, Msg: "too short: 5 bytes, at least 16 are required"}, ps[2])
		assert.Equal(t, "teams[0].keys[2].secret_file", ps[3].Path)
		assert.Contains(t, ps[3].Msg, "no such file")
	})
}

// TestLoadReadsSecretFilesOnce loads a configuration with every kind of
// secret file, then validates it twice: Validate finds nothing, reads
// nothing (the files are gone by then) and changes nothing.
func TestLoadReadsSecretFilesOnce(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{"key": okKey + "-key\n", "api": "api-secret\n", "team": "team-secret\n", "redis": "redis-pass\n"}
	for name, content := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600))
	}
	path := filepath.Join(dir, "streamgate.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`
networks:
  mainnet:
    listen: ":8080"
    upstream: {url: https://api.example.com, api_key: org, api_secret_file: api}
ratelimit:
  redis: {password_file: redis}
teams:
  - name: t
    networks: [mainnet]
    feeds: ["*"]
    upstream:
      mainnet: {api_key: team, api_secret_file: team}
    keys: [{id: k, secret_file: key}]
`), 0o600))
	cfg, err := Load(path)
	require.NoError(t, err)
	want, err := Load(path)
	require.NoError(t, err)
	for name := range files {
		require.NoError(t, os.Remove(filepath.Join(dir, name)))
	}

	require.NoError(t, cfg.Validate())
	require.NoError(t, cfg.Validate())
	assert.Equal(t, want, cfg)
	assert.Equal(t, "api-secret", cfg.Network("mainnet").Upstream.Secret().Reveal())
	assert.Equal(t, "team-secret", cfg.Teams[0].Upstream["mainnet"].Secret().Reveal())
	assert.Equal(t, "redis-pass", cfg.RateLimit.Redis.Password.Reveal())
	assert.Equal(t, []Secret{okKey + "-key"}, cfg.Teams[0].Keys[0].Secrets())
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"))
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestParseReportsProblemsOfEveryStageInLineOrder(t *testing.T) {
	_, err := Parse([]byte(`networks:
  mainnet:
    listen: ":8080"
    upstream: {retries: many}
  devnet:
    listen: ":8082"
log: {level: loud, colour: true}
teams:
  - name: t
    networks: [mainnet]
    feeds: ["*"]
    keys: [{id: k, secret: "${UNSET}"}]
`), fakeEnv(nil))
	var ps Problems
	require.ErrorAs(t, err, &ps)
	assert.Equal(t, Problems{
		{Line: 4, Msg: "cannot unmarshal !!str into int"},
		{Path: "networks.devnet.upstream.url", Line: 5, Msg: `required for a network other than mainnet and testnet: "embedded" or the upstream's http(s) URL`},
		{Line: 7, Msg: "field colour not found in type config.Log"},
		{Line: 12, Msg: "environment variable UNSET is not set"},
	}, ps, "log.level on line 7 and the empty secret on line 12 only repeat the problems of their lines")
}

func TestParseQuotedReferenceKeepsSpecialCharacters(t *testing.T) {
	const secret = "a #b: [c] *d 'e' {f}"
	cfg, err := Parse([]byte(minimal+`teams:
  - name: t
    networks: [mainnet]
    feeds: ["*"]
    keys:
      - id: k
        secret: "${S}"
`), fakeEnv(map[string]string{"S": secret}))
	require.NoError(t, err)
	assert.Equal(t, []Secret{secret}, cfg.Teams[0].Keys[0].Secrets())
}

// TestParseRedactsSecretsInYAMLErrors: a secret beginning with "*" left
// unquoted is a YAML alias; the parser's "unknown anchor" message quotes
// its name, the secret. Neither an inline secret nor one from a variable
// may reach the problem text (logs, check, the status page).
func TestParseRedactsSecretsInYAMLErrors(t *testing.T) {
	const secret = "*Zq8s3cretValue0123456789"
	for name, in := range map[string]string{
		"inline":        minimal + "teams: [{name: t, networks: [mainnet], feeds: ['*'], keys: [{id: k, secret: " + secret + "}]}]\n",
		"from variable": minimal + "teams: [{name: t, networks: [mainnet], feeds: ['*'], keys: [{id: k, secret: ${K}}]}]\n",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(in), fakeEnv(map[string]string{"K": secret}))
			require.Error(t, err)
			assert.NotContains(t, err.Error(), secret[1:9], "a secret's start in: %v", err)
			assert.Contains(t, err.Error(), Redacted)
		})
	}
}

// A sentinel or cluster form takes the place of the default url; the
// sentinels' password comes from its file; check names a problem of each
// form at its path.
func TestParseRedisForms(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sentinel-pw"), []byte("sentinel-secret\n"), 0o600))
	base := `
networks:
  mainnet: {listen: "127.0.0.1:0"}
teams:
  - name: t
    networks: [mainnet]
    feeds: ["*"]
    keys: [{id: k, secret: "0123456789abcdef"}]
`
	cfg, err := Parse([]byte(base+`
ratelimit:
  backend: redis
  redis:
    sentinel: {master: mymaster, addrs: ["10.0.0.1:26379", "10.0.0.2:26379"], sentinel_password_file: `+filepath.Join(dir, "sentinel-pw")+`}
    tls: true
cache:
  shared: {backend: redis, cluster: {addrs: ["10.0.0.1:6379"]}}
`), fakeEnv(nil))
	require.NoError(t, err)
	r := cfg.RateLimit.Redis
	assert.Empty(t, r.URL, "no default url beside a sentinel")
	require.NotNil(t, r.Sentinel)
	assert.Equal(t, "mymaster", r.Sentinel.Master)
	assert.Equal(t, "sentinel-secret", r.Sentinel.SentinelPassword.Reveal())
	assert.Equal(t, "sentinel", r.Target().Mode())
	assert.True(t, r.Target().TLS)
	assert.Equal(t, "cluster", cfg.Cache.Shared.Target().Mode())

	_, err = Parse([]byte(base+`
ratelimit:
  backend: redis
  redis:
    url: redis://127.0.0.1:6379/0
    cluster: {addrs: []}
`), fakeEnv(nil))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "ratelimit.redis: give exactly one of url, sentinel or cluster, not url and cluster")
	assert.Contains(t, err.Error(), "ratelimit.redis.cluster.addrs: required: at least one HOST:PORT")
}
