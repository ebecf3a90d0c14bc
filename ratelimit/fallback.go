package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// fallback tracks whether Redis answers. After a failure every request is
// decided without Redis until RetryInterval has passed (or, for a client
// with a breaker of its own, while that breaker is open: see follow); then
// one request probes Redis, and the first success brings every request
// back to it. One
// log line is written per transition, not per request.
type fallback struct {
	mode     FailMode
	interval time.Duration
	now      func() time.Time
	log      *zap.Logger
	metrics  *Metrics
	what     string // "limiter", "quota" or "budget", for the log

	down    atomic.Bool
	mu      sync.Mutex
	retryAt time.Time // guarded by mu

	// ready, when the Redis client has a circuit breaker of its own
	// (redisconn.Client), returns a channel closed while that breaker is
	// closed: set by follow.
	ready func() <-chan struct{}
}

// follow lets the fallback follow the health of client when it knows it
// (redisconn.Client's Ready): while the client's breaker is closed, a
// request tries Redis at once, even right after a failed call. One call
// that failed (a timeout under load) does not then decide a whole
// RetryInterval alone; a Redis that keeps failing opens the client's
// breaker, which refuses at once, and the fallback waits as before. When
// the breaker closes again (a failover ended), the next request uses
// Redis without waiting for the interval.
func (f *fallback) follow(client any) *fallback {
	if r, ok := client.(interface{ Ready() <-chan struct{} }); ok {
		f.ready = r.Ready
	}
	return f
}

func newFallback(opts Options, what string) *fallback {
	return &fallback{
		mode:     opts.FailMode,
		interval: opts.RetryInterval,
		now:      opts.Now,
		log:      opts.Logger,
		metrics:  opts.Metrics,
		what:     what,
	}
}

// try reports whether this request should use Redis.
func (f *fallback) try() bool {
	if !f.down.Load() {
		return true
	}
	if f.ready != nil {
		select {
		case <-f.ready():
			return true // the client's breaker is closed: Redis answers
		default:
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.down.Load() {
		return true
	}
	now := f.now()
	if now.Before(f.retryAt) {
		return false
	}
	f.retryAt = now.Add(f.interval) // this request probes; the others wait for it
	return true
}

// failed records a Redis failure of op.
func (f *fallback) failed(op string, err error) {
	f.metrics.redisError(op)
	f.mu.Lock()
	f.retryAt = f.now().Add(f.interval)
	wasDown := f.down.Swap(true)
	f.mu.Unlock()
	if !wasDown {
		msg := "redis unavailable; deciding with local limits"
		if f.mode == FailClosed {
			msg = "redis unavailable; refusing"
		}
		f.log.Warn(msg, zap.String("component", f.what), zap.String("op", op),
			zap.Duration("retry_interval", f.interval), zap.Error(err))
	}
}

// succeeded records that Redis answered.
func (f *fallback) succeeded() {
	if f.down.Load() && f.down.CompareAndSwap(true, false) {
		f.log.Info("redis available again", zap.String("component", f.what))
	}
}

// unavailable returns the error of a FailClosed refusal; cause may be nil
// when Redis was not even tried.
func unavailable(cause error) error {
	if cause == nil {
		return ErrUnavailable
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, cause)
}

// redisFailed reports whether err, returned by a Redis call made with ctx,
// is Redis's fault rather than the caller's cancelled context.
func redisFailed(ctx context.Context, err error) bool {
	return err != nil && !errors.Is(err, redis.Nil) && ctx.Err() == nil
}

// gcraPrefix is the prefix that redis_rate puts in front of every key.
const gcraPrefix = "rate:"

// unprefixed lets redis_rate use our keys as they are: it strips the
// "rate:" that redis_rate adds, so that the key in Redis is exactly the
// one we built (Options.Prefix first).
type unprefixed struct{ redis.UniversalClient }

func strip(keys []string) []string {
	for i, k := range keys {
		keys[i] = strings.TrimPrefix(k, gcraPrefix)
	}
	return keys
}

func (u unprefixed) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return u.UniversalClient.Eval(ctx, script, strip(keys), args...)
}

func (u unprefixed) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return u.UniversalClient.EvalSha(ctx, sha1, strip(keys), args...)
}

func (u unprefixed) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return u.UniversalClient.EvalRO(ctx, script, strip(keys), args...)
}

func (u unprefixed) EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return u.UniversalClient.EvalShaRO(ctx, sha1, strip(keys), args...)
}

func (u unprefixed) Del(ctx context.Context, keys ...string) *redis.IntCmd {
	return u.UniversalClient.Del(ctx, strip(keys)...)
}
