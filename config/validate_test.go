package config

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/feedid"
)

const (
	feedA = "0x000359843a543ee2fe414dc14c7e7920ef10f4372990b79d6361cdc0dd1ba782"
	okKey = "0123456789abcdef" // 16 bytes, the shortest secret accepted
)

// manyMistakes has one or more mistakes in every section; a comment says
// what is wrong. The test expects exactly these problems, all at once.
const manyMistakes = `server:
  admin_listen: ":8081"                 # same as a network's listen
  shutdown_timeout: 0s                  # not positive
log:
  level: verbose                        # unknown level
  format: xml                           # unknown format
networks:
  mainnet:
    listen: "localhost"                 # no port
    upstream:
      url: ftp://example.com            # not http(s)
      timeout: -1s                      # not positive
      retries: -1                       # negative
      budget: {rps: 0, burst: 5}        # budget not positive
      max_bulk: 0                       # less than 1
  testnet:
    listen: ":8081"
    hosts: ["bad host", ok.example]     # not a host name
    upstream:
      url: https://user:pw@api.example.com  # user information
  devnet:
    listen: ":8081"                     # shared with testnet, no hosts
    upstream:
      url: https://api.example.com/api/v1   # has a path
      api_key: k                        # no secret
  Bad_Name:                             # network name
    listen: ":99999"                    # port out of range
    upstream: {url: embedded}
auth:
  max_skew: 0s
cache:
  max_bytes: 0
  negative_ttl: -5s
ratelimit:
  backend: redis
  redis:
    url: http://127.0.0.1:6379          # not a redis URL
    fail_mode: maybe
teams:
  - name: trading
    networks: [mainnet, moonnet]        # unknown network
    feeds: ["*", "0x1234"]              # wildcard not alone, bad ID
    rate: {rps: -1}                     # negative
    daily_quota: -5                     # negative
    upstream:
      testnet: {api_key: x}             # team does not use testnet; no secret
    keys:
      - id: shared-id
        secret: short                   # too short
      - id: two-secrets
        secret: "0123456789abcdef"
        secrets: ["0123456789abcdef"]   # both secret and secrets
      - id: rotating
        secrets: ["0123456789abcdef", ""]  # second one empty
      - id: nothing                     # no secret at all
        rate: {rps: 1, burst: 0}        # burst 0 with rps
  - name: trading                       # duplicate name
    networks: []                        # empty
    feeds: []                           # empty
    keys:
      - id: shared-id                   # duplicate across teams
        secret: "0123456789abcdef"
  - name: "-nope"                       # bad team name
    networks: [testnet]
    feeds: ["*"]
    keys: []                            # no keys
`

func TestValidateReportsEveryProblemAtOnce(t *testing.T) {
	_, err := Parse([]byte(manyMistakes), fakeEnv(nil))
	var ps Problems
	require.ErrorAs(t, err, &ps)

	want := []struct {
		path string
		line int
		msg  string // a part of the message
	}{
		{"server.admin_listen", 2, `":8081" is also the listen address of networks.devnet`},
		{"server.admin_listen", 2, `":8081" is also the listen address of networks.testnet`},
		{"server.shutdown_timeout", 3, "must be positive"},
		{"log.level", 5, `"verbose" is not one of`},
		{"log.format", 6, `"xml" is not one of json, console`},
		{"networks.Bad_Name", 26, "network name must be"},
		{"networks.Bad_Name.listen", 27, "port must be a number"},
		{"networks.devnet.upstream.url", 24, "without path"},
		{"networks.devnet.upstream.api_secret", 23, "required"},
		{"networks.mainnet.listen", 9, `"localhost" is not host:port`},
		{"networks.mainnet.upstream.url", 11, "http:// or https://"},
		{"networks.mainnet.upstream.api_key", 10, "required"},
		{"networks.mainnet.upstream.api_secret", 10, "required"},
		{"networks.mainnet.upstream.timeout", 12, "must be positive"},
		{"networks.mainnet.upstream.retries", 13, "must not be negative"},
		{"networks.mainnet.upstream.budget.rps", 14, "must be positive"},
		{"networks.mainnet.upstream.max_bulk", 15, "at least 1"},
		{"networks.testnet.hosts[0]", 18, `"bad host" is not a host name`},
		{"networks.testnet.upstream.url", 20, "must not contain user information"},
		{"networks.testnet.upstream.api_key", 19, "required"},
		{"networks.testnet.upstream.api_secret", 19, "required"},
		{"networks.devnet.hosts", 21, `required: listen address ":8081" is shared with networks.testnet`},
		{"auth.max_skew", 30, "must be positive"},
		{"cache.max_bytes", 32, "must be positive"},
		{"cache.negative_ttl", 33, "must be positive"},
		{"ratelimit.redis.url", 37, "must be a redis://"},
		{"ratelimit.redis.fail_mode", 38, `"maybe" is not one of open, closed`},
		{"teams[0].networks[1]", 41, `no network named "moonnet"`},
		{"teams[0].feeds[0]", 42, `"*" must be the only entry`},
		{"teams[0].feeds[1]", 42, `"0x1234" is not a stream ID`},
		{"teams[0].rate.rps", 43, "must not be negative"},
		{"teams[0].daily_quota", 44, "must not be negative"},
		{"teams[0].upstream.testnet", 46, `the team does not use network "testnet"`},
		{"teams[0].upstream.testnet.api_secret", 46, "required"},
		{"teams[0].keys[0].secret", 49, "too short: 5 bytes, at least 16"},
		{"teams[0].keys[1].secret", 51, "exactly one of secret, secrets, secret_file"},
		{"teams[0].keys[2].secrets[1]", 54, "empty"},
		{"teams[0].keys[3].secret", 55, "required"},
		{"teams[0].keys[3].rate.burst", 56, "at least 1 when rps is set"},
		{"teams[1].name", 57, `"trading" is also the name of teams[0]`},
		{"teams[1].networks", 58, "required"},
		{"teams[1].feeds", 59, "required"},
		{"teams[1].keys[0].id", 61, `"shared-id" is also the id of teams[0].keys[0]`},
		{"teams[2].name", 63, "must be 1 to 64 of letters"},
		{"teams[2].keys", 66, "at least one key"},
	}
	got := map[string][]Problem{}
	for _, p := range ps {
		got[p.Path] = append(got[p.Path], p)
	}
	for _, w := range want {
		found := false
		for _, p := range got[w.path] {
			if p.Line == w.line && strings.Contains(p.Msg, w.msg) {
				found = true
			}
		}
		assert.True(t, found, "missing %s (line %d): %s", w.path, w.line, w.msg)
	}
	assert.Len(t, ps, len(want), "every problem, and nothing else:\n%v", err)

	// One line per problem, each naming its path.
	lines := strings.Split(err.Error(), "\n")
	require.Len(t, lines, len(ps))
	for i, p := range ps {
		assert.True(t, strings.HasPrefix(lines[i], p.Path+": "), lines[i])
	}
}

