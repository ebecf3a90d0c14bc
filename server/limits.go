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
)

// Limits are the team limits, daily quotas and upstream budgets of a
// process, in memory or in Redis, and the replay record shared through the
// same Redis.
type Limits struct {
	Limiter     ratelimit.Limiter
	Quota       ratelimit.Quota
	Budgets     map[string]ratelimit.Budget
	ReplayStore auth.ReplayStore // nil with the memory backend
	// Conns counts each team's WebSocket connections across the replicas;
	// nil with the memory backend (each process counts its own).
	Conns  *ratelimit.RedisConns
	client *redis.Client
}

// Redis returns the Redis client of the limits, nil with the memory
// backend: the process's one client, which the real-time hubs also use to
// share their upstream connections.
func (l *Limits) Redis() *redis.Client { return l.client }

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
	}
	// go-redis logs through a process-wide logger: send its lines (one per
	// failed dial while Redis is down) to ours at debug level; the client's
	// circuit breaker logs each outage and recovery once, and so do the
	// limiters.
	redis.SetLogger(redisLog{log.Named("redis").Sugar()})
	// One client for the limits and the replay record: short deadlines, no
	// retries, and one circuit breaker, so that a hanging Redis costs at
	// most a timeout per breaker window before every caller falls back.
	l.client, err = ratelimit.NewRedisClient(rc.URL, rc.Password.Reveal(), ratelimit.RedisClientOptions{
		Metrics: m, Logger: log.Named("redis"),
	})
	if err != nil {
		return nil, fmt.Errorf("ratelimit.redis: %w", err)
	}
	ropts := func(name, network string) ratelimit.Options {
		o := opts(name, network)
		o.FailMode = mode
		return o
	}
	if l.Limiter, err = ratelimit.NewRedis(l.client, ropts("team", "")); err != nil {
		return nil, err
	}
	if l.Quota, err = ratelimit.NewRedisQuota(l.client, ropts("daily", "")); err != nil {
		return nil, err
	}
	for _, name := range cfg.NetworkNames() {
		if l.Budgets[name], err = ratelimit.NewRedisBudget(l.client, ropts("budget", name)); err != nil {
			return nil, err
		}
	}
	l.ReplayStore = auth.NewRedisReplay(l.client, "streamgate:replay:")
	l.Conns = ratelimit.NewRedisConns(l.client, "streamgate:wsconns:", 0)
	pctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := l.client.Ping(pctx).Err(); err != nil {
		log.Warn("redis not reachable at start; limits follow the fail mode until it is", zap.String("fail_mode", string(rc.FailMode)), zap.Error(err))
	}
	return l, nil
}
