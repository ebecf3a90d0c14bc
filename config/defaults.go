package config

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Special values.
const (
	// EmbeddedURL as an upstream URL starts the built-in simulator.
	EmbeddedURL = "embedded"
	// AllFeedsWildcard as a team's only feed grants every stream.
	AllFeedsWildcard = "*"
)

// The defaults of omitted keys, as documented in config.example.yaml.
const (
	DefaultAdminListen       = "127.0.0.1:9090"
	DefaultShutdownTimeout   = 15 * time.Second
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultIdleTimeout       = 120 * time.Second
	DefaultReadTimeout       = 30 * time.Second
	DefaultWriteTimeout      = 60 * time.Second

	DefaultLogLevel  = LogLevelInfo
	DefaultLogFormat = LogFormatJSON

	DefaultUpstreamTimeout = 5 * time.Second
	DefaultRetries         = 2
	DefaultBudgetRPS       = 10
	DefaultBudgetBurst     = 10
	DefaultBudgetMargin    = 20 * time.Millisecond
	DefaultMaxBulk         = 100

	DefaultWSMaxConnections     = 6
	DefaultWSFeedsPerConnection = 50
	DefaultClientQueue          = 256
	DefaultPingInterval         = 15 * time.Second
	DefaultTeamConnections      = 100
	DefaultRealtimeGrace        = 30 * time.Second
	DefaultShareLease           = 3 * time.Second
	DefaultDrainDelay           = 5 * time.Second
	DefaultResumeWindow         = 60 * time.Second
	DefaultResumeRecordsPerTeam = 200
	DefaultResumeRecords        = 5000
	DefaultBackfillMax          = 2 * time.Minute

	DefaultMaxSkew = 5 * time.Second
	// DefaultReplayGrace is the default of auth.replay_grace.
	DefaultReplayGrace = time.Second
	// DefaultAnonymousRPS and DefaultAnonymousBurst are the default of
	// auth.anonymous_rate, per client address.
	DefaultAnonymousRPS   = 20
	DefaultAnonymousBurst = 40
	// DefaultReplayMaxEntries is the default of auth.replay_max_entries.
	DefaultReplayMaxEntries = 1_000_000

	DefaultCacheMaxBytes  = 256 * MiB
	DefaultCatalogTTL     = 300 * time.Second
	DefaultLatestTTL      = 500 * time.Millisecond
	DefaultLatestMaxStale = 3 * time.Second
	DefaultLatestMaxWait  = time.Second
	DefaultNegativeTTL    = time.Second

	// DefaultSharedTTL, DefaultSharedMaxEntryBytes and DefaultSharedLease
	// are the defaults of cache.shared.ttl, max_entry_bytes and lease.
	DefaultSharedTTL           = 24 * time.Hour
	DefaultSharedMaxEntryBytes = 1 * MiB
	DefaultSharedLease         = 2 * time.Second

	DefaultRateLimitBackend = BackendMemory
	DefaultRedisURL         = "redis://127.0.0.1:6379/0"
	DefaultRedisFailMode    = FailModeOpen
)

// The demo configuration's teams and keys (see Default). These values are
// published in the source code: they are for trying streamgate out on one
// machine, never for a deployment. Validate refuses them on a team that can
// reach an upstream other than the simulator or a loopback address.
const (
	// DemoTeam may read every stream on both networks.
	DemoTeam = "demo"
	// DemoKeyID and DemoKeySecret are the demo team's key.
	DemoKeyID     = "00000000-0000-4000-8000-00000000de00"
	DemoKeySecret = "streamgate-demo-secret-not-for-production"

	// ResearchTeam may use testnet only, with a tighter rate and a daily
	// quota.
	ResearchTeam = "research"
	// ResearchKeyID and ResearchKeySecret are the research team's key.
	ResearchKeyID     = "00000000-0000-4000-8000-00000000de01"
	ResearchKeySecret = "streamgate-research-secret-not-for-production"
)

// DemoRestrictedFeeds returns the stream IDs that ResearchTeam may read in
// the demo configuration, to show an entitlement at work: the exchange
// prices of BTC/USD, ETH/USD and LINK/USD, EUR/USD and Apple's equity
// price, in that order. They are the embedded simulator's restricted
// streams (simulator.RestrictedStreams, a test in the simulator package
// keeps the two lists equal) and exist on both of its networks. Each call
// returns a new slice.
func DemoRestrictedFeeds() []string {
	return []string{
		"0x000375bc0f8bd989bacd3c5e4bd7037df08f61b7867d6501df7dd9f574d128a8", // BTC/USD
		"0x00030a92e5497ef511ec2966ed19b6b2403c92c21209047af66946bece4e6d28", // ETH/USD
		"0x0003d0c2328da25f30fcc344a38f769eb3692bcd13533069a58ea6cf51009a15", // LINK/USD
		"0x000b3c5c9d2948fbccb8d69c45bb2c527d0b7b2e0b43630af47ebd10a8b8e67f", // EUR/USD
		"0x000b32962b6b2da451d8327299837915bc3e95f04704f1db85c99d4118f244ab", // AAPL/USD
	}
}

