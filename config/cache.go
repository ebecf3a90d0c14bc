// This file holds the schema of the cache section and its shared tier.

package config

import "time"

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