// base returns a valid configuration for the single-mistake cases to spoil.
func base() *Config {
	cfg := Default()
	cfg.Teams[0].Keys[0].Secret = "trading-secret-0123456789"
	cfg.Teams[1].Keys[0].Secret = "research-secret-0123456789"
	return cfg
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		change func(c *Config)
		want   []string // every Problem.Error(); none for a valid change
	}{
		{name: "the base is valid", change: func(*Config) {}},
		{name: "no networks", change: func(c *Config) { c.Networks = nil },
			want: []string{
				"networks: none configured: at least one network is required",
				`teams[0].networks[0]: no network named "mainnet"`,
				`teams[0].networks[1]: no network named "testnet"`,
				`teams[1].networks[0]: no network named "testnet"`,
			}},
		{name: "a network may have any lower-case name, given its upstream", change: func(c *Config) {
			c.Networks["staging-2"] = &Network{Listen: "127.0.0.1:8082", Upstream: defaultUpstream(EmbeddedURL)}
		}},
		{name: "other networks have no default upstream", change: func(c *Config) {
			c.Networks["staging"] = &Network{Listen: "127.0.0.1:8082", Upstream: defaultUpstream("")}
		}, want: []string{`networks.staging.upstream.url: required for a network other than mainnet and testnet: "embedded" or the upstream's http(s) URL`}},
		{name: "nil network", change: func(c *Config) { c.Networks["x"] = nil },
			want: []string{"networks.x: empty: listen is required"}},
		{name: "nil team credentials", change: func(c *Config) { c.Teams[1].Upstream = map[string]*Credentials{"testnet": nil} },
			want: []string{"teams[1].upstream.testnet.api_key: required", "teams[1].upstream.testnet.api_secret: required (or api_secret_file)"}},
		{name: "pprof on the loopback admin listener", change: func(c *Config) { c.Server.Pprof = true }},
		{name: "pprof needs the admin listener", change: func(c *Config) { c.Server.Pprof, c.Server.AdminListen = true, "" },
			want: []string{"server.pprof: needs server.admin_listen, which serves it"}},
		{name: "pprof off loopback needs the admin token", change: func(c *Config) { c.Server.Pprof, c.Server.AdminListen = true, "0.0.0.0:9090" },
			want: []string{`server.pprof: server.admin_listen "0.0.0.0:9090" is not on loopback: set server.admin_token (or admin_token_file) to serve the profiles`}},
		{name: "pprof off loopback with the admin token", change: func(c *Config) {
			c.Server.Pprof, c.Server.AdminListen, c.Server.AdminToken = true, "0.0.0.0:9090", "admin-token-0123456789"
		}},
		{name: "IPv6 listen address", change: func(c *Config) { c.Networks["mainnet"].Listen = "[::1]:8080" }},
		{name: "a tls block without its files, with an unknown client_auth", change: func(c *Config) {
			c.Networks["mainnet"].TLS = &TLS{ClientAuth: "maybe"}
		}, want: []string{
			"networks.mainnet.tls.cert_file: required: the listener's PEM certificate",
			"networks.mainnet.tls.key_file: required: the certificate's PEM private key",
			`networks.mainnet.tls.client_auth: "maybe": want none, verify_if_given or require`,
		}},
		{name: "client certificates asked for without a CA, and a CA without asking", change: func(c *Config) {
			c.Networks["mainnet"].TLS = &TLS{CertFile: "a.crt", KeyFile: "a.key", ClientAuth: "require"}
			c.Networks["testnet"].TLS = &TLS{CertFile: "a.crt", KeyFile: "a.key", ClientCAFile: "ca.crt"}
		}, want: []string{
			"networks.mainnet.tls.client_ca_file: required by client_auth require: the CA certificates that verify clients",
			"networks.testnet.tls.client_ca_file: set, but client_auth is none: no client certificate is asked for (use verify_if_given or require)",
		}},
		{name: "networks on one listener with different tls blocks", change: func(c *Config) {
			c.Networks["testnet"].Listen = c.Networks["mainnet"].Listen
			c.Networks["mainnet"].Hosts = []string{"mainnet.local"}
			c.Networks["testnet"].Hosts = []string{"testnet.local"}
			c.Networks["mainnet"].TLS = &TLS{CertFile: "a.crt", KeyFile: "a.key"}
		}, want: []string{`networks.testnet.tls: listen address "127.0.0.1:8080" is shared with networks.mainnet, whose tls block differs: networks on one listener share its TLS`}},
		{name: "a key bound to a certificate on networks that do not ask for one, with a bad pin", change: func(c *Config) {
			c.Teams[1].Keys[0].ClientCert = &ClientCert{SPKISHA256: "abc"}
		}, want: []string{
			"teams[1].keys[0].client_cert.spki_sha256: want the SHA-256 of the certificate's public key, 64 hex digits or 44 base64 characters",
			"teams[1].keys[0].client_cert: network testnet does not verify client certificates: set networks.testnet.tls.client_auth to verify_if_given or require (with client_ca_file)",
		}},
		{name: "tracing to a collector", change: func(c *Config) {
			c.Tracing = Tracing{OTLPEndpoint: "http://otel-collector:4318", Protocol: TracingHTTP, SampleRatio: 1}
		}},
		{name: "tracing badly configured", change: func(c *Config) {
			c.Tracing = Tracing{OTLPEndpoint: "otel-collector:4318", Protocol: "thrift", SampleRatio: 2}
		}, want: []string{
			"tracing.otlp_endpoint: want the collector's base URL, http:// or https:// with a host, such as http://otel-collector:4318",
			`tracing.protocol: "thrift": want http/protobuf or grpc`,
			"tracing.sample_ratio: must be between 0 and 1",
		}},
		{name: "a grpc endpoint with a path", change: func(c *Config) {
			c.Tracing = Tracing{OTLPEndpoint: "http://otel-collector:4317/v1/traces", Protocol: TracingGRPC, SampleRatio: 0.5}
		}, want: []string{"tracing.otlp_endpoint: a grpc endpoint has no path: give scheme, host and port"}},
		{name: "a key bound to nothing", change: func(c *Config) {
			c.Networks["testnet"].TLS = &TLS{CertFile: "a.crt", KeyFile: "a.key", ClientCAFile: "ca.crt", ClientAuth: "verify_if_given"}
			c.Teams[1].Keys[0].ClientCert = &ClientCert{}
		}, want: []string{"teams[1].keys[0].client_cert: give spki_sha256, san or both: the certificate the key must come with"}},
		{name: "shared listen address with hosts", change: func(c *Config) {
			c.Networks["testnet"].Listen = c.Networks["mainnet"].Listen
			c.Networks["mainnet"].Hosts = []string{"mainnet.local"}
			c.Networks["testnet"].Hosts = []string{"testnet.local"}
		}},
		{name: "shared listen address needs hosts on each network", change: func(c *Config) {
			c.Networks["testnet"].Listen = c.Networks["mainnet"].Listen
			c.Networks["mainnet"].Hosts = []string{"mainnet.local"}
		}, want: []string{`networks.testnet.hosts: required: listen address "127.0.0.1:8080" is shared with networks.mainnet`}},
		{name: "a host on two networks of one listener", change: func(c *Config) {
			c.Networks["testnet"].Listen = c.Networks["mainnet"].Listen
			c.Networks["mainnet"].Hosts = []string{"gw.local"}
			c.Networks["testnet"].Hosts = []string{"gw.local"}
		}, want: []string{`networks.testnet.hosts[0]: "gw.local" is also a host of networks.mainnet on the same listener`}},
		{name: "port 0 is never shared", change: func(c *Config) {
			c.Networks["mainnet"].Listen = "127.0.0.1:0"
			c.Networks["testnet"].Listen = "127.0.0.1:0"
			c.Server.AdminListen = "127.0.0.1:0"
		}},
		{name: "host with a port", change: func(c *Config) { c.Networks["mainnet"].Hosts = []string{"gw.local:8080"} },
			want: []string{`networks.mainnet.hosts[0]: "gw.local:8080" is not a host name (give it without scheme or port)`}},
		{name: "real upstream with credentials", change: func(c *Config) {
			u := &c.Networks["mainnet"].Upstream
			u.URL, u.APIKey, u.APISecret = "https://api.dataengine.chain.link", "org", "org-secret"
			c.Teams = c.Teams[1:] // the demo team would reach it with a published secret
		}},
		{name: "real upstream root URL with a slash", change: func(c *Config) {
			u := &c.Networks["testnet"].Upstream
			u.URL, u.APIKey, u.APISecret = "http://127.0.0.1:9999/", "org", "org-secret"
		}},
		{name: "real upstream without credentials", change: func(c *Config) {
			c.Networks["testnet"].Upstream.URL = "http://127.0.0.1:9999"
		}, want: []string{
			"networks.testnet.upstream.api_key: required",
			"networks.testnet.upstream.api_secret: required (or api_secret_file)",
		}},
		{name: "embedded upstream with a key but no secret", change: func(c *Config) {
			c.Networks["testnet"].Upstream.APIKey = "k"
		}, want: []string{"networks.testnet.upstream.api_secret: required (or api_secret_file)"}},
		{name: "embedded upstream with a secret but no key", change: func(c *Config) {
			c.Networks["testnet"].Upstream.APISecret = "s"
		}, want: []string{"networks.testnet.upstream.api_key: required"}},
		{name: "both api_secret and api_secret_file", change: func(c *Config) {
			u := &c.Networks["testnet"].Upstream
			u.APIKey, u.APISecret, u.APISecretFile = "k", "s", "/f"
		}, want: []string{"networks.testnet.upstream.api_secret: give either api_secret or api_secret_file, not both"}},
		{name: "upstream URL with a query", change: func(c *Config) {
			u := &c.Networks["testnet"].Upstream
			u.URL, u.APIKey, u.APISecret = "https://a.example?x=1", "k", "s"
		}, want: []string{"networks.testnet.upstream.url: must be the service's root URL, without path, query or fragment (the API lives at /api/v1 of the host)"}},
		{name: "upstream URL without host", change: func(c *Config) {
			u := &c.Networks["testnet"].Upstream
			u.URL, u.APIKey, u.APISecret = "https:///x", "k", "s"
		}, want: []string{"networks.testnet.upstream.url: has no host"}},
		{name: "budget burst negative", change: func(c *Config) { c.Networks["testnet"].Upstream.Budget.Burst = -1 },
			want: []string{"networks.testnet.upstream.budget.burst: must be at least 1 when rps is set", "networks.testnet.upstream.budget.burst: must not be negative"}},
		{name: "budget margin negative", change: func(c *Config) { c.Networks["testnet"].Upstream.BudgetMargin = -time.Millisecond },
			want: []string{"networks.testnet.upstream.budget_margin: must be from 0 to 1s"}},
		{name: "budget margin over a second", change: func(c *Config) { c.Networks["testnet"].Upstream.BudgetMargin = 2 * time.Second },
			want: []string{"networks.testnet.upstream.budget_margin: must be from 0 to 1s"}},
		{name: "team rps is infinite", change: func(c *Config) { c.Teams[0].Rate.RPS = posInf() },
			want: []string{"teams[0].rate.rps: must be a finite number"}},
		{name: "team without limits", change: func(c *Config) { c.Teams[0].Rate = Rate{} }},
		{name: "redis backend", change: func(c *Config) {
			c.RateLimit.Backend = "redis"
			c.RateLimit.Redis = Redis{URL: "rediss://user@redis.internal:6380/1", Password: "pw", FailMode: "closed"}
		}},
		{name: "redis over a unix socket", change: func(c *Config) {
			c.RateLimit.Backend = "redis"
			c.RateLimit.Redis.URL = "unix:///run/redis.sock"
		}},
		{name: "redis URL is only checked for the redis backend", change: func(c *Config) { c.RateLimit.Redis.URL = "::" }},
		{name: "redis URL missing", change: func(c *Config) {
			c.RateLimit.Backend = "redis"
			c.RateLimit.Redis.URL = ""
		}, want: []string{"ratelimit.redis: give one of url, sentinel or cluster (required when backend is redis)"}},
		{name: "redis sentinel", change: func(c *Config) {
			c.RateLimit.Backend = "redis"
			c.RateLimit.Redis = Redis{Sentinel: &RedisSentinel{Master: "mymaster", Addrs: []string{"10.0.0.1:26379", "[::1]:26379"}, SentinelPassword: "spw"},
				TLS: true, Password: "pw", FailMode: "open"}
		}},
		{name: "redis cluster", change: func(c *Config) {
			c.RateLimit.Backend = "redis"
			c.RateLimit.Redis = Redis{Cluster: &RedisCluster{Addrs: []string{"redis-0.internal:6379"}}, FailMode: "open"}
		}},
		{name: "redis: two of url, sentinel and cluster, every problem named", change: func(c *Config) {
			c.RateLimit.Backend = "redis"
			c.RateLimit.Redis = Redis{URL: "redis://127.0.0.1:6379/0", TLS: true,
				Sentinel: &RedisSentinel{Addrs: []string{"10.0.0.1", "10.0.0.1:0", "h:1", "h:1"}, SentinelPassword: "a", SentinelPasswordFile: "/f"},
				Cluster:  &RedisCluster{}, FailMode: "open"}
		}, want: []string{
			"ratelimit.redis: give exactly one of url, sentinel or cluster, not url and sentinel and cluster",
			"ratelimit.redis.tls: applies to sentinel and cluster; a url turns TLS on with rediss://",
			"ratelimit.redis.sentinel.master: required: the name the sentinels monitor the master under",
			`ratelimit.redis.sentinel.addrs[0]: "10.0.0.1" is not HOST:PORT`,
			`ratelimit.redis.sentinel.addrs[1]: "10.0.0.1:0" has no valid port`,
			`ratelimit.redis.sentinel.addrs[3]: "h:1" is given twice`,
			"ratelimit.redis.sentinel.sentinel_password: give either sentinel_password or sentinel_password_file, not both",
			"ratelimit.redis.cluster.addrs: required: at least one HOST:PORT",
		}},
		{name: "shared cache on a cluster", change: func(c *Config) {
			c.Cache.Shared.Backend = "redis"
			c.Cache.Shared.Cluster = &RedisCluster{Addrs: []string{"10.0.0.1:6379"}}
			c.Cache.Shared.TLS = true
		}},
		{name: "redis URL with a password", change: func(c *Config) {
			c.RateLimit.Backend = "redis"
			c.RateLimit.Redis.URL = "redis://:hunter2@127.0.0.1:6379"
		}, want: []string{"ratelimit.redis.url: must not contain a password: use password or password_file"}},
		{name: "unknown backend", change: func(c *Config) { c.RateLimit.Backend = "etcd" },
			want: []string{`ratelimit.backend: "etcd" is not one of memory, redis`}},
		{name: "redis password and password file", change: func(c *Config) {
			c.RateLimit.Redis.Password, c.RateLimit.Redis.PasswordFile = "pw", "/f"
		}, want: []string{"ratelimit.redis.password: give either password or password_file, not both"}},
		{name: "shared cache in redis", change: func(c *Config) {
			c.Cache.Shared = SharedCache{Backend: "redis", URL: "rediss://cache.internal:6380/2", Password: "pw",
				TTL: 3600e9, MaxEntryBytes: 512 << 10, Lease: 1e9}
		}},
		{name: "shared cache URL is only checked for the redis backend", change: func(c *Config) { c.Cache.Shared.URL = "::" }},
		{name: "shared cache URL missing", change: func(c *Config) { c.Cache.Shared.Backend = "redis" },
			want: []string{"cache.shared: give one of url, sentinel or cluster (required when backend is redis)"}},
		{name: "shared cache URL not redis", change: func(c *Config) {
			c.Cache.Shared.Backend, c.Cache.Shared.URL = "redis", "http://127.0.0.1:6379"
		}, want: []string{"cache.shared.url: must be a redis://, rediss:// or unix:// URL"}},
		{name: "shared cache URL with a password", change: func(c *Config) {
			c.Cache.Shared.Backend, c.Cache.Shared.URL = "redis", "redis://:hunter2@127.0.0.1:6379"
		}, want: []string{"cache.shared.url: must not contain a password: use password or password_file"}},
		{name: "shared cache unknown backend", change: func(c *Config) { c.Cache.Shared.Backend = "memcached" },
			want: []string{`cache.shared.backend: "memcached" is not one of off, redis`}},
		{name: "shared cache bounds not positive", change: func(c *Config) {
			c.Cache.Shared.TTL, c.Cache.Shared.MaxEntryBytes, c.Cache.Shared.Lease = 0, 0, -1
		}, want: []string{"cache.shared.ttl: must be positive", "cache.shared.max_entry_bytes: must be positive", "cache.shared.lease: must be positive"}},
		{name: "shared cache password and password file", change: func(c *Config) {
			c.Cache.Shared.Password, c.Cache.Shared.PasswordFile = "pw", "/f"
		}, want: []string{"cache.shared.password: give either password or password_file, not both"}},
		{name: "feed list", change: func(c *Config) { c.Teams[1].Feeds = StreamIDs{feedA} }},
		{name: "feed ID of the wrong length", change: func(c *Config) { c.Teams[1].Feeds = StreamIDs{feedA + "00"} },
			want: []string{`teams[1].feeds[0]: "` + feedA + `00" is not a stream ID (0x and 64 hex digits)`}},
		{name: "team name missing", change: func(c *Config) { c.Teams[1].Name = "" },
			want: []string{"teams[1].name: required"}},
		{name: "team credentials for its network", change: func(c *Config) {
			c.Teams[1].Upstream = map[string]*Credentials{"testnet": {APIKey: "research", APISecret: "research-upstream"}}
		}},
		{name: "team credentials for a network it does not use", change: func(c *Config) {
			c.Teams[1].Upstream = map[string]*Credentials{"mainnet": {APIKey: "research", APISecret: "research-upstream"}}
		}, want: []string{`teams[1].upstream.mainnet: the team does not use network "mainnet"`}},
		{name: "key id missing", change: func(c *Config) { c.Teams[1].Keys[0].ID = "" },
			want: []string{"teams[1].keys[0].id: required"}},
		{name: "key id with a space", change: func(c *Config) { c.Teams[1].Keys[0].ID = "a b" },
			want: []string{"teams[1].keys[0].id: must be 1 to 128 printable ASCII characters without spaces"}},
		{name: "duplicate key id within a team", change: func(c *Config) {
			c.Teams[1].Keys = append(c.Teams[1].Keys, Key{ID: c.Teams[1].Keys[0].ID, Secret: okKey})
		}, want: []string{`teams[1].keys[1].id: "` + ResearchKeyID + `" is also the id of teams[1].keys[0]`}},
		{name: "secret of exactly 16 bytes", change: func(c *Config) { c.Teams[1].Keys[0].Secret = okKey }},
		{name: "secret of 15 bytes", change: func(c *Config) { c.Teams[1].Keys[0].Secret = Secret(okKey[1:]) },
			want: []string{"teams[1].keys[0].secret: too short: 15 bytes, at least 16 are required"}},
		{name: "secrets list while rotating", change: func(c *Config) {
			k := &c.Teams[1].Keys[0]
			k.Secret, k.SecretList = "", []Secret{okKey + "new", okKey + "old"}
		}},
		{name: "secret and secret_file", change: func(c *Config) { c.Teams[1].Keys[0].SecretFile = "/f" },
			want: []string{"teams[1].keys[0].secret: give exactly one of secret, secrets, secret_file"}},
		{name: "secret file that does not exist", change: func(c *Config) {
			k := &c.Teams[1].Keys[0]
			k.Secret, k.SecretFile = "", "/nonexistent/streamgate/key"
		}, want: []string{"teams[1].keys[0].secret_file: open /nonexistent/streamgate/key: no such file or directory"}},
		{name: "demo secrets with the simulator", change: func(c *Config) {
			c.Teams[0].Keys[0].Secret = DemoKeySecret
			c.Teams[1].Keys[0].Secret = ResearchKeySecret
		}},
		{name: "demo secret with a loopback upstream", change: func(c *Config) {
			c.Teams[0].Keys[0].Secret = DemoKeySecret
			u := &c.Networks["mainnet"].Upstream
			u.URL, u.APIKey, u.APISecret = "http://localhost:9999", "k", "s"
		}},
		{name: "demo secret with a real upstream", change: func(c *Config) {
			c.Teams[0].Keys[0].SecretList = []Secret{"0123456789abcdef-new", DemoKeySecret}
			c.Teams[0].Keys[0].Secret = ""
			u := &c.Networks["mainnet"].Upstream
			u.URL, u.APIKey, u.APISecret = "https://api.dataengine.chain.link", "k", "s"
		}, want: []string{"teams[0].keys[0]: uses a published demo secret, which may only reach the embedded or a loopback upstream, not networks.mainnet"}},
		{name: "demo secret with a loopback upstream and a listener on every address", change: func(c *Config) {
			c.Teams[0].Keys[0].Secret = DemoKeySecret
			u := &c.Networks["mainnet"].Upstream
			u.URL, u.APIKey, u.APISecret = "http://127.0.0.1:9999", "k", "s"
			c.Networks["testnet"].Listen = "0.0.0.0:8081"
		}, want: []string{`teams[0].keys[0]: uses a published demo secret, which may only be served on loopback listeners, not networks.testnet.listen "0.0.0.0:8081"`}},
		{name: "demo secret with the simulator and a listener on every interface", change: func(c *Config) {
			c.Teams[1].Keys[0].Secret = ResearchKeySecret
			c.Networks["mainnet"].Listen = ":8080"
		}, want: []string{`teams[1].keys[0]: uses a published demo secret, which may only be served on loopback listeners, not networks.mainnet.listen ":8080"`}},
		{name: "admin listener disabled", change: func(c *Config) { c.Server.AdminListen = "" }},
		{name: "log level and format", change: func(c *Config) { c.Log = Log{Level: "debug", Format: "console", Audit: true} }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base()
			tc.change(cfg)
			cfg.readSecretFiles() // as Parse does before it validates
			err := cfg.Validate()
			if tc.want == nil {
				assert.NoError(t, err)
				return
			}
			var ps Problems
			require.ErrorAs(t, err, &ps)
			var got []string
			for _, p := range ps {
				got = append(got, p.Error())
			}
			assert.Equal(t, tc.want, got)
		})
	}
}

