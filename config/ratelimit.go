// This file holds the schema of the ratelimit section and of the Redis
// targets it and the shared cache tier use.

package config

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
