package config

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRestartOnly(t *testing.T) {
	network := func(name string) []string {
		p := "networks." + name
		out := []string{p}
		for _, k := range []string{"listen", "hosts", "tls", "pass_through", "upstream.url", "upstream.api_key",
			"upstream.api_secret", "upstream.timeout", "upstream.retries", "upstream.budget", "upstream.budget_margin", "upstream.max_bulk",
			"upstream.ws_url", "upstream.ws_max_connections", "upstream.ws_feeds_per_connection", "upstream.ws_pinned"} {
			out = append(out, p+"."+k)
		}
		sort.Strings(out)
		return out
	}
	tests := []struct {
		name   string
		change func(c *Config)
		want   []string
	}{
		{name: "nothing", change: func(*Config) {}},

		// What a reload applies.
		{name: "teams, keys and limits", change: func(c *Config) {
			c.Teams[0].Rate = Rate{RPS: 1, Burst: 1}
			c.Teams[0].Keys[0].Secret = "another-secret-0123456789"
			c.Teams[1].Feeds = StreamIDs{AllFeedsWildcard}
			c.Teams[1].DailyQuota = 1
			c.Teams[1].Upstream = map[string]*Credentials{"testnet": {APIKey: "k", APISecret: "team-secret"}}
			c.Teams = append(c.Teams, Team{Name: "new", Networks: []string{"mainnet"}})
		}},
		{name: "auth", change: func(c *Config) {
			c.Auth = Auth{MaxSkew: time.Minute, ReplayGrace: 2 * time.Second, AnonymousRate: Rate{RPS: 1, Burst: 1}, ReplayMaxEntries: 5000}
		}},
		{name: "cache lifetimes", change: func(c *Config) {
			c.Cache.CatalogTTL, c.Cache.LatestTTL, c.Cache.NegativeTTL = time.Hour, time.Second, time.Minute
		}},
		{name: "log.audit", change: func(c *Config) { c.Log.Audit = true }},

		// What only a restart applies, one setting at a time.
		{name: "admin listener", change: func(c *Config) { c.Server.AdminListen = "" }, want: []string{"server.admin_listen"}},
		{name: "shutdown timeout", change: func(c *Config) { c.Server.ShutdownTimeout++ }, want: []string{"server.shutdown_timeout"}},
		{name: "read header timeout", change: func(c *Config) { c.Server.ReadHeaderTimeout++ }, want: []string{"server.read_header_timeout"}},
		{name: "idle timeout", change: func(c *Config) { c.Server.IdleTimeout++ }, want: []string{"server.idle_timeout"}},
		{name: "read timeout", change: func(c *Config) { c.Server.ReadTimeout++ }, want: []string{"server.read_timeout"}},
		{name: "write timeout", change: func(c *Config) { c.Server.WriteTimeout++ }, want: []string{"server.write_timeout"}},
		{name: "log level", change: func(c *Config) { c.Log.Level = LogLevelDebug }, want: []string{"log.level"}},
		{name: "log format", change: func(c *Config) { c.Log.Format = LogFormatConsole }, want: []string{"log.format"}},
		{name: "cache size", change: func(c *Config) { c.Cache.MaxBytes = MiB }, want: []string{"cache.max_bytes"}},
		{name: "backend", change: func(c *Config) { c.RateLimit.Backend = BackendRedis }, want: []string{"ratelimit.backend"}},
		{name: "redis url", change: func(c *Config) { c.RateLimit.Redis.URL = "redis://redis:6379/0" }, want: []string{"ratelimit.redis.url"}},
		{name: "redis password", change: func(c *Config) { c.RateLimit.Redis.Password = "pw" }, want: []string{"ratelimit.redis.password"}},
		{name: "fail mode", change: func(c *Config) { c.RateLimit.Redis.FailMode = FailModeClosed }, want: []string{"ratelimit.redis.fail_mode"}},
		{name: "listen", change: func(c *Config) { c.Networks["mainnet"].Listen = ":1" }, want: []string{"networks.mainnet.listen"}},
		{name: "hosts", change: func(c *Config) { c.Networks["mainnet"].Hosts = []string{"a.example"} }, want: []string{"networks.mainnet.hosts"}},
		{name: "pass-through", change: func(c *Config) { c.Networks["testnet"].PassThrough = []string{"/api/v1/x"} }, want: []string{"networks.testnet.pass_through"}},
		{name: "upstream url", change: func(c *Config) { c.Networks["mainnet"].Upstream.URL = "https://a.example" }, want: []string{"networks.mainnet.upstream.url"}},
		{name: "upstream key", change: func(c *Config) { c.Networks["mainnet"].Upstream.APIKey = "k" }, want: []string{"networks.mainnet.upstream.api_key"}},
		{name: "upstream secret", change: func(c *Config) { c.Networks["mainnet"].Upstream.APISecret = "s" }, want: []string{"networks.mainnet.upstream.api_secret"}},
		{name: "upstream timeout", change: func(c *Config) { c.Networks["mainnet"].Upstream.Timeout++ }, want: []string{"networks.mainnet.upstream.timeout"}},
		{name: "upstream retries", change: func(c *Config) { c.Networks["mainnet"].Upstream.Retries++ }, want: []string{"networks.mainnet.upstream.retries"}},
		{name: "upstream budget rps", change: func(c *Config) { c.Networks["mainnet"].Upstream.Budget.RPS++ }, want: []string{"networks.mainnet.upstream.budget"}},
		{name: "upstream budget burst", change: func(c *Config) { c.Networks["mainnet"].Upstream.Budget.Burst++ }, want: []string{"networks.mainnet.upstream.budget"}},
		{name: "upstream budget margin", change: func(c *Config) { c.Networks["mainnet"].Upstream.BudgetMargin++ }, want: []string{"networks.mainnet.upstream.budget_margin"}},
		{name: "upstream max bulk", change: func(c *Config) { c.Networks["mainnet"].Upstream.MaxBulk++ }, want: []string{"networks.mainnet.upstream.max_bulk"}},
		{name: "network added", change: func(c *Config) {
			c.Networks["devnet"] = &Network{Listen: ":8082", Upstream: defaultUpstream(EmbeddedURL)}
		}, want: network("devnet")},
		{name: "network removed", change: func(c *Config) { delete(c.Networks, "testnet") }, want: network("testnet")},
		{name: "nil network added", change: func(c *Config) { c.Networks["devnet"] = nil }, want: network("devnet")},

		{name: "several, sorted", change: func(c *Config) {
			c.Networks["testnet"].Upstream.Retries = 0
			c.Server.IdleTimeout = time.Second
			c.Log.Level = LogLevelError
			c.Teams = nil
		}, want: []string{"log.level", "networks.testnet.upstream.retries", "server.idle_timeout"}},
		{name: "TLS turned on: the listener changes; its files change by a reload", change: func(c *Config) {
			c.Networks["mainnet"].TLS = &TLS{CertFile: "a.crt", KeyFile: "a.key"}
			c.Server.AdminTLS = &TLS{CertFile: "a.crt", KeyFile: "a.key"}
		}, want: []string{"networks.mainnet.tls", "server.admin_tls"}},
		{name: "tracing", change: func(c *Config) { c.Tracing.SampleRatio = 1 }, want: []string{"tracing"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			running, next := Default(), Default()
			tc.change(next)
			assert.Equal(t, tc.want, RestartOnly(running, next))
			assert.Equal(t, tc.want, RestartOnly(next, running), "either way round")
		})
	}
}