func posInf() float64 {
	var zero float64
	return 1 / zero
}

func TestDefaultIsValid(t *testing.T) {
	cfg := Default()
	require.NoError(t, cfg.Validate())

	assert.Equal(t, []string{"mainnet", "testnet"}, cfg.NetworkNames())
	for _, name := range cfg.NetworkNames() {
		n := cfg.Network(name)
		assert.True(t, n.Upstream.Embedded(), name)
		assert.True(t, strings.HasPrefix(n.Listen, "127.0.0.1:"), "loopback only: %s", n.Listen)
	}
	assert.Equal(t, "127.0.0.1:8080", cfg.Network("mainnet").Listen)
	assert.Equal(t, "127.0.0.1:8081", cfg.Network("testnet").Listen)
	assert.Equal(t, "127.0.0.1:9090", cfg.Server.AdminListen)
	assert.Equal(t, BackendMemory, cfg.RateLimit.Backend)

	demo := cfg.Team(DemoTeam)
	require.NotNil(t, demo)
	assert.True(t, demo.AllFeeds())
	assert.True(t, demo.HasNetwork("mainnet") && demo.HasNetwork("testnet"))
	require.Len(t, demo.Keys, 1)
	assert.Equal(t, DemoKeyID, demo.Keys[0].ID)
	assert.Equal(t, []Secret{DemoKeySecret}, demo.Keys[0].Secrets())

	research := cfg.Team(ResearchTeam)
	require.NotNil(t, research)
	assert.Equal(t, []string{"testnet"}, research.Networks)
	assert.False(t, research.AllFeeds())
	assert.Equal(t, DemoRestrictedFeeds(), research.Feeds)
	assert.Len(t, research.Feeds, 5)
	assert.Equal(t, ResearchKeyID, research.Keys[0].ID)
	assert.Equal(t, []Secret{ResearchKeySecret}, research.Keys[0].Secrets())

	// Each call gives a Config of its own.
	cfg.Teams[0].Name = "changed"
	assert.Equal(t, DemoTeam, Default().Teams[0].Name)
	research.Feeds[0] = "changed"
	assert.NotEqual(t, feedid.ID("changed"), DemoRestrictedFeeds()[0])
	assert.NotEqual(t, feedid.ID("changed"), Default().Team(ResearchTeam).Feeds[0])
}

