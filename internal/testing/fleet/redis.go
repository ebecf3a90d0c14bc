package fleet

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"

	"streamgate/config"
	"streamgate/internal/testing/redisproc"
	"streamgate/redisconn"
)

// The Redis modes a fleet shares.
const (
	RedisSingle   = "single"   // one redis-server
	RedisSentinel = "sentinel" // a master, a replica and three sentinels
	RedisCluster  = "cluster"  // three masters with a replica each
)

// RedisModes are the modes, in the order of their cost.
var RedisModes = []string{RedisSingle, RedisSentinel, RedisCluster}

// ParseRedisModes reads single, sentinel, cluster, a comma-separated list
// of them, or all.
func ParseRedisModes(s string) ([]string, error) {
	if s == "all" {
		return RedisModes, nil
	}
	var out []string
	for m := range strings.SplitSeq(s, ",") {
		m = strings.TrimSpace(m)
		switch m {
		case RedisSingle, RedisSentinel, RedisCluster:
		default:
			return nil, fmt.Errorf("%q is not single, sentinel or cluster", m)
		}
		for _, seen := range out {
			if seen == m {
				return nil, fmt.Errorf("%s given twice", m)
			}
		}
		out = append(out, m)
	}
	return out, nil
}

// Redis is the Redis a fleet shares and an admin client of it.
type Redis struct {
	Mode   string
	Target config.RedisTarget    // what gateways are configured with: URL, Sentinel or Cluster
	Conn   redisconn.Target      // the same for a redisconn client
	Admin  redis.UniversalClient // a plain client, a failover client or a cluster client
	What   string                // the servers, in words
	stop   func()
}

// StartRedis starts the Redis of mode: for single the Redis at url if it
// is not empty (it is not started nor stopped, only used), else a
// redis-server from PATH on a free loopback port; for sentinel a master,
// a replica and three sentinels; for cluster three masters with a replica
// each. Every server it starts listens on loopback and keeps nothing on
// disk; Close stops them.
func StartRedis(mode, url string) (*Redis, error) {
	if mode == RedisSingle && url != "" {
		opt, err := redis.ParseURL(url)
		if err != nil {
			return nil, fmt.Errorf("fleet: redis: %w", err)
		}
		admin := redis.NewClient(opt)
		return &Redis{Mode: mode, Target: config.RedisTarget{URL: url}, Conn: redisconn.Target{URL: url},
			Admin: admin, What: "the Redis of " + opt.Addr, stop: func() { admin.Close() }}, nil
	}
	bin, err := redisproc.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("fleet: redis %s: %w", mode, err)
	}
	dir, err := os.MkdirTemp("", "streamgate-fleet-redis-")
	if err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	r, err := startRedis(mode, bin, dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	stop := r.stop
	r.stop = func() { stop(); os.RemoveAll(dir) }
	return r, nil
}

func startRedis(mode, bin, dir string) (*Redis, error) {
	switch mode {
	case RedisSingle:
		srv, err := redisproc.Start(bin, dir, nil)
		if err != nil {
			return nil, err
		}
		opt, err := redis.ParseURL(srv.URL())
		if err != nil {
			srv.Stop()
			return nil, fmt.Errorf("fleet: redis: %w", err)
		}
		admin := redis.NewClient(opt)
		return &Redis{Mode: mode, Target: config.RedisTarget{URL: srv.URL()}, Conn: redisconn.Target{URL: srv.URL()},
			Admin: admin, What: "one redis-server", stop: func() { admin.Close(); srv.Stop() }}, nil
	case RedisSentinel:
		sbin, err := redisproc.LookPath("redis-sentinel")
		if err != nil {
			return nil, fmt.Errorf("fleet: redis sentinel: %w", err)
		}
		s, err := redisproc.StartSentinel(bin, sbin, dir)
		if err != nil {
			return nil, err
		}
		admin := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: redisproc.SentinelMaster, SentinelAddrs: s.Addrs()})
		return &Redis{Mode: mode,
			Target: config.RedisTarget{Sentinel: &config.RedisSentinel{Master: redisproc.SentinelMaster, Addrs: s.Addrs()}},
			Conn:   redisconn.Target{Sentinel: &redisconn.Sentinel{Master: redisproc.SentinelMaster, Addrs: s.Addrs()}},
			Admin:  admin, What: "a master, a replica and three sentinels",
			stop: func() { admin.Close(); s.Stop() }}, nil
	case RedisCluster:
		cli, err := redisproc.LookPath("redis-cli")
		if err != nil {
			return nil, fmt.Errorf("fleet: redis cluster: %w", err)
		}
		c, err := redisproc.StartCluster(bin, cli, dir)
		if err != nil {
			return nil, err
		}
		admin := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
		return &Redis{Mode: mode,
			Target: config.RedisTarget{Cluster: &config.RedisCluster{Addrs: c.Addrs()}},
			Conn:   redisconn.Target{Cluster: c.Addrs()},
			Admin:  admin, What: "three masters with a replica each",
			stop: func() { admin.Close(); c.Stop() }}, nil
	}
	return nil, fmt.Errorf("fleet: redis mode %q is not single, sentinel or cluster", mode)
}

// Close closes the admin client and stops what StartRedis started.
func (r *Redis) Close() { r.stop() }

// EachMaster runs fn on every master: the one node, the Sentinel set's
// master, or each master of the cluster.
func (r *Redis) EachMaster(ctx context.Context, fn func(context.Context, *redis.Client) error) error {
	switch c := r.Admin.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, fn)
	case *redis.Client:
		return fn(ctx, c)
	}
	return fmt.Errorf("fleet: redis admin client %T", r.Admin)
}

// Flush empties every master.
func (r *Redis) Flush(ctx context.Context) error {
	err := r.EachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return c.FlushAll(ctx).Err() })
	if err != nil {
		return fmt.Errorf("fleet: redis flush: %w", err)
	}
	return nil
}
