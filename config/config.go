// Package config is streamgate's configuration: the YAML schema as typed
// structs, the defaults of every omitted key, ${VAR} expansion from the
// environment, and a validation that reports every problem at once.
//
// A configuration is read with Load or Parse, or taken from Default, the
// demo configuration. Both Load and Parse fill defaults, read secret files
// and validate, so a *Config they return is complete and valid; Validate
// itself only checks. RestartOnly tells which changed settings a reload
// cannot apply. The key names are a contract with the files operators
// write: config.example.yaml at the repository root documents each one with
// its default, and ARCHITECTURE.md describes how the gateway uses them.
//
// Secrets are of type Secret, which prints, logs and marshals as REDACTED.
// Logging a whole Config, Team or Key therefore never leaks a secret.
//
// A Config is not modified after Load or Parse return and is then safe for
// concurrent reads.
package config

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"streamgate/don"
)

// Config is the whole configuration.
type Config struct {
	Server    Server              `yaml:"server" json:"server"`
	Log       Log                 `yaml:"log" json:"log"`
	Networks  map[string]*Network `yaml:"networks" json:"networks"`
	Auth      Auth                `yaml:"auth" json:"auth"`
	Cache     Cache               `yaml:"cache" json:"cache"`
	RateLimit RateLimit           `yaml:"ratelimit" json:"ratelimit"`
	Realtime  Realtime            `yaml:"realtime" json:"realtime"`
	Tracing   Tracing             `yaml:"tracing" json:"tracing"`
	Archive   Archive             `yaml:"archive" json:"archive"`
	Teams     []Team              `yaml:"teams" json:"teams"`

	// src describes where the configuration came from; nil for a Config
	// built in code.
	src *source
}

// Server holds the process-wide HTTP settings.
type Server struct {
	// AdminListen is the host:port of the admin listener that serves
	// /metrics, /healthz and /readyz. Default "127.0.0.1:9090". An explicit
	// empty string ("") disables the admin listener.
	AdminListen string `yaml:"admin_listen" json:"admin_listen"`
	// ShutdownTimeout bounds the drain after SIGTERM. Default 15s.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout" json:"shutdown_timeout"`
	// ReadHeaderTimeout is http.Server.ReadHeaderTimeout of every listener.
	// Default 10s.
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout" json:"read_header_timeout"`
	// IdleTimeout is http.Server.IdleTimeout of every listener. Default 120s.
	IdleTimeout time.Duration `yaml:"idle_timeout" json:"idle_timeout"`
	// ReadTimeout is http.Server.ReadTimeout of every listener: the whole
	// request, headers and any body, must arrive within it. Default 30s.
	ReadTimeout time.Duration `yaml:"read_timeout" json:"read_timeout"`
	// WriteTimeout is http.Server.WriteTimeout of every listener: the
	// answer must be written within it from the end of the request's
	// headers, including the upstream call. It must exceed the longest
	// upstream call with its retries. Default 60s. A WebSocket connection
	// is not bound by either timeout once upgraded.
	WriteTimeout time.Duration `yaml:"write_timeout" json:"write_timeout"`
	// AdminToken, when set, is required as "Authorization: Bearer TOKEN"
	// by the admin listener's status page (/) and /status.json, which then
	// answer 401 without it; /metrics, /healthz and /readyz stay open.
	// After loading it also holds the contents of AdminTokenFile. Default
	// "" (no token: keep the admin listener on loopback).
	AdminToken Secret `yaml:"admin_token" json:"admin_token"`
	// AdminTokenFile is a file holding the token, read at load time like
	// Credentials.APISecretFile. Default "".
	AdminTokenFile string `yaml:"admin_token_file" json:"admin_token_file"`
	// Pprof, when true, serves the Go runtime's profiles (net/http/pprof)
	// on the admin listener under /debug/pprof/, behind AdminToken when
	// one is set. It needs AdminListen, and AdminToken when AdminListen is
	// not on loopback. A profile costs CPU while it is taken; nothing is
	// spent while none is asked for. Default false.
	Pprof bool `yaml:"pprof" json:"pprof"`
	// AdminTLS, when set, serves the admin listener over TLS (see TLS).
	// Default none (plain HTTP: keep the admin listener on loopback or a
	// private network).
	AdminTLS *TLS `yaml:"admin_tls" json:"admin_tls"`

	file fileState
}