// The parts of Default that are not the demo's own are the defaults of an
// almost empty file.
func TestDefaultUsesTheDocumentedDefaults(t *testing.T) {
	parsed, err := Parse([]byte(minimal), fakeEnv(nil))
	require.NoError(t, err)
	def := Default()
	assert.Equal(t, parsed.Server, def.Server)
	assert.Equal(t, parsed.Log, def.Log)
	assert.Equal(t, parsed.Auth, def.Auth)
	assert.Equal(t, parsed.Cache, def.Cache)
	assert.Equal(t, parsed.RateLimit, def.RateLimit)
	assert.Equal(t, parsed.Network("mainnet").Upstream, def.Network("mainnet").Upstream)
}

func TestKeySecretsIsACopy(t *testing.T) {
	k := Key{ID: "k", SecretList: []Secret{okKey + "1", okKey + "2"}}
	s := k.Secrets()
	s[0] = "changed"
	assert.Equal(t, Secret(okKey+"1"), k.SecretList[0])
	assert.Empty(t, (&Key{ID: "k"}).Secrets())
}

func TestProblemError(t *testing.T) {
	tests := []struct {
		p    Problem
		want string
	}{
		{Problem{Path: "a.b", Line: 3, Msg: "bad"}, "a.b: bad (line 3)"},
		{Problem{Path: "a.b", Msg: "bad"}, "a.b: bad"},
		{Problem{Line: 3, Msg: "bad"}, "line 3: bad"},
		{Problem{Msg: "bad"}, "bad"},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, tc.p.Error())
	}
	var err error = Problems{{Msg: "one"}, {Msg: "two"}}
	assert.Equal(t, "one\ntwo", err.Error())
	var ps Problems
	assert.True(t, errors.As(err, &ps))
}