// Default returns the demo configuration that streamgate runs with when it
// is given no configuration: mainnet on 127.0.0.1:8080 and testnet on
// 127.0.0.1:8081, both served by the embedded simulator, the admin
// listener on 127.0.0.1:9090, in-memory rate limits, and two teams:
//
//   - DemoTeam, key DemoKeyID / DemoKeySecret: both networks, every
//     stream, 50 requests per second (burst 100).
//   - ResearchTeam, key ResearchKeyID / ResearchKeySecret: testnet only,
//     the five streams of DemoRestrictedFeeds, 5 requests per second
//     (burst 10), 10000 requests per UTC day.
//
// Every listener is on loopback. Each call returns a new Config.
func Default() *Config {
	return &Config{
		Server: defaultServer(),
		Log:    Log{Level: DefaultLogLevel, Format: DefaultLogFormat},
		Networks: map[string]*Network{
			"mainnet": {Listen: "127.0.0.1:8080", Upstream: defaultUpstream(EmbeddedURL)},
			"testnet": {Listen: "127.0.0.1:8081", Upstream: defaultUpstream(EmbeddedURL)},
		},
		Auth:      defaultAuth(),
		Cache:     defaultCache(),
		RateLimit: defaultRateLimit(),
		Realtime:  defaultRealtime(),
		Tracing:   Tracing{Protocol: TracingHTTP, SampleRatio: DefaultSampleRatio},
		Teams: []Team{
			{
				Name:     DemoTeam,
				Networks: []string{"mainnet", "testnet"},
				Feeds:    []string{AllFeedsWildcard},
				Rate:     Rate{RPS: 50, Burst: 100},
				Keys:     []Key{{ID: DemoKeyID, Secret: DemoKeySecret}},
			},
			{
				Name:       ResearchTeam,
				Networks:   []string{"testnet"},
				Feeds:      DemoRestrictedFeeds(),
				Rate:       Rate{RPS: 5, Burst: 10},
				DailyQuota: 10000,
				Keys:       []Key{{ID: ResearchKeyID, Secret: ResearchKeySecret}},
			},
		},
	}
}

func defaultServer() Server {
	return Server{
		AdminListen:       DefaultAdminListen,
		ShutdownTimeout:   DefaultShutdownTimeout,
		ReadHeaderTimeout: DefaultReadHeaderTimeout,
		IdleTimeout:       DefaultIdleTimeout,
		ReadTimeout:       DefaultReadTimeout,
		WriteTimeout:      DefaultWriteTimeout,
	}
}

func defaultUpstream(url string) Upstream {
	return Upstream{
		URL:     url,
		Timeout: DefaultUpstreamTimeout,
		Retries: DefaultRetries,
		Budget:  Rate{RPS: DefaultBudgetRPS, Burst: DefaultBudgetBurst},

		BudgetMargin: DefaultBudgetMargin,
		MaxBulk:      DefaultMaxBulk,

		WSMaxConnections:     DefaultWSMaxConnections,
		WSFeedsPerConnection: DefaultWSFeedsPerConnection,
	}
}

func defaultAuth() Auth {
	return Auth{
		MaxSkew: DefaultMaxSkew, ReplayProtection: true, ReplayGrace: DefaultReplayGrace, AnonymousCatalog: true,
		AnonymousRate:    Rate{RPS: DefaultAnonymousRPS, Burst: DefaultAnonymousBurst},
		ReplayMaxEntries: DefaultReplayMaxEntries,
	}
}

func defaultCache() Cache {
	return Cache{
		MaxBytes:          DefaultCacheMaxBytes,
		CatalogTTL:        DefaultCatalogTTL,
		LatestTTL:         DefaultLatestTTL,
		LatestMaxStale:    DefaultLatestMaxStale,
		LatestMaxWait:     DefaultLatestMaxWait,
		LatestBulkRefresh: true,
		NegativeTTL:       DefaultNegativeTTL,
		Shared: SharedCache{Backend: SharedOff, TTL: DefaultSharedTTL,
			MaxEntryBytes: DefaultSharedMaxEntryBytes, Lease: DefaultSharedLease},
	}
}

// DefaultClientOrigins returns the default of realtime.client_origins: the
// names the upstream's own HA mode uses.
func DefaultClientOrigins() []string { return []string{"001", "002"} }

