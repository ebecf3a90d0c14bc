package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"
)

// Budget is the upstream budget: one token bucket per key, shared by all
// teams, that upstream calls wait on. A Budget is made per network
// (Options.Network); its keys name upstream endpoints from a fixed set,
// such as "/api/v1/reports", and become the "endpoint" label of its
// metrics. Implementations are safe for concurrent use.
type Budget interface {
	// Wait blocks until key has a token under l, or returns an error. It
	// waits only as long as ctx's deadline allows: when the token (or the
	// end of a pause) comes later than the deadline, it returns at once a
	// *BudgetError, which wraps ErrBudgetExhausted; so it does too if the
	// deadline passes while it waits after all (a late timer, or, shared
	// with other replicas, the token it waited for went to another). It
	// returns ctx's error when ctx is cancelled, or was done on entry; it
	// never sleeps past ctx.Done.
	Wait(ctx context.Context, key string, l Limit) error
	// Pause stops calls for key during d, e.g. for the Retry-After of an
	// upstream 429. A pause is never shortened by a later, shorter one.
	Pause(key string, d time.Duration)
}

// BudgetError is the error of a Wait refused for want of time. It wraps
// ErrBudgetExhausted; find it with errors.As.
type BudgetError struct {
	// RetryAfter is how long until a token (or the end of the pause) was
	// expected.
	RetryAfter time.Duration
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("%v: next token in %v", ErrBudgetExhausted, e.RetryAfter)
}

func (e *BudgetError) Unwrap() error { return ErrBudgetExhausted }

// sleep waits d, or less if ctx is done first. When ctx's deadline comes no
// later than d from now, it does not wait at all and returns a BudgetError,
// as it does if the deadline passes all the same (a late timer); when ctx
// is cancelled it returns ctx's error. asleep, if not nil, is called once
// the timer is set (tests use it).
func sleep(ctx context.Context, d time.Duration, asleep func()) error {
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) <= d {
		return &BudgetError{RetryAfter: d}
	}
	wake := time.Now().Add(d)
	t := time.NewTimer(d)
	defer t.Stop()
	if asleep != nil {
		asleep()
	}
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return late(ctx.Err(), max(time.Until(wake), 0))
	}
}

// late returns the error of a Wait whose ctx ended with err after it had
// decided to wait: a BudgetError if the deadline passed (no token in time),
// else err.
func late(err error, retryAfter time.Duration) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return &BudgetError{RetryAfter: retryAfter}
	}
	return err
}

// MemoryBudget is a Budget kept in this process, on
// golang.org/x/time/rate reservations: a waiter reserves its token, and
// gives it back if it cannot wait for it or gives up.
type MemoryBudget struct {
	network string
	keys    *table[budgetEntry]
	metrics *Metrics
	asleep  func() // called when a waiter starts sleeping; for tests
}

type budgetEntry struct {
	bucket
	pausedUntil time.Time
}

var _ Budget = (*MemoryBudget)(nil)

// NewMemoryBudget returns a MemoryBudget configured by opts (Network,
// MaxKeys, Metrics).
func NewMemoryBudget(opts Options) (*MemoryBudget, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	return newMemoryBudget(opts), nil
}

func newMemoryBudget(opts Options) *MemoryBudget {
	idle := func(e *budgetEntry, now time.Time) bool {
		return !now.Before(e.pausedUntil) && bucketFull(&e.bucket, now)
	}
	return &MemoryBudget{network: opts.Network, keys: newTable(opts.MaxKeys, idle), metrics: opts.Metrics}
}

// Wait implements Budget.
func (b *MemoryBudget) Wait(ctx context.Context, key string, l Limit) error {
	start := time.Now()
	waited, err := b.wait(ctx, key, l)
	b.record(key, start, waited, err)
	return err
}

func (b *MemoryBudget) record(key string, start time.Time, waited bool, err error) {
	var be *BudgetError
	switch {
	case err == nil && waited:
		b.metrics.budgetGranted(b.network, key, time.Since(start))
	case err == nil:
		b.metrics.budgetGranted(b.network, key, 0)
	case errors.As(err, &be):
		b.metrics.budgetRefused(b.network, key)
	}
}

func (b *MemoryBudget) wait(ctx context.Context, key string, l Limit) (waited bool, err error) {
	if err := l.Validate(); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	holding := false // a token is ours; only a pause can still hold us back
	for {
		now := time.Now()
		lim, pausedUntil := b.state(key, l, now)
		if now.Before(pausedUntil) {
			if err := sleep(ctx, pausedUntil.Sub(now), b.asleep); err != nil {
				return waited, err
			}
			waited = true
			continue
		}
		if holding || lim == nil {
			return waited, nil
		}
		r := lim.ReserveN(now, 1)
		d := r.DelayFrom(now)
		if d == 0 {
			return waited, nil
		}
		if err := sleep(ctx, d, b.asleep); err != nil {
			r.CancelAt(time.Now())
			return waited, err
		}
		waited, holding = true, true
		// Look again: an upstream 429 may have paused key meanwhile.
	}
}

// state returns key's limiter (nil when l is unlimited) and the end of its
// pause.
func (b *MemoryBudget) state(key string, l Limit, now time.Time) (*rate.Limiter, time.Time) {
	s := b.keys.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	e, _ := s.get(key, now)
	if l.Unlimited() {
		return nil, e.pausedUntil
	}
	e.adopt(l, now)
	return e.lim, e.pausedUntil
}