// TestValidateChangesNothing validates configurations built in code, with
// the parts that Validate used to fill in (nil team credentials, secret
// files not read yet), and compares each with an identical one that was
// not validated.
func TestValidateChangesNothing(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "key"), []byte(okKey+"-from-file\n"), 0o600))
	build := func() *Config {
		cfg := base()
		cfg.Networks["devnet"] = nil
		cfg.Teams[1].Upstream = map[string]*Credentials{"testnet": nil, "mainnet": {APIKey: "k", APISecretFile: "missing"}}
		cfg.Teams[1].Keys = append(cfg.Teams[1].Keys,
			Key{ID: "file", SecretFile: filepath.Join(dir, "key")},
			Key{ID: "both", Secret: okKey, SecretFile: filepath.Join(dir, "key")})
		cfg.RateLimit.Redis.PasswordFile = filepath.Join(dir, "key")
		cfg.Log.Level = "loud"
		return cfg
	}
	cfg, want := build(), build()
	err := cfg.Validate()
	var ps Problems
	require.ErrorAs(t, err, &ps)
	assert.Equal(t, want, cfg, "Validate changed the Config")
	assert.Nil(t, cfg.Teams[1].Upstream["testnet"], "nil credentials stay nil")
	assert.Empty(t, cfg.Teams[1].Keys[1].Secret, "no file is read")

	// A secret file of a Config built in code is reported, not read.
	var got []string
	for _, p := range ps {
		if strings.Contains(p.Msg, "not read") {
			got = append(got, p.Path)
		}
	}
	assert.Equal(t, []string{
		"ratelimit.redis.password_file",
		"teams[1].upstream.mainnet.api_secret_file",
		"teams[1].keys[1].secret_file",
	}, got, "every problem:\n%v", err)

	again := cfg.Validate()
	assert.Equal(t, err, again, "the same problems again")
	assert.Equal(t, want, cfg)
}