func TestRestartOnlyNeverReturnsASecret(t *testing.T) {
	const (
		oldSecret = "old-upstream-secret-AAAAAAAA"
		newSecret = "new-upstream-secret-BBBBBBBB"
		password  = "redis-password-CCCCCCCC"
	)
	running, next := Default(), Default()
	running.Networks["mainnet"].Upstream.APISecret = oldSecret
	next.Networks["mainnet"].Upstream.APISecret = newSecret
	next.RateLimit.Redis.Password = password
	got := RestartOnly(running, next)
	assert.Equal(t, []string{"networks.mainnet.upstream.api_secret", "ratelimit.redis.password"}, got)

	forbidden := []string{oldSecret, newSecret, password}
	for _, s := range forbidden {
		sum := sha256.Sum256([]byte(s))
		forbidden = append(forbidden, hex.EncodeToString(sum[:]))
	}
	for _, path := range got {
		for _, s := range forbidden {
			assert.NotContains(t, path, s)
		}
	}
}

func TestRestartOnlyComparesSecretsNotWhereTheyCameFrom(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "same"), []byte("upstream-secret\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "rotated"), []byte("rotated-secret\n"), 0o600))
	running := Default()
	running.Networks["mainnet"].Upstream.APISecret = "upstream-secret"
	fromFile := func(name string) *Config {
		c := Default()
		c.Networks["mainnet"].Upstream.APISecretFile = filepath.Join(dir, name)
		c.readSecretFiles()
		return c
	}
	assert.Empty(t, RestartOnly(running, fromFile("same")), "the same secret, inline or from a file")
	assert.Equal(t, []string{"networks.mainnet.upstream.api_secret"}, RestartOnly(running, fromFile("rotated")))
}