// Log configures the process logger.
type Log struct {
	// Level is one of debug, info, warn, error. Default "info".
	Level LogLevel `yaml:"level" json:"level"`
	// Format is json or console. Default "json".
	Format LogFormat `yaml:"format" json:"format"`
	// Audit, when true, logs one line per report read: team, key, network
	// and streams. Default false.
	Audit bool `yaml:"audit" json:"audit"`
}

// Network is one upstream network (mainnet, testnet, ...) and the listener
// its clients call. A client picks a network by the address it calls: the
// listen address, or a Host name when several networks share a listener.
type Network struct {
	// Listen is the host:port this network is served on. Required.
	// Several networks may share one address if each of them lists Hosts.
	Listen string `yaml:"listen" json:"listen"`
	// Hosts are the Host names (no scheme, no port; lower-cased at load)
	// routed to this network on a shared listener. Default none.
	Hosts []string `yaml:"hosts" json:"hosts"`
	// TLS, when set, serves this network over HTTPS and WSS (see TLS).
	// Networks sharing a listener share its TLS block: give them the same
	// one. Default none (plain HTTP).
	TLS *TLS `yaml:"tls" json:"tls"`
	// PassThrough lists extra paths under /api/v1/ that are forwarded to
	// the upstream as they are (GET or HEAD, authenticated, re-signed with
	// the organisation's credential, within the budget), for upstream
	// endpoints the gateway does not know. Every other unknown path is 404
	// at the gateway. Exact paths, without query. Default none.
	PassThrough []string `yaml:"pass_through" json:"pass_through"`
	// Upstream is the service this network's requests go to.
	Upstream Upstream `yaml:"upstream" json:"upstream"`
	// Verify is how the network checks the DON's signatures of the reports
	// it receives. Reloaded by SIGHUP (the file too).
	Verify Verify `yaml:"verify" json:"verify"`
}

// The verification modes.
const (
	// VerifyEnforce: a report that does not verify is never cached or
	// served: the client gets 502, a stream frame is dropped.
	VerifyEnforce = "enforce"
	// VerifyReport: such a report is served, counted and logged.
	VerifyReport = "report"
	// VerifyOff: reports are not checked.
	VerifyOff = "off"
)

// Verify is a network's report verification: the DON configurations it
// trusts and what it does with a report that does not verify.
type Verify struct {
	// Mode is enforce, report or off; "" (the default) means enforce when
	// DONs or DONsFile are given or the upstream is embedded (whose DON is
	// the simulator's), else off: see Network.VerifyMode.
	Mode string `yaml:"mode" json:"mode"`
	// DONs are the DON configurations to trust, inline.
	DONs []DON `yaml:"dons" json:"dons"`
	// DONsFile is a YAML (or JSON) file holding a list of DON
	// configurations, read at every load (so SIGHUP re-reads it), trusted
	// with DONs. A relative path is relative to the configuration file.
	DONsFile string `yaml:"dons_file" json:"dons_file"`

	fileDONs []DON
	file     fileState
}

// DON is one DON configuration, as the Verifier contract's ConfigSet event
// states it.
type DON struct {
	// ConfigDigest is 0x and 64 hex digits: the first word of the context
	// of every report the configuration signs.
	ConfigDigest string `yaml:"config_digest" json:"config_digest"`
	// F is the number of faulty signers tolerated: a report needs more
	// than F signatures.
	F int `yaml:"f" json:"f"`
	// Signers are the signer addresses, 0x and 40 hex digits.
	Signers []string `yaml:"signers" json:"signers"`
}

// AllDONs returns the DON configurations of v, inline and from its file.
func (v *Verify) AllDONs() []DON { return append(append([]DON(nil), v.DONs...), v.fileDONs...) }