func defaultRealtime() Realtime {
	return Realtime{
		ClientQueue:          DefaultClientQueue,
		PingInterval:         DefaultPingInterval,
		TeamConnections:      DefaultTeamConnections,
		Grace:                DefaultRealtimeGrace,
		LatestFromStream:     true,
		Share:                true,
		ShareLease:           DefaultShareLease,
		ClientOrigins:        DefaultClientOrigins(),
		DrainDelay:           DefaultDrainDelay,
		ResumeWindow:         DefaultResumeWindow,
		ResumeRecordsPerTeam: DefaultResumeRecordsPerTeam,
		ResumeRecords:        DefaultResumeRecords,
		BackfillMax:          DefaultBackfillMax,
	}
}

func defaultRateLimit() RateLimit {
	return RateLimit{
		Backend: DefaultRateLimitBackend,
		Redis:   Redis{URL: DefaultRedisURL, FailMode: DefaultRedisFailMode},
	}
}

// knownNetworks are the network names whose upstream URL defaults to the
// simulator; any other network must give its upstream URL.
var knownNetworks = map[string]bool{"mainnet": true, "testnet": true}

// applyDefaults fills every key that the file omitted. Presence, not the
// zero value, decides, so that an explicit 0, false or "" is kept (and
// rejected by Validate where it is not allowed).
func (c *Config) applyDefaults() {
	d := defaulter{has: c.src.has}

	s, ds := &c.Server, defaultServer()
	d.str("server.admin_listen", &s.AdminListen, ds.AdminListen)
	d.dur("server.shutdown_timeout", &s.ShutdownTimeout, ds.ShutdownTimeout)
	d.dur("server.read_header_timeout", &s.ReadHeaderTimeout, ds.ReadHeaderTimeout)
	d.dur("server.idle_timeout", &s.IdleTimeout, ds.IdleTimeout)
	d.dur("server.read_timeout", &s.ReadTimeout, ds.ReadTimeout)
	d.dur("server.write_timeout", &s.WriteTimeout, ds.WriteTimeout)

	enum(d, "log.level", &c.Log.Level, DefaultLogLevel)
	enum(d, "log.format", &c.Log.Format, DefaultLogFormat)

	for name, n := range c.Networks {
		if n == nil { // "mainnet:" with nothing after it
			n = &Network{}
			c.Networks[name] = n
		}
		p, u := "networks."+name+".upstream", &n.Upstream
		du := defaultUpstream(EmbeddedURL)
		if knownNetworks[name] {
			d.str(p+".url", &u.URL, du.URL)
		}
		d.dur(p+".timeout", &u.Timeout, du.Timeout)
		d.num(p+".retries", &u.Retries, du.Retries)
		d.rate(p+".budget", &u.Budget, du.Budget)
		d.dur(p+".budget_margin", &u.BudgetMargin, du.BudgetMargin)
		d.num(p+".max_bulk", &u.MaxBulk, du.MaxBulk)
		d.num(p+".ws_max_connections", &u.WSMaxConnections, du.WSMaxConnections)
		d.num(p+".ws_feeds_per_connection", &u.WSFeedsPerConnection, du.WSFeedsPerConnection)
	}

	d.str("tracing.protocol", &c.Tracing.Protocol, TracingHTTP)
	if !d.has("tracing.sample_ratio") {
		c.Tracing.SampleRatio = DefaultSampleRatio
	}

	a, da := &c.Auth, defaultAuth()
	d.dur("auth.max_skew", &a.MaxSkew, da.MaxSkew)
	d.flag("auth.replay_protection", &a.ReplayProtection, da.ReplayProtection)
	d.dur("auth.replay_grace", &a.ReplayGrace, da.ReplayGrace)
	d.flag("auth.anonymous_catalog", &a.AnonymousCatalog, da.AnonymousCatalog)
	d.rate("auth.anonymous_rate", &a.AnonymousRate, da.AnonymousRate)
	d.num("auth.replay_max_entries", &a.ReplayMaxEntries, da.ReplayMaxEntries)

	ca, dc := &c.Cache, defaultCache()
	if !d.has("cache.max_bytes") {
		ca.MaxBytes = dc.MaxBytes
	}
	d.dur("cache.catalog_ttl", &ca.CatalogTTL, dc.CatalogTTL)
	d.dur("cache.latest_ttl", &ca.LatestTTL, dc.LatestTTL)
	d.dur("cache.latest_max_stale", &ca.LatestMaxStale, dc.LatestMaxStale)
	d.dur("cache.latest_max_wait", &ca.LatestMaxWait, dc.LatestMaxWait)
	d.flag("cache.latest_bulk_refresh", &ca.LatestBulkRefresh, dc.LatestBulkRefresh)
	d.dur("cache.negative_ttl", &ca.NegativeTTL, dc.NegativeTTL)
	enum(d, "cache.shared.backend", &ca.Shared.Backend, dc.Shared.Backend)
	d.dur("cache.shared.ttl", &ca.Shared.TTL, dc.Shared.TTL)
	if !d.has("cache.shared.max_entry_bytes") {
		ca.Shared.MaxEntryBytes = dc.Shared.MaxEntryBytes
	}
	d.dur("cache.shared.lease", &ca.Shared.Lease, dc.Shared.Lease)

	r, dr := &c.RateLimit, defaultRateLimit()
	enum(d, "ratelimit.backend", &r.Backend, dr.Backend)
	if !d.has("ratelimit.redis.sentinel") && !d.has("ratelimit.redis.cluster") {
		d.str("ratelimit.redis.url", &r.Redis.URL, dr.Redis.URL)
	}
	enum(d, "ratelimit.redis.fail_mode", &r.Redis.FailMode, dr.Redis.FailMode)

	rt, drt := &c.Realtime, defaultRealtime()
	d.num("realtime.client_queue", &rt.ClientQueue, drt.ClientQueue)
	d.dur("realtime.ping_interval", &rt.PingInterval, drt.PingInterval)
	d.num("realtime.team_connections", &rt.TeamConnections, drt.TeamConnections)
	d.dur("realtime.grace", &rt.Grace, drt.Grace)
	d.flag("realtime.latest_from_stream", &rt.LatestFromStream, drt.LatestFromStream)
	d.flag("realtime.share", &rt.Share, drt.Share)
	d.dur("realtime.share_lease", &rt.ShareLease, drt.ShareLease)
	if !d.has("realtime.client_origins") {
		rt.ClientOrigins = drt.ClientOrigins
	}
	d.dur("realtime.drain_delay", &rt.DrainDelay, drt.DrainDelay)
	d.dur("realtime.resume_window", &rt.ResumeWindow, drt.ResumeWindow)
	d.num("realtime.resume_records_per_team", &rt.ResumeRecordsPerTeam, drt.ResumeRecordsPerTeam)
	d.num("realtime.resume_records", &rt.ResumeRecords, drt.ResumeRecords)
	d.dur("realtime.backfill_max", &rt.BackfillMax, drt.BackfillMax)

	for i := range c.Teams {
		t := &c.Teams[i]
		p := teamPath(i)
		d.rate(p+".rate", &t.Rate, Rate{})
		for name, cr := range t.Upstream {
			if cr == nil {
				t.Upstream[name] = &Credentials{}
			}
		}
		for j := range t.Keys {
			d.rate(keyPath(i, j)+".rate", &t.Keys[j].Rate, Rate{})
		}
	}
}