// TestValidateTwiceAfterReading validates a Config whose secret files were
// read, as Parse reads them, twice: the problems of the files are reported
// each time, identically, and nothing changes.
func TestValidateTwiceAfterReading(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "empty"), []byte("\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "short"), []byte("short\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "good"), []byte(okKey+"\n"), 0o600))
	build := func() *Config {
		cfg := base()
		cfg.Teams[1].Keys = []Key{
			{ID: "empty", SecretFile: filepath.Join(dir, "empty")},
			{ID: "short", SecretFile: filepath.Join(dir, "short")},
			{ID: "missing", SecretFile: filepath.Join(dir, "missing")},
			{ID: "good", SecretFile: filepath.Join(dir, "good")},
		}
		cfg.readSecretFiles()
		return cfg
	}
	cfg, want := build(), build()
	first := cfg.Validate()
	require.NoError(t, os.Remove(filepath.Join(dir, "good")), "Validate reads no file")
	second := cfg.Validate()
	assert.Equal(t, first, second)
	assert.Equal(t, want, cfg)
	assert.Equal(t, []Secret{okKey}, cfg.Teams[1].Keys[3].Secrets())

	var ps Problems
	require.ErrorAs(t, second, &ps)
	require.Len(t, ps, 3, second.Error())
	assert.Equal(t, Problem{Path: "teams[1].keys[0].secret_file", Msg: "the file is empty"}, ps[0])
	assert.Equal(t, Problem{Path: "teams[1].keys[1].secret_file", Msg: "too short: 5 bytes, at least 16 are required"}, ps[1])
	assert.Equal(t, "teams[1].keys[2].secret_file", ps[2].Path)
	assert.Contains(t, ps[2].Msg, "no such file")
}

