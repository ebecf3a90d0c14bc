package config

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// RestartOnly returns the YAML paths of the settings that differ between
// the running configuration and next and that a reload cannot apply, sorted:
// the server, log.level, log.format, cache.max_bytes, the rate limit backend
// and its Redis, and every network (its listener, host names, pass-through
// paths and upstream). A network added or removed is reported as
// networks.<name> with each of its paths. Teams, keys, their limits, auth
// and the cache lifetimes are applied by a reload and never reported.
//
// Secrets are compared by a digest and only paths are returned, so the
// result can be logged.
func RestartOnly(running, next *Config) []string {
	a, b := restartSettings(running), restartSettings(next)
	var out []string
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			out = append(out, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// restartSettings returns the settings that a reload does not change, by
// their YAML path, each as a string to compare. A secret is represented by
// its digest.
func restartSettings(cfg *Config) map[string]string {
	digest := func(s Secret) string {
		sum := sha256.Sum256([]byte(s.Reveal()))
		return hex.EncodeToString(sum[:])
	}
	m := map[string]string{
		"server.admin_listen":          cfg.Server.AdminListen,
		"server.shutdown_timeout":      cfg.Server.ShutdownTimeout.String(),
		"server.read_header_timeout":   cfg.Server.ReadHeaderTimeout.String(),
		"server.idle_timeout":          cfg.Server.IdleTimeout.String(),
		"server.read_timeout":          cfg.Server.ReadTimeout.String(),
		"server.write_timeout":         cfg.Server.WriteTimeout.String(),
		"server.admin_token":           digest(cfg.Server.AdminToken),
		"log.level":                    string(cfg.Log.Level),
		"log.format":                   string(cfg.Log.Format),
		"cache.max_bytes":              strconv.FormatInt(int64(cfg.Cache.MaxBytes), 10),
		"cache.shared.backend":         string(cfg.Cache.Shared.Backend),
		"cache.shared.url":             cfg.Cache.Shared.URL,
		"cache.shared.sentinel":        sentinelSetting(cfg.Cache.Shared.Sentinel, digest),
		"cache.shared.cluster":         clusterSetting(cfg.Cache.Shared.Cluster),
		"cache.shared.tls":             strconv.FormatBool(cfg.Cache.Shared.TLS),
		"cache.shared.password":        digest(cfg.Cache.Shared.Password),
		"cache.shared.ttl":             cfg.Cache.Shared.TTL.String(),
		"cache.shared.max_entry_bytes": strconv.FormatInt(int64(cfg.Cache.Shared.MaxEntryBytes), 10),
		"cache.shared.lease":           cfg.Cache.Shared.Lease.String(),
		"ratelimit.backend":            string(cfg.RateLimit.Backend),
		"ratelimit.redis.url":          cfg.RateLimit.Redis.URL,
		"ratelimit.redis.sentinel":     sentinelSetting(cfg.RateLimit.Redis.Sentinel, digest),
		"ratelimit.redis.cluster":      clusterSetting(cfg.RateLimit.Redis.Cluster),
		"ratelimit.redis.tls":          strconv.FormatBool(cfg.RateLimit.Redis.TLS),
		"ratelimit.redis.password":     digest(cfg.RateLimit.Redis.Password),
		"ratelimit.redis.fail_mode":    string(cfg.RateLimit.Redis.FailMode),
		"realtime.client_queue":        strconv.Itoa(cfg.Realtime.ClientQueue),
		"realtime.ping_interval":       cfg.Realtime.PingInterval.String(),
		"realtime.grace":               cfg.Realtime.Grace.String(),
		"realtime.team_connections":    strconv.Itoa(cfg.Realtime.TeamConnections),
	}
	// A listener's TLS files and client policy are applied by a reload;
	// turning TLS on or off changes the listener itself.
	m["server.admin_tls"] = strconv.FormatBool(cfg.Server.AdminTLS != nil)
	for name, n := range cfg.Networks {
		p := "networks." + name
		m[p] = "configured"
		if n == nil { // only in a Config built in code
			n = &Network{}
		}
		up := n.Upstream
		m[p+".listen"] = n.Listen
		m[p+".hosts"] = strings.Join(n.Hosts, ",")
		m[p+".tls"] = strconv.FormatBool(n.TLS != nil)
		m[p+".pass_through"] = strings.Join(n.PassThrough, ",")
		m[p+".upstream.url"] = up.URL
		m[p+".upstream.api_key"] = up.APIKey
		m[p+".upstream.api_secret"] = digest(up.Secret())
		m[p+".upstream.timeout"] = up.Timeout.String()
		m[p+".upstream.retries"] = strconv.Itoa(up.Retries)
		m[p+".upstream.budget"] = fmt.Sprint(up.Budget.RPS, "/", up.Budget.Burst)
		m[p+".upstream.budget_margin"] = up.BudgetMargin.String()
		m[p+".upstream.max_bulk"] = strconv.Itoa(up.MaxBulk)
		m[p+".upstream.ws_url"] = up.WSURL
		m[p+".upstream.ws_max_connections"] = strconv.Itoa(up.WSMaxConnections)
		m[p+".upstream.ws_feeds_per_connection"] = strconv.Itoa(up.WSFeedsPerConnection)
		m[p+".upstream.ws_pinned"] = strings.Join(up.WSPinned, ",")
	}
	m["tracing"] = fmt.Sprint(cfg.Tracing)
	m["realtime.share"] = strconv.FormatBool(cfg.Realtime.Share)
	m["realtime.share_lease"] = cfg.Realtime.ShareLease.String()
	m["realtime.client_origins"] = strings.Join(cfg.Realtime.ClientOrigins, ",")
	m["realtime.drain_delay"] = cfg.Realtime.DrainDelay.String()
	m["realtime.resume_window"] = cfg.Realtime.ResumeWindow.String()
	m["realtime.backfill_max"] = cfg.Realtime.BackfillMax.String()
	return m
}

// sentinelSetting represents a Sentinel target for comparison, its
// password by digest.
func sentinelSetting(s *RedisSentinel, digest func(Secret) string) string {
	if s == nil {
		return ""
	}
	return s.Master + " " + strings.Join(s.Addrs, ",") + " " + digest(s.SentinelPassword)
}

// clusterSetting represents a Cluster target for comparison.
func clusterSetting(c *RedisCluster) string {
	if c == nil {
		return ""
	}
	return strings.Join(c.Addrs, ",")
}
