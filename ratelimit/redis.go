package ratelimit

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
)

// Redis is a Limiter whose token buckets live in Redis, shared by every
// replica using the same Redis and Prefix. It runs the GCRA of
// github.com/go-redis/redis_rate (one Lua script call per event, timed by
// Redis's clock). It is safe for concurrent use.
//
// When a call to Redis fails (other than by the caller's own context), the
// failure is counted and logged once, and for Options.RetryInterval every
// request is decided without Redis as Options.FailMode says: by a local
// Memory limiter (FailOpen) or refused with ErrUnavailable (FailClosed).
// Then one request tries Redis again; when it answers, all requests go back
// to it. Calls to Redis are bounded by the client's own timeouts, and
// requests wait on them: use a client of redisconn.New, whose calls have a
// short deadline, bounded retries and a circuit breaker shared by every user
// of the client, so that a hanging Redis costs at most a timeout per breaker
// window and the others fail at once with redisconn.ErrCircuitOpen.
type Redis struct {
	gcra     *redis_rate.Limiter
	prefix   string
	fb       *fallback
	local    *Memory
	metrics  decisionCounters
	interval time.Duration
}

var _ Limiter = (*Redis)(nil)

// NewRedis returns a Redis limiter on client configured by opts (Name,
// Prefix, FailMode, RetryInterval, MaxKeys and Now for the local fallback,
// Metrics, Logger).
func NewRedis(client redis.UniversalClient, opts Options) (*Redis, error) {
	if client == nil {
		return nil, errors.New("ratelimit: nil redis client")
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Redis{
		gcra:     redis_rate.NewLimiter(unprefixed{client}),
		prefix:   opts.Prefix + "rate:",
		fb:       newFallback(opts, "limiter").follow(client),
		local:    newMemory(opts, nil),
		metrics:  opts.Metrics.decisionCounters(opts.Name),
		interval: opts.RetryInterval,
	}, nil
}

// Allow takes one token from key's bucket in Redis, if there is one. Its
// error is ErrInvalidLimit, the context's error, or, when Redis fails in
// FailClosed mode, an error wrapping ErrUnavailable (with a Decision that
// refuses and suggests RetryAfter).
func (r *Redis) Allow(ctx context.Context, key string, l Limit) (Decision, error) {
	d, err := r.allow(ctx, key, l)
	r.metrics.record(d, err)
	return d, err
}

func (r *Redis) allow(ctx context.Context, key string, l Limit) (Decision, error) {
	if err := l.Validate(); err != nil {
		return Decision{Limit: l}, err
	}
	if l.Unlimited() {
		return Decision{Allowed: true, Limit: l, Remaining: l.Burst}, nil
	}
	if !r.fb.try() {
		return r.fallback(key, l, nil)
	}
	res, err := r.gcra.Allow(ctx, r.prefix+key, gcraLimit(l))
	if err != nil {
		if !redisFailed(ctx, err) {
			return Decision{Limit: l}, err
		}
		r.fb.failed("allow", err)
		return r.fallback(key, l, err)
	}
	r.fb.succeeded()
	d := Decision{Allowed: res.Allowed > 0, Limit: l, Remaining: max(res.Remaining, 0), Reset: max(res.ResetAfter, 0)}
	if !d.Allowed {
		d.RetryAfter = max(res.RetryAfter, 0)
	}
	return d, nil
}

func (r *Redis) fallback(key string, l Limit, cause error) (Decision, error) {
	r.fb.metrics.fallback(r.fb.mode)
	if r.fb.mode == FailClosed {
		return Decision{Limit: l, RetryAfter: r.interval}, unavailable(cause)
	}
	return r.local.allow(key, l, r.local.now())
}

// gcraLimit expresses l for redis_rate, whose rate is a whole number of
// events per period.
func gcraLimit(l Limit) redis_rate.Limit {
	if l.Rate >= 1 && l.Rate == math.Trunc(l.Rate) && l.Rate <= math.MaxInt32 {
		return redis_rate.Limit{Rate: int(l.Rate), Burst: l.Burst, Period: time.Second}
	}
	period := float64(time.Second) / l.Rate
	if period >= math.MaxInt64 {
		period = math.MaxInt64
	}
	return redis_rate.Limit{Rate: 1, Burst: l.Burst, Period: time.Duration(period)}
}
