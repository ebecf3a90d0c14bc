package server

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"streamgate/auth"
	"streamgate/config"
	"streamgate/ratelimit"
	"streamgate/redisconn"
	"streamgate/wsgate"
)

// Limits are the team limits, daily quotas and upstream budgets of a
// process, in memory or in Redis, and the replay record shared through the
// same Redis.
type Limits struct {
	Limiter     ratelimit.Limiter
	Quota       ratelimit.Quota
	Admitter    ratelimit.Admitter // nil with the memory backend
	Budgets     map[string]ratelimit.Budget
	ReplayStore auth.ReplayStore // nil with the memory backend
	// Conns counts each team's WebSocket connections across the replicas;
	// nil with the memory backend (each process counts its own).
	Conns  *wsgate.RedisConns
	client *redisconn.Client
	closed bool // ratelimit.redis.fail_mode closed: refused while Redis cannot be used
}

// Redis returns the Redis client of the limits, nil with the memory
// backend: the process's one client for them, which the real-time hubs
// also use to share their upstream connections and the stream clients'
// resume records.
func (l *Limits) Redis() redis.UniversalClient {
	if l.client == nil {
		return nil
	}
	return l.client
}

// RedisHealth says why the limits' Redis cannot be used now, "" while it
// can (or with the memory backend).
func (l *Limits) RedisHealth() string {
	if l.client == nil {
		return ""
	}
	return l.client.Health()
}

// Refusing says why the limits refuse every request now, "" while they
// do not: with fail_mode closed, while their Redis cannot be used (the
// client's breaker is not closed, so every call fails at once).
func (l *Limits) Refusing() string {
	if !l.closed {
		return ""
	}
	return l.RedisHealth()
}

// Probe sends one PING through the client's breaker, which is its probe
// when the breaker is half-open: a success closes it, and the limits use
// Redis again. While the limits refuse, the replica is not ready and a
// balancer sends it no requests, whose calls would otherwise be the
// probes: /readyz, which the balancer keeps asking, probes instead. A
// breaker still open fails the PING at once, without a dial.
func (l *Limits) Probe(ctx context.Context) {
	if l.client != nil {
		_ = l.client.Ping(ctx).Err()
	}
}

// Close releases the Redis client, if any.
func (l *Limits) Close() {
	if l.Conns != nil {
		l.Conns.Close()
	}
	if l.client != nil {
		l.client.Close()
	}
}

// redisLog adapts zap to go-redis's logger.
type redisLog struct{ s *zap.SugaredLogger }

func (l redisLog) Printf(_ context.Context, format string, v ...any) { l.s.Debugf(format, v...) }

// NewLimits builds the limits cfg.RateLimit describes for every network
// of cfg, their metrics registered with reg. The team limiter and the
// daily quota follow now (nil: time.Now); the upstream budgets always
// follow the wall clock.
func NewLimits(cfg *config.Config, reg prometheus.Registerer, log *zap.Logger, now func() time.Time) (*Limits, error) {
	return newLimits(cfg, reg, nil, log, now)
}

// newLimits is NewLimits with the Redis clients' metrics rm, made and
// registered with reg when nil and needed.
func newLimits(cfg *config.Config, reg prometheus.Registerer, rm *redisconn.Metrics, log *zap.Logger, now func() time.Time) (*Limits, error) {
	m, err := ratelimit.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	l := &Limits{Budgets: map[string]ratelimit.Budget{}}
	opts := func(name, network string) ratelimit.Options {
		o := ratelimit.Options{Name: name, Network: network, Metrics: m, Logger: log.Named("ratelimit")}
		if name != "budget" {
			o.Now = now
		} else if n := cfg.Networks[network]; n != nil {
			o.BudgetMargin = n.Upstream.BudgetMargin
		}
		return o
	}
	if cfg.RateLimit.Backend != config.BackendRedis {
		if l.Limiter, err = ratelimit.NewMemory(opts("team", "")); err != nil {
			return nil, err
		}
		if l.Quota, err = ratelimit.NewMemoryQuota(opts("daily", "")); err != nil {
			return nil, err
		}
		for _, name := range cfg.NetworkNames() {
			if l.Budgets[name], err = ratelimit.NewMemoryBudget(opts("budget", name)); err != nil {
				return nil, err
			}
		}
		return l, nil
	}

	rc := cfg.RateLimit.Redis
	mode := ratelimit.FailOpen
	if rc.FailMode == config.FailModeClosed {
		mode = ratelimit.FailClosed
		l.closed = true
	}
	// go-redis logs through a process-wide logger: send its lines (one per
	// failed dial while Redis is down) to ours at debug level; the client's
	// circuit breaker logs each outage and recovery once, and so do the
	// limiters.
	redis.SetLogger(redisLog{log.Named("redis").Sugar()})
	// One client for the limits and the replay record: short deadlines,
	// the library's few retries within them, and one circuit breaker, so
	// that a hanging Redis costs at most a timeout per breaker window
	// before every caller falls back.
	if rm == nil {
		if rm, err = redisconn.NewMetrics(reg); err != nil {
			return nil, err
		}
	}
	l.client, err = redisconn.New(redisTarget(rc.Target()), redisconn.Options{
		Name: "ratelimit", Metrics: rm, Logger: log.Named("redis"),
	})
	if err != nil {
		return nil, fmt.Errorf("ratelimit.redis: %w", err)
	}
	pctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	reachable, err := l.client.CheckServer(pctx)
	if err != nil {
		l.client.Close()
		return nil, fmt.Errorf("ratelimit.redis.url: %w", err)
	}
	if !reachable {
		log.Warn("redis not reachable at start; limits follow the fail mode until it is",
			zap.String("fail_mode", string(rc.FailMode)), zap.String("mode", string(l.client.Mode())))
	}
	ropts := func(name, network string) ratelimit.Options {
		o := opts(name, network)
		o.FailMode = mode
		return o
	}
	limiter, err := ratelimit.NewRedis(l.client, ropts("team", ""))
	if err != nil {
		return nil, err
	}
	quota, err := ratelimit.NewRedisQuota(l.client, ropts("daily", ""))
	if err != nil {
		return nil, err
	}
	// A request's rates and daily quota in one script call.
	l.Limiter, l.Quota, l.Admitter = limiter, quota, ratelimit.NewRedisAdmitter(limiter, quota)
	for _, name := range cfg.NetworkNames() {
		if l.Budgets[name], err = ratelimit.NewRedisBudget(l.client, ropts("budget", name)); err != nil {
			return nil, err
		}
	}
	l.ReplayStore = auth.NewRedisReplay(l.client, "streamgate:replay:")
	l.Conns = wsgate.NewRedisConns(l.client, "streamgate:wsconns:", 0)
	return l, nil
}

// redisTarget is t as package redisconn takes it.
func redisTarget(t config.RedisTarget) redisconn.Target {
	out := redisconn.Target{URL: t.URL, TLS: t.TLS, Password: t.Password.Reveal()}
	if s := t.Sentinel; s != nil {
		out.Sentinel = &redisconn.Sentinel{Master: s.Master, Addrs: s.Addrs, Password: s.SentinelPassword.Reveal()}
	}
	if c := t.Cluster; c != nil {
		out.Cluster = c.Addrs
	}
	return out
}
