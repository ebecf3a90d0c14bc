package ratelimit

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// Quota counts events per key and UTC day. Take counts one event at now if
// fewer than limit were counted that day; refused events are not counted.
// A limit <= 0 means no quota: every event is allowed and nothing is
// counted. The Decision's Limit is {Rate: limit/86400, Burst: limit}, so
// that SetHeaders advertises q=limit;w=86400; Reset is the time left until
// the end of the UTC day, and so is RetryAfter when refused.
// Implementations are safe for concurrent use.
type Quota interface {
	Take(ctx context.Context, key string, limit int64, now time.Time) (Decision, error)
	// Used returns how many events of key were counted in now's UTC day,
	// without counting one (for a status page).
	Used(ctx context.Context, key string, now time.Time) (int64, error)
}

// dayOf returns the number of the UTC day of t and the time left in it.
func dayOf(t time.Time) (n int64, left time.Duration) {
	sec := t.Unix()
	n = sec / 86400
	if sec%86400 < 0 {
		n--
	}
	return n, time.Unix((n+1)*86400, 0).Sub(t)
}

func quotaDecision(limit, count int64, allowed bool, left time.Duration) Decision {
	d := Decision{
		Allowed:   allowed,
		Limit:     Limit{Rate: float64(limit) / 86400, Burst: int(limit)},
		Remaining: int(max(limit-count, 0)),
		Reset:     left,
	}
	if !allowed {
		d.RetryAfter = left
	}
	return d
}

// MemoryQuota is a Quota counted in this process. It keeps only the latest
// day of each key. It is safe for concurrent use; its memory is bounded by
// Options.MaxKeys, and a key whose day is over loses nothing when dropped.
type MemoryQuota struct {
	keys    *table[dayCount]
	metrics decisionCounters
}

type dayCount struct {
	day   int64
	count int64
}

var _ Quota = (*MemoryQuota)(nil)

// NewMemoryQuota returns a MemoryQuota configured by opts (Name, MaxKeys,
// Metrics).
func NewMemoryQuota(opts Options) (*MemoryQuota, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	return newMemoryQuota(opts, opts.Metrics), nil
}

func newMemoryQuota(opts Options, m *Metrics) *MemoryQuota {
	idle := func(c *dayCount, now time.Time) bool {
		d, _ := dayOf(now)
		return c.day < d
	}
	return &MemoryQuota{keys: newTable(opts.MaxKeys, idle), metrics: m.decisionCounters(opts.Name)}
}

// Take counts one event of key at now, if fewer than limit were counted in
// now's UTC day.
func (q *MemoryQuota) Take(_ context.Context, key string, limit int64, now time.Time) (Decision, error) {
	d := q.take(key, limit, now)
	q.metrics.record(d, nil)
	return d, nil
}

// Used implements Quota.
func (q *MemoryQuota) Used(_ context.Context, key string, now time.Time) (int64, error) {
	today, _ := dayOf(now)
	s := q.keys.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if it, ok := s.items[key]; ok && it.val.day == today {
		return it.val.count, nil
	}
	return 0, nil
}

func (q *MemoryQuota) take(key string, limit int64, now time.Time) Decision {
	if limit <= 0 {
		return Decision{Allowed: true}
	}
	today, left := dayOf(now)
	s := q.keys.shard(key)
	s.mu.Lock()
	c, _ := s.get(key, now)
	if today > c.day {
		*c = dayCount{day: today}
	}
	// An event stamped before the key's day (a request that started just
	// before midnight) counts into that day rather than resetting it.
	allowed := c.count < limit
	if allowed {
		c.count++
	}
	count := c.count
	s.mu.Unlock()
	return quotaDecision(limit, count, allowed, left)
}

// quotaGrace keeps a day's counter in Redis a little past the end of the
// day, so that a replica whose clock is behind Redis's never counts into a
// key that Redis has already expired.
const quotaGrace = time.Hour