// VerifyMode returns the verification mode in force: Verify.Mode, or its
// default.
func (n *Network) VerifyMode() string {
	switch {
	case n.Verify.Mode != "":
		return n.Verify.Mode
	case n.Verify.Configured() || n.Upstream.Embedded():
		return VerifyEnforce
	}
	return VerifyOff
}

// Verifier returns the don.Verifier of the DON configurations of v (inline
// and from its file), or an error for one that does not parse.
func (v *Verify) Verifier() (*don.Verifier, error) {
	var cs []don.Config
	for i, d := range v.AllDONs() {
		dg, err := don.ParseDigest(d.ConfigDigest)
		if err != nil {
			return nil, fmt.Errorf("DON configuration %d: %w", i, err)
		}
		c := don.Config{Digest: dg, F: d.F}
		for _, s := range d.Signers {
			a, err := don.ParseAddress(s)
			if err != nil {
				return nil, fmt.Errorf("DON configuration %d: %w", i, err)
			}
			c.Signers = append(c.Signers, a)
		}
		cs = append(cs, c)
	}
	return don.NewVerifier(cs)
}

// Configured reports whether v names any DON configuration.
func (v *Verify) Configured() bool { return len(v.DONs) > 0 || v.DONsFile != "" }

// Upstream is the Data Streams service behind a network, and how the
// gateway calls it.
type Upstream struct {
	// URL is "embedded", which starts the built-in simulator (a build with
	// the tag nosimulator has none and refuses it: server.CheckBuild), or the
	// absolute http(s) URL of the service, without path, query or user
	// information (e.g. https://api.dataengine.chain.link). Default
	// "embedded" for the networks named mainnet and testnet; required for
	// any other network.
	URL string `yaml:"url" json:"url"`
	// Credentials are the organisation's API key and secret, required for a
	// non-embedded upstream. For an embedded one they are optional and,
	// when given, are the credentials the simulator accepts.
	Credentials `yaml:",inline"`
	// Timeout bounds each attempt. Default 5s.
	Timeout time.Duration `yaml:"timeout" json:"timeout"`
	// Retries is the number of extra attempts after a 500, 502, 503 or
	// 504, a timeout or a transport failure (never after a 429, which
	// pauses the endpoint). Default 2; 0 disables retries.
	Retries int `yaml:"retries" json:"retries"`
	// Budget is the rate of upstream calls per endpoint, shared by all
	// teams: at most RPS calls in any one second, the calls spaced at
	// least 1/RPS + BudgetMargin apart, so that an upstream counting per
	// calendar second, per sliding second or as a token bucket of burst 1
	// never finds its limit exceeded. Burst no longer lets calls go out
	// faster than that (it must still be at least 1; values above 1 change
	// nothing). After an upstream 429 the rate in force halves and
	// recovers step by step. Default {rps: 10, burst: 10}.
	Budget Rate `yaml:"budget" json:"budget"`
	// BudgetMargin is added to the interval 1/rps between two upstream
	// calls of an endpoint: a safety margin for an upstream that sees the
	// calls closer together than they were sent (network and scheduling
	// jitter). Default 20ms; 0 to 1s.
	BudgetMargin time.Duration `yaml:"budget_margin" json:"budget_margin"`
	// MaxBulk is the largest number of streams in one upstream bulk call;
	// larger requests are split. Default 100.
	MaxBulk int `yaml:"max_bulk" json:"max_bulk"`
	// WSURL is the upstream's WebSocket address, ws:// or wss://, host
	// only (e.g. wss://ws.dataengine.chain.link). An embedded upstream
	// needs none. Without it /api/v1/ws answers a clear error: the
	// gateway never passes a WebSocket through one to one. Default none.
	WSURL string `yaml:"ws_url" json:"ws_url"`
	// WSMaxConnections bounds the upstream WebSocket connections of this
	// network, all origins and feed chunks together. The upstream allows
	// 20 per user; several replicas must fit. Default 6.
	WSMaxConnections int `yaml:"ws_max_connections" json:"ws_max_connections"`
	// WSFeedsPerConnection is the most feeds on one upstream connection
	// (about 68 bytes each in its request line). Default 50.
	WSFeedsPerConnection int `yaml:"ws_feeds_per_connection" json:"ws_feeds_per_connection"`
	// WSPinned are streams the gateway always carries on its upstream
	// WebSocket, so that their latest reports are answered from the
	// stream; stream IDs in any case, kept in canonical form. Default none.
	WSPinned StreamIDs `yaml:"ws_pinned" json:"ws_pinned"`
}