// Pause implements Budget.
func (b *MemoryBudget) Pause(key string, d time.Duration) {
	if d <= 0 {
		return
	}
	now := time.Now()
	s := b.keys.shard(key)
	s.mu.Lock()
	e, _ := s.get(key, now)
	if until := now.Add(d); until.After(e.pausedUntil) {
		e.pausedUntil = until
	}
	s.mu.Unlock()
}

// pauseScript sets a pause of ARGV[1] milliseconds unless a longer one is
// already set, and returns the pause left in milliseconds.
var pauseScript = redis.NewScript(`
local left = redis.call("PTTL", KEYS[1])
local want = tonumber(ARGV[1])
if left < want then
  redis.call("SET", KEYS[1], "1", "PX", want)
  return want
end
return left
`)

// pauseTimeout bounds the Redis call of Pause, which has no context.
const pauseTimeout = 2 * time.Second

// RedisBudget is a Budget kept in Redis and shared by every replica: the
// buckets run the GCRA of redis_rate (a refused call learns how long until
// its token, waits that long within its deadline, and tries again), and a
// pause is a key with a PX expiry, so that an upstream 429 seen by one
// replica pauses them all. Pauses are kept locally too. While Redis fails
// it follows Options.FailMode like Redis, waiting on a local MemoryBudget in
// FailOpen mode.
type RedisBudget struct {
	client   redis.UniversalClient
	gcra     *redis_rate.Limiter
	rateKey  string
	pauseKey string
	fb       *fallback
	local    *MemoryBudget // the FailOpen fallback; it also records the metrics
	metrics  *Metrics
}

var _ Budget = (*RedisBudget)(nil)

// NewRedisBudget returns a RedisBudget on client configured by opts
// (Network, Prefix, FailMode, RetryInterval, MaxKeys for the local
// fallback, Now for the retry schedule, Metrics, Logger).
func NewRedisBudget(client redis.UniversalClient, opts Options) (*RedisBudget, error) {
	if client == nil {
		return nil, errors.New("ratelimit: nil redis client")
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	return &RedisBudget{
		client:   client,
		gcra:     redis_rate.NewLimiter(unprefixed{client}),
		rateKey:  opts.Prefix + "budget:" + opts.Network + ":",
		pauseKey: opts.Prefix + "pause:" + opts.Network + ":",
		fb:       newFallback(opts, "budget"),
		local:    newMemoryBudget(opts),
		metrics:  opts.Metrics,
	}, nil
}

// Wait implements Budget. In FailClosed mode it returns an error wrapping
// ErrUnavailable while Redis fails.
func (b *RedisBudget) Wait(ctx context.Context, key string, l Limit) error {
	start := time.Now()
	waited, err := b.wait(ctx, key, l)
	b.local.record(key, start, waited, err)
	return err
}

func (b *RedisBudget) wait(ctx context.Context, key string, l Limit) (waited bool, err error) {
	if err := l.Validate(); err != nil {
		return false, err
	}
	var slept time.Duration // the last wait
	for {
		if err := ctx.Err(); err != nil {
			if waited { // the deadline passed while we waited or asked again
				err = late(err, slept)
			}
			return waited, err
		}
		if !b.fb.try() {
			return b.fallback(ctx, key, l, waited, nil)
		}
		d, err := b.next(ctx, key, l)
		if err != nil {
			if ctxErr := ctx.Err(); ctxErr != nil {
				if waited { // another replica took the token we waited for
					ctxErr = late(ctxErr, slept)
				}
				return waited, ctxErr
			}
			b.fb.failed("budget", err)
			return b.fallback(ctx, key, l, waited, err)
		}
		b.fb.succeeded()
		if d == 0 {
			return waited, nil
		}
		if err := sleep(ctx, d, b.local.asleep); err != nil {
			return waited, err
		}
		waited, slept = true, d
	}
}

// next takes a token for key if it has one and is not paused, and returns
// zero; otherwise it returns how long to wait before trying again.
func (b *RedisBudget) next(ctx context.Context, key string, l Limit) (time.Duration, error) {
	left, err := b.client.PTTL(ctx, b.pauseKey+key).Result()
	if err != nil {
		return 0, err
	}
	if left > 0 {
		return left, nil
	}
	if l.Unlimited() {
		return 0, nil
	}
	res, err := b.gcra.Allow(ctx, b.rateKey+key, gcraLimit(l))
	if err != nil {
		return 0, err
	}
	if res.Allowed > 0 {
		return 0, nil
	}
	return max(res.RetryAfter, time.Millisecond), nil
}

func (b *RedisBudget) fallback(ctx context.Context, key string, l Limit, waited bool, cause error) (bool, error) {
	b.metrics.fallback(b.fb.mode)
	if b.fb.mode == FailClosed {
		return waited, unavailable(cause)
	}
	w, err := b.local.wait(ctx, key, l)
	return waited || w, err
}

// Pause implements Budget: it pauses key on this replica and, through
// Redis, on every other.
func (b *RedisBudget) Pause(key string, d time.Duration) {
	if d <= 0 {
		return
	}
	b.local.Pause(key, d)
	if !b.fb.try() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), pauseTimeout)
	defer cancel()
	ms := max((d+time.Millisecond-1)/time.Millisecond, 1)
	if err := pauseScript.Run(ctx, b.client, []string{b.pauseKey + key}, int64(ms)).Err(); err != nil {
		b.fb.failed("pause", err)
		return
	}
	b.fb.succeeded()
}