// FuzzRedisSentinelShape: any sentinel form is checked without a panic,
// and one with a master and distinct HOST:PORT addresses (port 1 to
// 65535) has no problem under ratelimit.redis, else at least one.
func FuzzRedisSentinelShape(f *testing.F) {
	f.Add("mymaster", "10.0.0.1:26379", "[::1]:26380")
	f.Add("", "10.0.0.1", "h:0")
	f.Add("m", "h:1", "h:1")
	f.Add("m", ":1", "h:99999")
	f.Fuzz(func(t *testing.T, master, a, b string) {
		cfg := base()
		cfg.RateLimit.Backend = BackendRedis
		cfg.RateLimit.Redis = Redis{Sentinel: &RedisSentinel{Master: master, Addrs: []string{a, b}}, FailMode: FailModeOpen}
		err := cfg.Validate()
		var redisProblems int
		var ps Problems
		if errors.As(err, &ps) {
			for _, p := range ps {
				if strings.HasPrefix(p.Path, "ratelimit.redis") {
					redisProblems++
				}
			}
		}
		// A host with a user or a path (an address given as a URL, or as
		// USER:PASSWORD@HOST:PORT) is not HOST:PORT.
		valid := func(s string) bool {
			host, port, err := net.SplitHostPort(s)
			n, perr := strconv.Atoi(port)
			return err == nil && host != "" && !strings.ContainsAny(host, "@/") && perr == nil && n >= 1 && n <= 65535
		}
		if master != "" && valid(a) && valid(b) && a != b {
			assert.Zero(t, redisProblems, "%v", err)
		} else {
			assert.Positive(t, redisProblems)
		}
	})
}