// Embedded reports whether the upstream is the built-in simulator.
func (u Upstream) Embedded() bool { return u.URL == EmbeddedURL }

// Credentials are an API key and its secret, given inline (APISecret) or
// as a file (APISecretFile), exactly one of the two.
type Credentials struct {
	// APIKey is the key ID sent in the Authorization header.
	APIKey string `yaml:"api_key" json:"api_key"`
	// APISecret is the HMAC secret. After loading it also holds the
	// contents of APISecretFile.
	APISecret Secret `yaml:"api_secret" json:"api_secret"`
	// APISecretFile is a file holding the secret, read at load time with
	// trailing line breaks removed. A relative path is relative to the
	// directory of the configuration file (Load) or the working directory
	// (Parse).
	APISecretFile string `yaml:"api_secret_file" json:"api_secret_file"`

	file fileState
}

// Secret returns the secret of the credentials: APISecret, or the contents
// of APISecretFile once read. It is empty when neither is set.
func (c Credentials) Secret() Secret { return c.APISecret }

// Rate is a token bucket: RPS tokens per second, at most Burst at once.
type Rate struct {
	// RPS is the sustained rate in requests per second; fractions are
	// allowed. For a team or a key, 0 means no limit.
	RPS float64 `yaml:"rps" json:"rps"`
	// Burst is the bucket size in requests. When omitted it defaults to
	// RPS rounded up (at least 1), or 0 when RPS is 0.
	Burst int `yaml:"burst" json:"burst"`
}

// Unlimited reports whether the rate sets no limit (RPS is 0).
func (r Rate) Unlimited() bool { return r.RPS == 0 }

// Auth configures the checks made on client requests.
type Auth struct {
	// MaxSkew is the largest difference allowed between a request's
	// X-Authorization-Timestamp and the gateway's clock. Default 5s.
	MaxSkew time.Duration `yaml:"max_skew" json:"max_skew"`
	// ReplayProtection refuses a signature seen before within MaxSkew.
	// Default true.
	ReplayProtection bool `yaml:"replay_protection" json:"replay_protection"`
	// ReplayGrace is how long after its first use a signature may be used
	// again: identical requests that a client sends at once (the official
	// SDKs do, from parallel calls) carry identical signatures. Later uses,
	// up to MaxSkew, are refused as replays. Default 1s; 0 refuses every
	// repeat.
	ReplayGrace time.Duration `yaml:"replay_grace" json:"replay_grace"`
	// AnonymousCatalog serves the unsigned catalog (/api/v1/discovery)
	// without authentication, as the upstream does. Default true.
	AnonymousCatalog bool `yaml:"anonymous_catalog" json:"anonymous_catalog"`
	// AnonymousRate limits unsigned catalog requests per client address
	// (the connection's IP address; X-Forwarded-For is not trusted).
	// Default {rps: 20, burst: 40}; rps 0 lifts the limit.
	AnonymousRate Rate `yaml:"anonymous_rate" json:"anonymous_rate"`
	// ReplayMaxEntries bounds the replica's record of signatures seen
	// (about 64 bytes each). Only admitted requests are recorded, so it
	// holds about the admitted rate times 2×max_skew; when it is full, new
	// signatures are refused with 503 rather than accepted unrecorded.
	// Default 1000000.
	ReplayMaxEntries int `yaml:"replay_max_entries" json:"replay_max_entries"`
}

