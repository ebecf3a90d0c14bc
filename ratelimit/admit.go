package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Admission is a request's checks, made in order until one refuses: its
// rates (a key's, then its team's), then its daily quota.
type Admission struct {
	Rates []AdmitRate
	// DailyKey and Daily are the daily quota's key and limit; Daily 0:
	// none.
	DailyKey string
	Daily    int64
	Now      time.Time // the quota's day
}

// AdmitRate is one rate of an Admission: a Limiter key and its limit.
type AdmitRate struct {
	Key   string
	Limit Limit
}

// Admitter makes a request's checks in one call.
type Admitter interface {
	// Admit returns the decisions of adm's checks in order, up to the
	// first that refuses (rates first, the quota last). ErrAdmitApart
	// means it could not: make the checks one by one with the Limiter
	// and the Quota, which follow their fail mode.
	Admit(ctx context.Context, adm Admission) ([]Decision, error)
}

// ErrAdmitApart is Admit's answer when the checks must be made one by one.
var ErrAdmitApart = errors.New("ratelimit: admission not made in one call")

// RedisAdmitter makes the checks of a Redis Limiter and a RedisQuota in one
// script call: one round trip per request instead of one per check. The
// script keeps the Limiter's GCRA (that of redis_rate, on the same keys:
// the two paths share every bucket) and the Quota's daily count, and
// consumes exactly what the checks one by one would: a rate that admits
// takes its token even if a later check refuses. On a Redis Cluster every
// key of one call must share a hash tag (TeamRateKey, KeyRateKey and
// DailyKey share the team's). While Redis fails it answers ErrAdmitApart
// at once, and the Limiter and Quota decide as their fail mode says.
type RedisAdmitter struct {
	client redis.UniversalClient
	rates  *Redis
	quota  *RedisQuota
}

// NewRedisAdmitter returns the RedisAdmitter of rates and quota, which
// must use the same client.
func NewRedisAdmitter(rates *Redis, quota *RedisQuota) *RedisAdmitter {
	return &RedisAdmitter{client: quota.client, rates: rates, quota: quota}
}

// admitScript: KEYS the rates' keys, then the quota's; ARGV the number of
// rates, then burst, rate (events per period) and period (seconds) of
// each, then the quota's limit (0: none) and the expiry of its day. It
// answers one {allowed, remaining, retry_after, reset_after} per rate made
// and {allowed, count} for the quota, stopping at the first refusal. The
// rates are redis_rate's GCRA, on Redis's clock.
var admitScript = redis.NewScript(`
redis.replicate_commands()
local t = redis.call("TIME")
local now = (t[1] - 1483228800) + (t[2] / 1000000)
local nrates = tonumber(ARGV[1])
local out = {}
local a = 2
for i = 1, nrates do
  local burst, rate, period = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  a = a + 3
  local interval = period / rate
  local tat = redis.call("GET", KEYS[i])
  if not tat then tat = now else tat = tonumber(tat) end
  tat = math.max(tat, now)
  local new_tat = tat + interval
  local diff = now - (new_tat - interval * burst)
  local remaining = diff / interval
  if remaining < 0 then
    out[#out + 1] = {0, 0, tostring(-diff), tostring(tat - now)}
    return out
  end
  local reset_after = new_tat - now
  if reset_after > 0 then
    redis.call("SET", KEYS[i], new_tat, "EX", math.ceil(reset_after))
  end
  out[#out + 1] = {1, remaining, "-1", tostring(reset_after)}
end
local limit = tonumber(ARGV[a])
if limit > 0 then
  local k = KEYS[nrates + 1]
  local count = tonumber(redis.call("GET", k) or "0")
  if count >= limit then
    out[#out + 1] = {0, count}
    return out
  end
  count = redis.call("INCR", k)
  if count == 1 then
    redis.call("EXPIREAT", k, ARGV[a + 1])
  end
  out[#out + 1] = {1, count}
end
return out
`)

