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
	// FirstUse, if non-nil, is a replay record's check, made first and
	// recorded only when every check admits the request.
	FirstUse *AdmitFirstUse
}

// AdmitFirstUse is the replay record's part of an Admission: the first use
// of a signature, kept for TTL. A use seen before is refused (ErrSeen)
// unless first seen less than Grace before At; an unseen one is refused
// (ErrGroupFull) while its group's first uses kept (those of the current
// and the previous period of TTL, Counts) are at Most (> 0). Its keys must
// share the Admission's hash tag (a team's). Nothing is recorded for a
// request a check refuses.
type AdmitFirstUse struct {
	Key    string    // holds the time of the first use
	Counts [2]string // the group's first uses in the current and the previous period
	At     time.Time
	TTL    time.Duration
	Grace  time.Duration
	Most   int
}

// The refusals of an Admission's FirstUse, made before any rate or quota
// is taken.
var (
	ErrSeen      = errors.New("ratelimit: first use seen before")
	ErrGroupFull = errors.New("ratelimit: the group's first uses are at their most")
)

// AdmitRate is one rate of an Admission: a Limiter key and its limit.
type AdmitRate struct {
	Key   string
	Limit Limit
}

// Admitter makes a request's checks in one call.
type Admitter interface {
	// Admit returns the decisions of adm's checks in order, up to the
	// first that refuses (rates first, the quota last), after adm's
	// FirstUse, if any, which refuses with ErrSeen or ErrGroupFull before
	// any decision is made and is recorded if every check admits. ErrAdmitApart
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
// DailyKey share the team's, as do auth.RedisReplay's). The replay record's
// check (Admission.FirstUse) runs in the same call: a signed request's
// admission is one round trip. While Redis fails it answers ErrAdmitApart
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

// admitScript: KEYS the rates' keys, then the quota's (when it has a
// limit), then the first use's three (when checked); ARGV the number of
// rates, then burst, rate (events per period) and period (seconds) of
// each, then the quota's limit (0: none) and the expiry of its day, then
// whether a first use is checked (1) and its time, ttl and grace (ms) and
// its group's most (0: none). It answers the first use's outcome (0 none
// checked, 1 unseen, 2 seen within the grace, 3 seen before: refused, 4
// the group at its most: refused), then one {allowed, remaining,
// retry_after, reset_after} per rate made and {allowed, count} for the
// quota, stopping at the first refusal; an unseen first use is recorded
// only when none refused. The rates are redis_rate's GCRA, on Redis's
// clock; the first use is on the caller's (the replay record's times are
// the requests').
var admitScript = redis.NewScript(`
redis.replicate_commands()
local t = redis.call("TIME")
local now = (t[1] - 1483228800) + (t[2] / 1000000)
local nrates = tonumber(ARGV[1])
local out = {0}
local a = 2
local q = 2 + 3 * nrates
local f = q + 2
local fk = nrates + 1
if tonumber(ARGV[q]) > 0 then fk = fk + 1 end
local fresh = false
if ARGV[f] == "1" then
  local at = tonumber(ARGV[f + 1])
  local first = redis.call("GET", KEYS[fk])
  if first then
    if at - tonumber(first) >= tonumber(ARGV[f + 3]) then
      return {3}
    end
    out[1] = 2
  else
    local most = tonumber(ARGV[f + 4])
    if most > 0 then
      local n = tonumber(redis.call("GET", KEYS[fk + 1]) or "0") + tonumber(redis.call("GET", KEYS[fk + 2]) or "0")
      if n >= most then
        return {4}
      end
    end
    fresh = true
    out[1] = 1
  end
end
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
if fresh then
  local ttl = tonumber(ARGV[f + 2])
  redis.call("SET", KEYS[fk], ARGV[f + 1], "PX", ttl)
  redis.call("INCR", KEYS[fk + 1])
  redis.call("PEXPIRE", KEYS[fk + 1], 2 * ttl)
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
	if fu := adm.FirstUse; fu != nil {
		keys = append(keys, fu.Key, fu.Counts[0], fu.Counts[1])
		args = append(args, 1, fu.At.UnixMilli(), max(fu.TTL.Milliseconds(), 1), fu.Grace.Milliseconds(), max(fu.Most, 0))
	} else {
		args = append(args, 0)
	}
	v, err := admitScript.Run(ctx, a.client, keys, args...).Slice()
	if err == nil {
		var ds []Decision
		if ds, err = a.decisions(adm, v, left); err == nil || errors.Is(err, ErrSeen) || errors.Is(err, ErrGroupFull) {
			return ds, err
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
	if len(v) == 0 {
		return nil, errors.New("ratelimit: empty answer of the admission script")
	}
	switch first, _ := v[0].(int64); {
	case first == 3:
		return nil, ErrSeen
	case first == 4:
		return nil, ErrGroupFull
	case first < 0 || first > 2 || (first == 0) != (adm.FirstUse == nil):
		return nil, fmt.Errorf("ratelimit: admission script answered %v for the first use", v[0])
	}
	v = v[1:]
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