// Cache bounds the response cache and sets its lifetimes.
type Cache struct {
	// MaxBytes bounds the cache's memory. Default 256MiB.
	MaxBytes Size `yaml:"max_bytes" json:"max_bytes"`
	// CatalogTTL is the lifetime of a catalog view when the upstream sends
	// no max-age. Default 300s.
	CatalogTTL time.Duration `yaml:"catalog_ttl" json:"catalog_ttl"`
	// LatestTTL is the lifetime of a latest report. Default 500ms.
	LatestTTL time.Duration `yaml:"latest_ttl" json:"latest_ttl"`
	// LatestMaxStale is how long past its latest_ttl a latest report is
	// still answered at once (X-Cache: STALE, with its Age) while a
	// refresh is scheduled within the upstream budget. Default 3s.
	LatestMaxStale time.Duration `yaml:"latest_max_stale" json:"latest_max_stale"`
	// LatestMaxWait is how long a latest request with nothing to answer
	// from waits for its report before a 503 with Retry-After. Default 1s.
	LatestMaxWait time.Duration `yaml:"latest_max_wait" json:"latest_max_wait"`
	// LatestBulkRefresh refreshes many streams' latest reports with one
	// bulk call at a recent timestamp (up to max_bulk streams per call of
	// the bulk endpoint's own budget), and single latest calls for the
	// rest. Default true.
	LatestBulkRefresh bool `yaml:"latest_bulk_refresh" json:"latest_bulk_refresh"`
	// NegativeTTL is the lifetime of a "no data yet" answer for a recent
	// timestamp. Default 1s.
	NegativeTTL time.Duration `yaml:"negative_ttl" json:"negative_ttl"`
	// Shared is the second cache tier, shared by the replicas. Default off.
	Shared SharedCache `yaml:"shared" json:"shared"`
}

// SharedCache is the cache tier in Redis that every replica reads behind
// its own memory: reports at a timestamp, complete pages, catalog views and
// latest reports are fetched once for all replicas, and a miss takes a short
// lease on its key so that the other replicas wait for its fill instead of
// calling the upstream too.
type SharedCache struct {
	// Backend is off (each replica caches alone) or redis. Default "off".
	Backend SharedBackend `yaml:"backend" json:"backend"`
	// URL is a redis://, rediss:// or unix:// URL, as ratelimit.redis.url.
	// It may name the Redis of the limits or another one (see the README
	// on eviction). With Backend redis exactly one of URL, Sentinel and
	// Cluster is given.
	URL string `yaml:"url" json:"url"`
	// Sentinel names a master that Redis Sentinel monitors, as
	// ratelimit.redis.sentinel.
	Sentinel *RedisSentinel `yaml:"sentinel" json:"sentinel"`
	// Cluster names a Redis Cluster, as ratelimit.redis.cluster.
	Cluster *RedisCluster `yaml:"cluster" json:"cluster"`
	// TLS turns TLS on for Sentinel or Cluster (a URL says it with
	// rediss://). Default false.
	TLS bool `yaml:"tls" json:"tls"`
	// Password is the Redis password, if any. After loading it also holds
	// the contents of PasswordFile.
	Password Secret `yaml:"password" json:"password"`
	// PasswordFile is a file holding the password, read at load time.
	PasswordFile string `yaml:"password_file" json:"password_file"`
	// TTL bounds how long an entry that never expires (a report at a
	// timestamp, a complete page) is kept in Redis; entries with a lifetime
	// (catalog views, latest reports) are kept until it ends, at most this
	// long. Default 24h.
	TTL time.Duration `yaml:"ttl" json:"ttl"`
	// MaxEntryBytes bounds the encoded size of one entry in Redis; larger
	// entries stay in each replica's memory only. Default 1MiB.
	MaxEntryBytes Size `yaml:"max_entry_bytes" json:"max_entry_bytes"`
	// Lease is how long a replica that missed holds the right to fill a key
	// while the others wait for its entry; a replica that dies while
	// holding it delays the others by at most this much. Default 2s.
	Lease time.Duration `yaml:"lease" json:"lease"`

	file fileState
}