// Admit implements Admitter.
func (a *RedisAdmitter) Admit(ctx context.Context, adm Admission) ([]Decision, error) {
	for _, r := range adm.Rates {
		if err := r.Limit.Validate(); err != nil || r.Limit.Unlimited() {
			return nil, ErrAdmitApart // the one-by-one path answers these
		}
	}
	// While either decides without Redis, the checks go one by one: the
	// Limiter and the Quota probe Redis again themselves.
	if a.rates.fb.down.Load() || a.quota.fb.down.Load() {
		return nil, ErrAdmitApart
	}
	keys := make([]string, 0, len(adm.Rates)+1)
	args := make([]any, 0, 3+3*len(adm.Rates))
	args = append(args, len(adm.Rates))
	for _, r := range adm.Rates {
		g := gcraLimit(r.Limit)
		keys = append(keys, a.rates.prefix+r.Key)
		args = append(args, g.Burst, g.Rate, g.Period.Seconds())
	}
	var left time.Duration
	if adm.Daily > 0 {
		today, l := dayOf(adm.Now)
		left = l
		keys = append(keys, a.quota.dayKey(adm.DailyKey, adm.Now))
		args = append(args, adm.Daily, (today+1)*86400+int64(quotaGrace/time.Second))
	} else {
		args = append(args, 0, 0)
	}
	v, err := admitScript.Run(ctx, a.client, keys, args...).Slice()
	if err == nil {
		var ds []Decision
		if ds, err = a.decisions(adm, v, left); err == nil {
			return ds, nil
		}
	}
	if !redisFailed(ctx, err) {
		return nil, err
	}
	// Both fall back: the next calls of either go to their local limits
	// for their retry interval, without waiting for Redis again.
	a.rates.fb.failed("admit", err)
	a.quota.fb.failed("admit", err)
	return nil, ErrAdmitApart
}

// decisions reads the script's answer, recording each decision as the
// Limiter and the Quota record theirs.
func (a *RedisAdmitter) decisions(adm Admission, v []any, left time.Duration) ([]Decision, error) {
	ds := make([]Decision, 0, len(v))
	for i, e := range v {
		f, ok := e.([]any)
		if !ok {
			return nil, fmt.Errorf("ratelimit: admission script answered %T", e)
		}
		if i < len(adm.Rates) {
			if len(f) != 4 {
				return nil, fmt.Errorf("ratelimit: admission script answered %d values for a rate", len(f))
			}
			allowed, _ := f[0].(int64)
			remaining, _ := f[1].(int64)
			retry, err1 := parseSeconds(f[2])
			reset, err2 := parseSeconds(f[3])
			if err := errors.Join(err1, err2); err != nil {
				return nil, fmt.Errorf("ratelimit: admission script: %w", err)
			}
			d := Decision{Allowed: allowed == 1, Limit: adm.Rates[i].Limit, Remaining: int(max(remaining, 0)), Reset: max(reset, 0)}
			if !d.Allowed {
				d.RetryAfter = max(retry, 0)
			}
			a.rates.metrics.record(d, nil)
			ds = append(ds, d)
			continue
		}
		if len(f) != 2 || adm.Daily <= 0 {
			return nil, errors.New("ratelimit: unexpected quota answer of the admission script")
		}
		allowed, _ := f[0].(int64)
		count, _ := f[1].(int64)
		d := quotaDecision(adm.Daily, count, allowed == 1, left)
		a.quota.metrics.record(d, nil)
		ds = append(ds, d)
	}
	return ds, nil
}

// parseSeconds reads a number of seconds the script sent as a string.
func parseSeconds(v any) (time.Duration, error) {
	s, ok := v.(string)
	if !ok {
		return 0, fmt.Errorf("seconds as %T", v)
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, err
	}
	return time.Duration(f * float64(time.Second)), nil
}
