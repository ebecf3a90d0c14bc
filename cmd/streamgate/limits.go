package main

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

// limits are the team limits, daily quotas and upstream budgets of the
// process, in memory or in Redis.
type limits struct {
	limiter ratelimit.Limiter
	quota   ratelimit.Quota
	budgets map[string]ratelimit.Budget
	client  *redis.Client
}

// replayStore shares the record of signatures seen through the same Redis
// as the limits, so that a request accepted by one replica is a replay at
// the others; nil with the memory backend.
func (l *limits) replayStore() auth.ReplayStore {
	if l.client == nil {
		return nil
	}
	return auth.NewRedisReplay(l.client, "streamgate:replay:")
}

func (l *limits) Close() {
	if l.client != nil {
		l.client.Close()
	}
}

// redisLog adapts zap to go-redis's logger.
type redisLog struct{ s *zap.SugaredLogger }

func (l redisLog) Printf(_ context.Context, format string, v ...any) { l.s.Debugf(format, v...) }

func newLimits(ctx context.Context, cfg *config.Config, reg prometheus.Registerer, log *zap.Logger) (*limits, error) {
	m, err := ratelimit.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	l := &limits{budgets: map[string]ratelimit.Budget{}}
	opts := func(name, network string) ratelimit.Options {
		return ratelimit.Options{Name: name, Network: network, Metrics: m, Logger: log.Named("ratelimit")}
	}
	if cfg.RateLimit.Backend != "redis" {
		if l.limiter, err = ratelimit.NewMemory(opts("team", "")); err != nil {
			return nil, err
		}
		if l.quota, err = ratelimit.NewMemoryQuota(opts("daily", "")); err != nil {
			return nil, err
		}
		for _, name := range cfg.NetworkNames() {
			if l.budgets[name], err = ratelimit.NewMemoryBudget(opts("budget", name)); err != nil {
				return nil, err
			}
		}
		return l, nil
	}

	rc := cfg.RateLimit.Redis
	mode, err := ratelimit.ParseFailMode(string(rc.FailMode))
	if err != nil {
		return nil, err
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
	if l.limiter, err = ratelimit.NewRedis(l.client, ropts("team", "")); err != nil {
		return nil, err
	}
	if l.quota, err = ratelimit.NewRedisQuota(l.client, ropts("daily", "")); err != nil {
		return nil, err
	}
	for _, name := range cfg.NetworkNames() {
		if l.budgets[name], err = ratelimit.NewRedisBudget(l.client, ropts("budget", name)); err != nil {
			return nil, err
		}
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := l.client.Ping(pctx).Err(); err != nil {
		log.Warn("redis not reachable at start; limits follow the fail mode until it is", zap.String("fail_mode", string(rc.FailMode)), zap.Error(err))
	}
	return l, nil
}
