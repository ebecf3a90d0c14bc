package server

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"streamgate/cache/shared"
	"streamgate/config"
	"streamgate/redisconn"
)

// newShared builds the shared cache tier cfg.Cache.Shared describes, with a
// Redis client of its own (its own deadline and circuit breaker: the cache
// failing never trips the limits' breaker, nor the other way round). It
// returns a nil tier and client when the tier is off. Redis unreachable at
// start is not an error: each fill falls back until it answers.
func newShared(cfg *config.Config, reg prometheus.Registerer, rm *redisconn.Metrics, log *zap.Logger, now func() time.Time) (*shared.Tier, *redisconn.Client, error) {
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
	rc, err := redisconn.New(redisTarget(sc.Target()), redisconn.Options{Name: "shared", Metrics: rm})
	if err != nil {
		return nil, nil, fmt.Errorf("cache.shared: %w", err)
	}
	pctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	reachable, err := rc.CheckServer(pctx)
	if err != nil {
		rc.Close()
		return nil, nil, fmt.Errorf("cache.shared.url: %w", err)
	}
	if !reachable {
		log.Warn("shared cache: redis not reachable at start; each replica fills alone until it is", zap.String("mode", string(rc.Mode())))
	}
	tier, err := shared.New(shared.Config{
		Client: rc, TTL: sc.TTL, MaxEntryBytes: int(sc.MaxEntryBytes), Lease: sc.Lease,
		Clock: now, Logger: log, Metrics: m,
	})
	if err != nil {
		rc.Close()
		return nil, nil, err
	}
	return tier, rc, nil
}
