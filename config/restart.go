package config

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
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
	at := pathsOf(cfg)
	m := map[string]string{}
	add := func(fields ...any) {
		for _, f := range fields {
			m[at.of(f)] = settingValue(f)
		}
	}
	s := &cfg.Server
	// A listener's TLS files and client policy are applied by a reload;
	// turning TLS on or off changes the listener itself.
	add(&s.AdminListen, &s.ShutdownTimeout, &s.ReadHeaderTimeout, &s.IdleTimeout,
		&s.ReadTimeout, &s.WriteTimeout, &s.AdminToken, &s.AdminTLS)
	add(&cfg.Log.Level, &cfg.Log.Format)
	sh := &cfg.Cache.Shared
	add(&cfg.Cache.MaxBytes, &sh.Backend, &sh.URL, &sh.Sentinel, &sh.Cluster, &sh.TLS,
		&sh.Password, &sh.TTL, &sh.MaxEntryBytes, &sh.Lease)
	rl := &cfg.RateLimit
	add(&rl.Backend, &rl.Redis.URL, &rl.Redis.Sentinel, &rl.Redis.Cluster, &rl.Redis.TLS,
		&rl.Redis.Password, &rl.Redis.FailMode)
	rt := &cfg.Realtime
	add(&rt.ClientQueue, &rt.PingInterval, &rt.Grace, &rt.TeamConnections, &rt.Share,
		&rt.ShareLease, &rt.ClientOrigins, &rt.DrainDelay, &rt.ResumeWindow,
		&rt.ResumeRecordsPerTeam, &rt.ResumeRecords, &rt.BackfillMax, &rt.SinceMax)
	add(&cfg.Tracing)
	add(&cfg.Archive.Backend, &cfg.Archive.Path, &cfg.Archive.Postgres.URL, &cfg.Archive.Postgres.Password,
		&cfg.Archive.Retention, &cfg.Archive.ReadTimeout, &cfg.Archive.Queue)
	add(&cfg.Sharing)
	if cfg.Sharing == SharingCredential {
		// The partitions are the hubs, started once: their credentials
		// are fixed at start.
		for _, name := range cfg.NetworkNames() {
			for _, p := range cfg.Partitions(name) {
				if p.Name != "" {
					m["teams[].upstream."+name+" (sharing: credential) "+p.Name] = digest(p.Credentials.Secret())
				}
			}
		}
	}
	for name, n := range cfg.Networks {
		if n == nil { // only in a Config built in code
			n = &Network{}
			at.walk(reflect.ValueOf(n).Elem(), joinKey(at.of(&cfg.Networks), name))
		}
		m[at.of(n)] = "configured"
		up := &n.Upstream
		add(&n.Listen, &n.Hosts, &n.TLS, &n.PassThrough, &up.URL, &up.APIKey, &up.APISecret,
			&up.Timeout, &up.Retries, &up.Budget, &up.BudgetMargin, &up.MaxBulk, &up.WSURL,
			&up.WSMaxConnections, &up.WSFeedsPerConnection, &up.WSPinned)
	}
	return m
}

// settingValue represents the setting that field points to for comparison:
// a secret by its digest, a TLS block by its presence, a Redis Sentinel or
// Cluster by its addresses (and the sentinels' password's digest).
func settingValue(field any) string {
	switch f := field.(type) {
	case *Secret:
		return digest(*f)
	case *time.Duration:
		return f.String()
	case *string:
		return *f
	case *bool:
		return strconv.FormatBool(*f)
	case *int:
		return strconv.Itoa(*f)
	case *Size:
		return strconv.FormatInt(int64(*f), 10)
	case *[]string:
		return strings.Join(*f, ",")
	case *Rate:
		return fmt.Sprint(f.RPS, "/", f.Burst)
	case **TLS:
		return strconv.FormatBool(*f != nil)
	case **RedisSentinel:
		return sentinelSetting(*f)
	case **RedisCluster:
		return clusterSetting(*f)
	}
	return fmt.Sprint(reflect.ValueOf(field).Elem().Interface()) // enumerations, tracing
}

// digest represents a secret for comparison.
func digest(s Secret) string {
	sum := sha256.Sum256([]byte(s.Reveal()))
	return hex.EncodeToString(sum[:])
}

// sentinelSetting represents a Sentinel target for comparison, its
// password by digest.
func sentinelSetting(s *RedisSentinel) string {
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