// Realtime configures the WebSocket stream that clients open at
// /api/v1/ws, served from the gateway's shared upstream connections.
type Realtime struct {
	// ClientQueue is how many frames may wait for one client; a client
	// that falls further behind is closed (1008, "slow consumer") so that
	// it never delays the others. Default 256.
	ClientQueue int `yaml:"client_queue" json:"client_queue"`
	// PingInterval is how often the gateway pings its clients; one that
	// does not answer within the interval is closed. Default 15s.
	PingInterval time.Duration `yaml:"ping_interval" json:"ping_interval"`
	// TeamConnections bounds the WebSocket connections one team holds at
	// once (429 beyond). Default 100.
	TeamConnections int `yaml:"team_connections" json:"team_connections"`
	// Grace is how long a feed no client wants any more stays subscribed
	// upstream. Default 30s.
	Grace time.Duration `yaml:"grace" json:"grace"`
	// LatestFromStream answers /api/v1/reports/latest of a streamed feed
	// from the newest report the stream delivered, with no upstream call.
	// Default true.
	LatestFromStream bool `yaml:"latest_from_stream" json:"latest_from_stream"`
	// Share shares each network's upstream WebSocket connections with the
	// other replicas through the Redis of ratelimit.redis: one replica
	// holds each chunk of feeds (a lease in Redis) and publishes its
	// frames to the others. Only with ratelimit.backend redis. Default
	// true.
	Share bool `yaml:"share" json:"share"`
	// ShareLease is how long a chunk's lease lasts unless its holder
	// renews it (every third of it): a crashed holder's chunks are taken
	// over within about this. Default 3s, at least 300ms.
	ShareLease time.Duration `yaml:"share_lease" json:"share_lease"`
	// ClientOrigins are the HA origins the gateway advertises to its
	// clients (HEAD / answers X-Cll-Available-Origins: {001,002}), so that
	// an SDK in HA mode holds one connection per origin, as it does to the
	// upstream; an upgrade naming another origin (X-Cll-Origin) is 400. An
	// empty list advertises none (SDKs fall back to one connection).
	// Default ["001", "002"].
	ClientOrigins []string `yaml:"client_origins" json:"client_origins"`
	// DrainDelay is how long a draining replica (SIGTERM) keeps streaming
	// to its clients after /readyz turned 503, so that a balancer stops
	// routing to it, before it closes them in steps; at most half of
	// server.shutdown_timeout. Default 5s.
	DrainDelay time.Duration `yaml:"drain_delay" json:"drain_delay"`
	// ResumeWindow is how long after the gateway ended or lost a client's
	// connection a reconnect of the same key with the same streams gets
	// the reports it missed before live ones. 0 disables resume. Default
	// 60s.
	ResumeWindow time.Duration `yaml:"resume_window" json:"resume_window"`
	// ResumeRecordsPerTeam bounds the resume records one team has on a
	// replica (one per client identity: key, network, streams, origin) of
	// clients that left it on their own; beyond it the team's oldest such
	// record is dropped. The records of clients streaming there and those
	// its drain moved are outside the bound. Default 200.
	ResumeRecordsPerTeam int `yaml:"resume_records_per_team" json:"resume_records_per_team"`
	// ResumeRecords bounds the same records of a replica, all teams
	// together; beyond it the oldest is dropped. Default 5000.
	ResumeRecords int `yaml:"resume_records" json:"resume_records"`
	// BackfillMax bounds the gap of a stream that is filled from REST when
	// its frames stop and start again (upstream drop or outage, a holder's
	// crash): the newest BackfillMax of a longer gap are filled, the rest
	// counted and logged. 0 disables backfill. Default 2m.
	BackfillMax time.Duration `yaml:"backfill_max" json:"backfill_max"`
}

// Shared reports whether the replicas share the upstream WebSocket
// connections: realtime.share with the redis backend.
func (c *Config) Shared() bool {
	return c.Realtime.Share && c.RateLimit.Backend == BackendRedis
}

