package ratelimit

import (
	"context"
	"time"

	"golang.org/x/time/rate"
)

// Memory is a Limiter that keeps one golang.org/x/time/rate token bucket
// per key in this process. It is safe for concurrent use. Its memory is
// bounded by Options.MaxKeys (see there).
//
// When the Limit passed for a key changes (a configuration reload), the
// key's bucket adopts it and keeps its tokens (capped at the new burst).
type Memory struct {
	now     func() time.Time
	keys    *table[bucket]
	metrics decisionCounters
}

type bucket struct {
	lim   *rate.Limiter
	limit Limit
}

var _ Limiter = (*Memory)(nil)

// NewMemory returns a Memory limiter configured by opts (Name, MaxKeys,
// Now, Metrics).
func NewMemory(opts Options) (*Memory, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	return newMemory(opts, opts.Metrics), nil
}

func newMemory(opts Options, m *Metrics) *Memory {
	return &Memory{
		now:     opts.Now,
		keys:    newTable(opts.MaxKeys, bucketFull),
		metrics: m.decisionCounters(opts.Name),
	}
}

// bucketFull reports whether b is as good as new at now.
func bucketFull(b *bucket, now time.Time) bool {
	return b.lim == nil || b.lim.TokensAt(now) >= float64(b.limit.Burst)
}

// Allow takes one token from key's bucket at Options.Now, if there is one.
// It returns an error only for an invalid l.
func (m *Memory) Allow(_ context.Context, key string, l Limit) (Decision, error) {
	d, err := m.allow(key, l, m.now())
	m.metrics.record(d, err)
	return d, err
}

func (m *Memory) allow(key string, l Limit, now time.Time) (Decision, error) {
	if err := l.Validate(); err != nil {
		return Decision{Limit: l}, err
	}
	if l.Unlimited() {
		return Decision{Allowed: true, Limit: l, Remaining: l.Burst}, nil
	}
	s := m.keys.shard(key)
	s.mu.Lock()
	b, _ := s.get(key, now)
	b.adopt(l, now)
	ok := b.lim.AllowN(now, 1)
	tokens := b.lim.TokensAt(now)
	s.mu.Unlock()
	return decide(l, ok, tokens), nil
}

// adopt makes b apply l, creating its limiter if needed.
func (b *bucket) adopt(l Limit, now time.Time) {
	switch {
	case b.lim == nil:
		b.lim = rate.NewLimiter(rate.Limit(l.Rate), l.Burst)
	case b.limit == l:
		return
	default:
		b.lim.SetLimitAt(now, rate.Limit(l.Rate))
		b.lim.SetBurstAt(now, l.Burst)
	}
	b.limit = l
}

// decide builds the Decision of a bucket under l that has tokens left after
// the event was allowed (ok) or refused.
func decide(l Limit, ok bool, tokens float64) Decision {
	d := Decision{Allowed: ok, Limit: l, Reset: l.durationFor(float64(l.Burst) - tokens)}
	if tokens >= 1 {
		d.Remaining = int(tokens)
	}
	if !ok {
		d.RetryAfter = l.durationFor(1 - tokens)
	}
	return d
}
