package config

import (
	"math"
	"reflect"
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
	// DefaultSharing is sharing's default: the organisation's credential
	// shared by its teams, the stream shared under it.
	DefaultSharing = SharingOrganisation
	// DefaultSinceMax is realtime.since_max's default: 15 minutes of a
	// stream are 900 reports a client's replay holds in memory per stream
	// (about 1 MB), and, without an archive, 900 bulk calls at the fills'
	// share of the budget (a few minutes).
	DefaultSinceMax = 15 * time.Minute

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
func DemoRestrictedFeeds() StreamIDs {
	return StreamIDs{
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
		Tracing:   defaultTracing(),
		Archive:   defaultArchive(),
		Sharing:   DefaultSharing,
		Teams: []Team{
			{
				Name:     DemoTeam,
				Networks: []string{"mainnet", "testnet"},
				Feeds:    StreamIDs{AllFeedsWildcard},
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
		SinceMax:             DefaultSinceMax,
	}
}

func defaultTracing() Tracing {
	return Tracing{Protocol: TracingHTTP, SampleRatio: DefaultSampleRatio}
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

// defaultsFor returns the default of every key of c, shaped like c (its
// networks, teams and keys): the sections of the demo configuration, a
// network's upstream as defaultUpstream gives it (its url only for mainnet
// and testnet), no default below a team. It is the one table of defaults:
// Default starts from the same sections, and applyDefaults lays it under
// what the file gave.
func defaultsFor(c *Config) *Config {
	d := &Config{
		Server:    defaultServer(),
		Log:       Log{Level: DefaultLogLevel, Format: DefaultLogFormat},
		Networks:  make(map[string]*Network, len(c.Networks)),
		Auth:      defaultAuth(),
		Cache:     defaultCache(),
		RateLimit: defaultRateLimit(),
		Realtime:  defaultRealtime(),
		Tracing:   defaultTracing(),
		Archive:   defaultArchive(),
		Sharing:   DefaultSharing,
		Teams:     make([]Team, len(c.Teams)),
	}
	for name := range c.Networks {
		url := ""
		if knownNetworks[name] {
			url = EmbeddedURL
		}
		d.Networks[name] = &Network{Upstream: defaultUpstream(url)}
	}
	for i, t := range c.Teams {
		d.Teams[i].Keys = make([]Key, len(t.Keys))
	}
	if r := &c.RateLimit.Redis; r.Sentinel != nil || r.Cluster != nil {
		d.RateLimit.Redis.URL = "" // a single node's default, not given with another mode
	}
	return d
}

// applyDefaults fills every key that the file omitted from defaultsFor.
// Presence, not the zero value, decides, so that an explicit 0, false or ""
// is kept (and rejected by Validate where it is not allowed).
func (c *Config) applyDefaults() {
	for name, n := range c.Networks {
		if n == nil { // "mainnet:" with nothing after it
			c.Networks[name] = &Network{}
		}
	}
	for i := range c.Teams {
		for name, cr := range c.Teams[i].Upstream {
			if cr == nil {
				c.Teams[i].Upstream[name] = &Credentials{}
			}
		}
	}
	f := filler{has: c.src.has}
	f.fill(reflect.ValueOf(c).Elem(), reflect.ValueOf(defaultsFor(c)).Elem(), "")
}

// normalize lower-cases the values that are compared case-insensitively:
// host names (stream IDs are decoded in canonical form, StreamIDs).
func (c *Config) normalize() {
	for _, n := range c.Networks {
		for i, h := range n.Hosts {
			n.Hosts[i] = strings.ToLower(h)
		}
	}
}

// filler lays defaults under the keys a file gave.
type filler struct{ has func(path string) bool }

var rateType = reflect.TypeFor[Rate]()

// fill sets every key under path that the file omitted, in dst, to its
// default in def, a value of the same type. A mapping (struct) is filled
// key by key, a map entry or list item that both have, item by item; a
// block that the file omitted (a nil pointer) gets no defaults below it.
func (f filler) fill(dst, def reflect.Value, path string) {
	t := dst.Type()
	switch {
	case t == rateType:
		f.rate(dst.Addr().Interface().(*Rate), def.Interface().(Rate), path)
	case t.Kind() == reflect.Pointer && structType(t):
		if !dst.IsNil() && !def.IsNil() {
			f.fill(dst.Elem(), def.Elem(), path)
		}
	case t.Kind() == reflect.Struct:
		for i := range t.NumField() {
			if key, ok := yamlKey(t.Field(i)); ok {
				f.fill(dst.Field(i), def.Field(i), joinKey(path, key))
			}
		}
	case t.Kind() == reflect.Map && structType(t.Elem()):
		iter := dst.MapRange()
		for iter.Next() {
			if d := def.MapIndex(iter.Key()); d.IsValid() {
				f.fill(iter.Value(), d, joinKey(path, iter.Key().String()))
			}
		}
	case t.Kind() == reflect.Slice && structType(t.Elem()):
		for i := range min(dst.Len(), def.Len()) {
			f.fill(dst.Index(i), def.Index(i), itemPath(path, i))
		}
	case !f.has(path):
		dst.Set(def)
	}
}

// rate fills an omitted rps with v.RPS, and an omitted burst with v.Burst
// when rps was omitted too, else with rps rounded up (at least 1).
func (d filler) rate(f *Rate, v Rate, path string) {
	rps, burst := rateKeys()
	hasRPS := d.has(joinKey(path, rps))
	if !hasRPS {
		f.RPS = v.RPS
	}
	if !d.has(joinKey(path, burst)) {
		if hasRPS {
			f.Burst = burstFor(f.RPS)
		} else {
			f.Burst = v.Burst
		}
	}
}

// rateKeys returns the keys of a Rate's fields.
func rateKeys() (rps, burst string) {
	r, _ := yamlKey(rateType.Field(0))
	b, _ := yamlKey(rateType.Field(1))
	return r, b
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