// normalize lower-cases the values that are compared case-insensitively.
func (c *Config) normalize() {
	for _, n := range c.Networks {
		for i, h := range n.Hosts {
			n.Hosts[i] = strings.ToLower(h)
		}
	}
	for i := range c.Teams {
		for j, f := range c.Teams[i].Feeds {
			c.Teams[i].Feeds[j] = strings.ToLower(f)
		}
	}
}

type defaulter struct{ has func(path string) bool }

func (d defaulter) str(path string, f *string, v string) {
	if !d.has(path) {
		*f = v
	}
}

// enum is str for an enumerated setting.
func enum[T ~string](d defaulter, path string, f *T, v T) {
	if !d.has(path) {
		*f = v
	}
}

func (d defaulter) dur(path string, f *time.Duration, v time.Duration) {
	if !d.has(path) {
		*f = v
	}
}

func (d defaulter) num(path string, f *int, v int) {
	if !d.has(path) {
		*f = v
	}
}

func (d defaulter) flag(path string, f *bool, v bool) {
	if !d.has(path) {
		*f = v
	}
}

// rate fills an omitted rps with v.RPS, and an omitted burst with v.Burst
// when rps was omitted too, else with rps rounded up (at least 1).
func (d defaulter) rate(path string, f *Rate, v Rate) {
	hasRPS := d.has(path + ".rps")
	if !hasRPS {
		f.RPS = v.RPS
	}
	if !d.has(path + ".burst") {
		if hasRPS {
			f.Burst = burstFor(f.RPS)
		} else {
			f.Burst = v.Burst
		}
	}
}

func burstFor(rps float64) int {
	switch {
	case !(rps > 0): // also NaN
		return 0
	case rps >= math.MaxInt32:
		return math.MaxInt32
	default:
		return max(1, int(math.Ceil(rps)))
	}
}

func teamPath(i int) string   { return fmt.Sprintf("teams[%d]", i) }
func keyPath(i, j int) string { return fmt.Sprintf("teams[%d].keys[%d]", i, j) }