// RateLimit selects where the per-team limits are counted.
type RateLimit struct {
	// Backend is memory (each replica counts alone) or redis (replicas
	// share counts). Default "memory".
	Backend Backend `yaml:"backend" json:"backend"`
	// Redis is used when Backend is redis.
	Redis Redis `yaml:"redis" json:"redis"`
}

// Redis is the Redis shared by the replicas' rate limits, their replay
// record and their stream sharing: a single node (URL), a master that
// Redis Sentinel monitors (Sentinel) or a Redis Cluster (Cluster); exactly
// one of the three.
type Redis struct {
	// URL is a redis://, rediss:// or unix:// URL of a single node (a
	// master, not a cluster node). It must not carry a password: use
	// Password or PasswordFile. Default "redis://127.0.0.1:6379/0" when
	// neither Sentinel nor Cluster is given.
	URL string `yaml:"url" json:"url"`
	// Sentinel names a master that Redis Sentinel monitors: the client
	// asks the sentinels where it is and follows its failovers.
	Sentinel *RedisSentinel `yaml:"sentinel" json:"sentinel"`
	// Cluster names a Redis Cluster by some of its nodes: the client
	// learns the others and follows slot moves and failovers.
	Cluster *RedisCluster `yaml:"cluster" json:"cluster"`
	// TLS turns TLS on for Sentinel or Cluster (a URL says it with
	// rediss://). Default false.
	TLS bool `yaml:"tls" json:"tls"`
	// Password is the Redis password, if any. After loading it also holds
	// the contents of PasswordFile.
	Password Secret `yaml:"password" json:"password"`
	// PasswordFile is a file holding the password, read at load time like
	// Credentials.APISecretFile.
	PasswordFile string `yaml:"password_file" json:"password_file"`
	// FailMode is what happens while Redis is unreachable: open falls back
	// to each replica's local limits, closed refuses requests. Default
	// "open".
	FailMode FailMode `yaml:"fail_mode" json:"fail_mode"`

	file fileState
}

// RedisSentinel is a master that Redis Sentinel monitors.
type RedisSentinel struct {
	// Master is the name the sentinels monitor the master under. Required.
	Master string `yaml:"master" json:"master"`
	// Addrs are the sentinels, HOST:PORT each. Required, at least one.
	Addrs []string `yaml:"addrs" json:"addrs"`
	// SentinelPassword is the sentinels' own password, if any (the
	// enclosing password is the data nodes'). After loading it also holds
	// the contents of SentinelPasswordFile.
	SentinelPassword Secret `yaml:"sentinel_password" json:"sentinel_password"`
	// SentinelPasswordFile is a file holding SentinelPassword, read at
	// load time.
	SentinelPasswordFile string `yaml:"sentinel_password_file" json:"sentinel_password_file"`

	file fileState
}

// RedisCluster is a Redis Cluster.
type RedisCluster struct {
	// Addrs are some of the cluster's nodes, HOST:PORT each; the client
	// learns the others from them. Required, at least one.
	Addrs []string `yaml:"addrs" json:"addrs"`
}

// RedisTarget is the Redis one client speaks to, as ratelimit.redis and
// cache.shared give it: exactly one of URL, Sentinel and Cluster is set
// in a valid configuration.
type RedisTarget struct {
	URL      string
	Sentinel *RedisSentinel
	Cluster  *RedisCluster
	TLS      bool
	Password Secret
}

// Target is the Redis of the limits.
func (r *Redis) Target() RedisTarget {
	return RedisTarget{URL: r.URL, Sentinel: r.Sentinel, Cluster: r.Cluster, TLS: r.TLS, Password: r.Password}
}

// Target is the Redis of the shared cache tier.
func (s *SharedCache) Target() RedisTarget {
	return RedisTarget{URL: s.URL, Sentinel: s.Sentinel, Cluster: s.Cluster, TLS: s.TLS, Password: s.Password}
}

// Mode is the target's kind: "single", "sentinel" or "cluster".
func (t RedisTarget) Mode() string {
	switch {
	case t.Sentinel != nil:
		return "sentinel"
	case t.Cluster != nil:
		return "cluster"
	}
	return "single"
}