// takeScript counts one event unless the limit is reached. KEYS[1] is the
// day's counter, ARGV[1] the limit, ARGV[2] the Unix time it expires.
var takeScript = redis.NewScript(`
local count = tonumber(redis.call("GET", KEYS[1]) or "0")
if count >= tonumber(ARGV[1]) then
  return {0, count}
end
count = redis.call("INCR", KEYS[1])
if count == 1 then
  redis.call("EXPIREAT", KEYS[1], ARGV[2])
end
return {1, count}
`)

// RedisQuota is a Quota counted in Redis and shared by every replica: one
// key per key and UTC day (INCR, with EXPIREAT at the end of the day plus
// an hour of grace), updated by one Lua script call per event. While Redis
// fails it follows Options.FailMode like Redis. It is safe for concurrent
// use.
type RedisQuota struct {
	client   redis.UniversalClient
	prefix   string
	fb       *fallback
	local    *MemoryQuota
	metrics  decisionCounters
	interval time.Duration
}

var _ Quota = (*RedisQuota)(nil)

// NewRedisQuota returns a RedisQuota on client configured by opts (Name,
// Prefix, FailMode, RetryInterval, MaxKeys, Now for the retry schedule,
// Metrics, Logger).
func NewRedisQuota(client redis.UniversalClient, opts Options) (*RedisQuota, error) {
	if client == nil {
		return nil, errors.New("ratelimit: nil redis client")
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	return &RedisQuota{
		client:   client,
		prefix:   opts.Prefix + "quota:",
		fb:       newFallback(opts, "quota").follow(client),
		local:    newMemoryQuota(opts, nil),
		metrics:  opts.Metrics.decisionCounters(opts.Name),
		interval: opts.RetryInterval,
	}, nil
}

// Take counts one event of key at now in Redis, if fewer than limit were
// counted in now's UTC day. Errors are as for Redis.Allow.
func (q *RedisQuota) Take(ctx context.Context, key string, limit int64, now time.Time) (Decision, error) {
	d, err := q.take(ctx, key, limit, now)
	q.metrics.record(d, err)
	return d, err
}

// Used implements Quota: the count shared by every replica, read from
// Redis (while Redis fails, the error; the caller may show the local count).
func (q *RedisQuota) Used(ctx context.Context, key string, now time.Time) (int64, error) {
	n, err := q.client.Get(ctx, q.dayKey(key, now)).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return n, err
}

// dayKey is the Redis key of key's count in now's UTC day.
func (q *RedisQuota) dayKey(key string, now time.Time) string {
	today, _ := dayOf(now)
	return q.prefix + key + ":" + time.Unix(today*86400, 0).UTC().Format(time.DateOnly)
}

func (q *RedisQuota) take(ctx context.Context, key string, limit int64, now time.Time) (Decision, error) {
	if limit <= 0 {
		return Decision{Allowed: true}, nil
	}
	if !q.fb.try() {
		return q.fallback(key, limit, now, nil)
	}
	today, left := dayOf(now)
	k := q.dayKey(key, now)
	expireAt := (today+1)*86400 + int64(quotaGrace/time.Second)
	res, err := takeScript.Run(ctx, q.client, []string{k}, limit, expireAt).Int64Slice()
	if err == nil && len(res) != 2 {
		err = errors.New("ratelimit: unexpected reply of the quota script")
	}
	if err != nil {
		if !redisFailed(ctx, err) {
			return Decision{}, err
		}
		q.fb.failed("quota", err)
		return q.fallback(key, limit, now, err)
	}
	q.fb.succeeded()
	return quotaDecision(limit, res[1], res[0] == 1, left), nil
}

func (q *RedisQuota) fallback(key string, limit int64, now time.Time, cause error) (Decision, error) {
	q.fb.metrics.fallback(q.fb.mode)
	if q.fb.mode == FailClosed {
		_, left := dayOf(now)
		return Decision{Limit: Limit{Rate: float64(limit) / 86400, Burst: int(limit)}, RetryAfter: min(q.interval, left)}, unavailable(cause)
	}
	return q.local.take(key, limit, now), nil
}
