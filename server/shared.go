package server

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"streamgate/cache/shared"
	"streamgate/config"
	"streamgate/ratelimit"
)

// newShared builds the shared cache tier cfg.Cache.Shared describes, with a
// Redis client of its own (its own deadline and circuit breaker: the cache
// failing never trips the limits' breaker, nor the other way round). It
// returns a nil tier and client when the tier is off. Redis unreachable at
// start is not an error: each fill falls back until it answers.
func newShared(cfg *config.Config, reg prometheus.Registerer, log *zap.Logger, now func() time.Time) (*shared.Tier, *redis.Client, error) {
	sc := cfg.Cache.Shared
	if sc.Backend != config.SharedRedis {
		return nil, nil, nil
	}
	m, err := shared.NewMetrics(reg)
	if err != nil {
		return nil, nil, err
	}
	// The tier logs its own outages and recoveries (once each); the
	// breaker's lines would repeat them.
	rc, err := ratelimit.NewRedisClient(sc.URL, sc.Password.Reveal(), ratelimit.RedisClientOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("cache.shared: %w", err)
	}
	tier, err := shared.New(shared.Config{
		Client: rc, TTL: sc.TTL, MaxEntryBytes: int(sc.MaxEntryBytes), Lease: sc.Lease,
		Clock: now, Logger: log, Metrics: m,
	})
	if err != nil {
		rc.Close()
		return nil, nil, err
	}
	pctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := rc.Ping(pctx).Err(); err != nil {
		log.Warn("shared cache: redis not reachable at start; each replica fills alone until it is", zap.Error(err))
	}
	return tier, rc, nil
}