// Team is a group of clients that share entitlements and limits.
type Team struct {
	// Name identifies the team in logs and metrics: letters, digits, '.',
	// '_' and '-', at most 64. Required, unique.
	Name string `yaml:"name" json:"name"`
	// Networks the team may call. Required, each a configured network.
	Networks []string `yaml:"networks" json:"networks"`
	// Feeds the team may read: ["*"] for every stream the organisation's
	// credential reaches, hidden ones included, or a list of stream IDs
	// ("0x" and 64 hex digits, lower-cased at load). Required. The
	// wildcard is an item of the list as written: read it with AllFeeds
	// and the stream IDs with Feeds.IDs, not the list as IDs.
	Feeds StreamIDs `yaml:"feeds" json:"feeds"`
	// Rate limits the team's requests, all keys together. Default no limit.
	Rate Rate `yaml:"rate" json:"rate"`
	// DailyQuota is the number of requests per UTC day. Default 0,
	// unlimited.
	DailyQuota int64 `yaml:"daily_quota" json:"daily_quota"`
	// Upstream optionally gives the team its own upstream credentials,
	// keyed by the name of one of the team's networks; networks not listed
	// use the network's credentials. Each needs api_key and a secret.
	Upstream map[string]*Credentials `yaml:"upstream" json:"upstream"`
	// Keys are the team's client keys. At least one is required.
	Keys []Key `yaml:"keys" json:"keys"`
}

// AllFeeds reports whether the team may read every stream (feeds: ["*"]).
func (t *Team) AllFeeds() bool { return len(t.Feeds) == 1 && t.Feeds[0] == AllFeedsWildcard }

// HasNetwork reports whether the team may call the network name.
func (t *Team) HasNetwork(name string) bool { return slices.Contains(t.Networks, name) }

// Key is one client key of a team. Exactly one of Secret, SecretList and
// SecretFile is set in the file; use Secrets to read the key's secrets.
type Key struct {
	// ID is the key ID that clients send in the Authorization header (the
	// upstream uses UUIDs). Required, unique across all teams.
	ID string `yaml:"id" json:"id"`
	// Secret is the key's HMAC secret, at least 16 bytes. After loading it
	// also holds the contents of SecretFile.
	Secret Secret `yaml:"secret" json:"secret"`
	// SecretList (YAML "secrets") holds several secrets while one is being
	// rotated, the current one first; a request signed with any verifies.
	SecretList []Secret `yaml:"secrets" json:"secrets"`
	// SecretFile is a file holding the secret, read at load time like
	// Credentials.APISecretFile.
	SecretFile string `yaml:"secret_file" json:"secret_file"`
	// Rate optionally limits this key on its own, within the team's rate.
	// Default no limit.
	Rate Rate `yaml:"rate" json:"rate"`
	// ClientCert, when set, binds the key to a client certificate (see
	// ClientCert): every network of its team must verify client
	// certificates (tls.client_auth verify_if_given or require). Default
	// none: the key works over any connection.
	ClientCert *ClientCert `yaml:"client_cert" json:"client_cert"`

	file fileState
}

// Secrets returns the secrets a request signed with this key may use, the
// current one first: Secret (or the contents of SecretFile), else
// SecretList. The returned slice is a copy.
func (k *Key) Secrets() []Secret {
	if k.Secret != "" {
		return []Secret{k.Secret}
	}
	return slices.Clone(k.SecretList)
}

// Network returns the network named name, or nil.
func (c *Config) Network(name string) *Network { return c.Networks[name] }

// NetworkNames returns the names of the configured networks, sorted.
func (c *Config) NetworkNames() []string {
	names := make([]string, 0, len(c.Networks))
	for name := range c.Networks {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// Team returns the team named name, or nil.
func (c *Config) Team(name string) *Team {
	for i := range c.Teams {
		if c.Teams[i].Name == name {
			return &c.Teams[i]
		}
	}
	return nil
}
