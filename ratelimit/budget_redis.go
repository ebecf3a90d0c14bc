// This file holds RedisBudget, the upstream budget shared by every replica
// through Redis: its scripts, and its fallback to a local MemoryBudget.

package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

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

// budgetScript is a Budget's step in Redis, on Redis's clock: it brings the
// rate learned from upstream 429s (KEYS[3], a hash) up to date by the
// rules of adapt.go, and then, for ARGV[4] "throttle", slows it from the
// observed rate (KEYS[4], a hash: the gaps between granted calls); for
// "wait" it reserves the caller's token of the GCRA bucket (KEYS[1]: its
// theoretical arrival time in seconds since 2017-01-01, as
// github.com/go-redis/redis_rate keeps it) whose tokens come 1/rate +
// margin apart, no sooner than the end of the pause (KEYS[2]), unless
// that is ARGV[14] seconds away or more (the caller's deadline; < 0: none),
// and counts it in the observed rate. It returns {seconds until the token
// (or the end of the pause), rate in force, direction of a change or "",
// "1" if the token is reserved for the caller, else "0"}: a caller sleeps
// its wait and goes, without asking again.
//
// The state read from Redis is not trusted (see the script's comment): a
// rate in force written too high cannot raise the calls above the
// configured rate, nor one <= 0 or not a number break the script, and
// the state always expires.
//
// ARGV: 1 configured rate, 2 burst, 3 margin (s), 4 "wait" or "throttle",
// 5 hold (s), 6 recovery step every (s), 7 ceiling step every (s), 8
// steps, 9 floor divisor, 10 state ttl (ms), 11 floor (rps), 12 observed
// span (s), 13 gaps the observed rate needs, 14 most wait (s; < 0: none),
// 15 queue horizon (s).
var budgetScript = redis.NewScript(`
redis.replicate_commands()
local t = redis.call("TIME")
local now = (t[1] - 1483228800) + t[2] / 1000000
local rate, burst, margin, op = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local hold, every, ceilEvery = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local steps = tonumber(ARGV[8])
local floor = math.min(rate / tonumber(ARGV[9]), tonumber(ARGV[11]))
local span, least = tonumber(ARGV[12]), tonumber(ARGV[13])

-- The state is read as untrusted: whoever can write to the Redis can
-- write it. A rate that is not a finite number > 0 resets it; the rates
-- are clamped to [floor, rate] (ceil no lower than eff), the times to
-- [0, now]; a state without an expiry (or a longer one) gets one.
local function num(v)
  local n = tonumber(v)
  if n == nil or n ~= n or n == math.huge or n == -math.huge then
    return nil
  end
  return n
end
local function at(v)
  local n = num(v)
  if n == nil or n < 0 then
    return 0
  end
  return math.min(n, now)
end
local s = redis.call("HMGET", KEYS[3], "rate", "eff", "ceil", "changed", "down", "lifted")
local eff, ceil, changed, down, lifted = rate, rate, 0, 0, 0
local dir, dirty = "", false
if s[1] then
  local e, c = num(s[2]), num(s[3])
  if num(s[1]) == rate and e and c and e > 0 and c > 0 then
    eff = math.min(math.max(e, floor), rate)
    ceil = math.min(math.max(c, eff), rate)
    changed, down, lifted = at(s[4]), at(s[5]), at(s[6])
  else
    dirty = true -- another rate's state, or a broken one: reset
  end
  local ttl = redis.call("PTTL", KEYS[3])
  if ttl < 0 or ttl > tonumber(ARGV[10]) then
    dirty = true
  end
end
if ceil < rate then
  local n = math.floor((now - math.max(down, lifted)) / ceilEvery)
  if n > 0 then
    ceil, lifted, dirty = math.min(rate, ceil * (1 + 1 / steps) ^ n), now, true
  end
end
if eff < ceil then
  local n = math.floor((now - changed) / every)
  if n > 0 then
    eff, changed, dir, dirty = math.min(ceil, eff + n * ceil / steps), now, "up", true
  end
end
-- The observed rate: n gaps between granted calls summing to sum seconds.
local o = redis.call("HMGET", KEYS[4], "last", "sum", "n")
local olast, osum, on = num(o[1]) or 0, num(o[2]), num(o[3])
if osum == nil or osum < 0 or on == nil or on < 0 then
  osum, on = 0, 0
end
osum, on = math.min(osum, 2 * span), math.min(on, 1e9)
if op == "throttle" and (down == 0 or now - down >= hold) then
  local base = eff
  if on >= least and osum > 0 and on / osum < base then
    base = on / osum
  end
  ceil = math.max(floor, base - base / steps)
  eff = math.max(floor, base / 2)
  ceil = math.max(ceil, eff)
  down, changed, dir, dirty = now, now, "down", true
end
if dirty then
  if eff >= rate and ceil >= rate then
    redis.call("DEL", KEYS[3])
  else
    redis.call("HSET", KEYS[3], "rate", rate, "eff", eff, "ceil", ceil, "changed", changed, "down", down, "lifted", lifted)
    redis.call("PEXPIRE", KEYS[3], ARGV[10])
  end
end
if op == "throttle" then
  return {"0", tostring(eff), dir, "1"}
end

local pauseEnd = now
local left = redis.call("PTTL", KEYS[2])
if left > 0 then
  pauseEnd = now + left / 1000
end
local interval = 1 / eff + margin
-- Reservations reach no further than the horizon past the pause: a time
-- of arrival beyond it (and the burst's reach) is not one this script
-- wrote, and is ignored.
local horizon = math.max(burst * interval, tonumber(ARGV[15]))
local tat = num(redis.call("GET", KEYS[1])) or now
if tat > pauseEnd + horizon + burst * interval then
  tat = now
end
tat = math.max(tat, now)
local go = math.max(tat - (burst - 1) * interval, now, pauseEnd)
local mostWait = tonumber(ARGV[14])
if (mostWait >= 0 and go - now >= mostWait) or go - pauseEnd >= horizon then
  return {tostring(go - now), tostring(eff), dir, "0"}
end
local new = math.max(tat, go) + interval
-- The last departure counted is no later than the one reserved last.
olast = math.min(math.max(olast, 0), math.max(tat, pauseEnd))
redis.call("SET", KEYS[1], new, "PX", math.ceil((new - now) * 1000) + 1)
if olast > 0 and go - olast < span then
  osum, on = osum + math.max(go - olast, 0), on + 1
  if osum > span then
    osum, on = osum / 2, on / 2
  end
end
redis.call("HSET", KEYS[4], "last", math.max(go, olast), "sum", osum, "n", on)
redis.call("PEXPIRE", KEYS[4], ARGV[10])
return {tostring(go - now), tostring(eff), dir, "1"}
`)

// pauseTimeout bounds the Redis calls of Pause and Throttled, which have
// no context.
const pauseTimeout = 2 * time.Second

// RedisBudget is a Budget kept in Redis and shared by every replica: the
// buckets run a GCRA in a script of their own (one call per Wait: it
// reserves the caller's token and answers how long until it, which the
// caller sleeps locally), the rate learned from upstream 429s is kept beside them, and a
// pause is a key with a PX expiry, so that an upstream 429 seen by one
// replica pauses and slows them all. Pauses are kept locally too. While
// Redis fails it follows Options.FailMode like Redis, waiting on a local
// MemoryBudget in FailOpen mode.
type RedisBudget struct {
	client   redis.UniversalClient
	network  string
	margin   time.Duration
	rateKey  string
	pauseKey string
	adaptKey string
	seenKey  string
	fb       *fallback
	local    *MemoryBudget // the FailOpen fallback; it also records the metrics
	metrics  *Metrics
	log      *zap.Logger
}

var _ Budget = (*RedisBudget)(nil)

// NewRedisBudget returns a RedisBudget on client configured by opts
// (Network, Prefix, FailMode, RetryInterval, BudgetMargin, MaxKeys for the
// local fallback, Now for the retry schedule, Metrics, Logger).
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
		network:  opts.Network,
		margin:   opts.BudgetMargin,
		rateKey:  opts.Prefix + "budget:{" + opts.Network + ":",
		pauseKey: opts.Prefix + "pause:{" + opts.Network + ":",
		adaptKey: opts.Prefix + "adapt:{" + opts.Network + ":",
		seenKey:  opts.Prefix + "seen:{" + opts.Network + ":",
		fb:       newFallback(opts, "budget").follow(client),
		local:    newMemoryBudget(opts),
		metrics:  opts.Metrics,
		log:      opts.Logger,
	}, nil
}

// Wait implements Budget: Depart, the call counted as gone when it is
// let go. In FailClosed mode it returns an error wrapping ErrUnavailable
// while Redis fails.
func (b *RedisBudget) Wait(ctx context.Context, key string, l Limit) error {
	sent, err := b.Depart(ctx, key, l)
	if err == nil {
		sent(time.Time{})
	}
	return err
}

// Depart implements Budget. The token is reserved in Redis (one script
// call), the wait for the write of the call let go before is local: a
// call leaves no sooner than the spacing after this replica's previous
// call left, and no sooner than its reservation, which is the spacing
// after the reservation before it, whichever replica made it.
func (b *RedisBudget) Depart(ctx context.Context, key string, l Limit) (Sent, error) {
	start := time.Now()
	waited, sent, err := b.wait(ctx, key, l)
	b.local.record(key, start, waited, err)
	return sent, err
}

func (b *RedisBudget) wait(ctx context.Context, key string, l Limit) (waited bool, sent Sent, err error) {
	if err := l.Validate(); err != nil {
		return false, nil, err
	}
	if err := ctx.Err(); err != nil {
		return false, nil, err
	}
	if !b.fb.try() {
		return b.fallback(ctx, key, l, nil)
	}
	d, iv, ok, err := b.reserve(ctx, key, l, most(ctx))
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return false, nil, ctxErr
		}
		b.fb.failed("budget", err)
		return b.fallback(ctx, key, l, err)
	}
	b.fb.succeeded()
	if !ok {
		return false, nil, &BudgetError{RetryAfter: d}
	}
	// The token is the caller's: it sleeps until its time and goes, as
	// this replica allows (its own pauses and spacing, kept locally).
	return b.local.depart(ctx, key, d, iv)
}

// budgetArgs are the arguments of budgetScript for l, op and the most the
// caller can wait (< 0: no limit).
func (b *RedisBudget) budgetArgs(l Limit, op string, mostWait time.Duration) []any {
	return []any{l.Rate, l.Burst, b.margin.Seconds(), op,
		adaptHold.Seconds(), adaptRecoverEvery.Seconds(), adaptCeilingEvery.Seconds(),
		adaptSteps, adaptFloorDiv, adaptTTL.Milliseconds(), adaptFloorRPS,
		adaptObserve.Seconds(), adaptObserveMin, mostWait.Seconds(), budgetHorizon.Seconds()}
}

// step runs budgetScript for key; it returns the wait, the rate in force,
// the direction of a change and whether a token was reserved (op "wait").
func (b *RedisBudget) step(ctx context.Context, key string, l Limit, op string, mostWait time.Duration) (time.Duration, float64, string, bool, error) {
	// The four keys share the hash tag {network:key}: one cluster slot.
	keys := []string{b.tagged(b.rateKey, key), b.tagged(b.pauseKey, key), b.tagged(b.adaptKey, key), b.tagged(b.seenKey, key)}
	res, err := budgetScript.Run(ctx, b.client, keys, b.budgetArgs(l, op, mostWait)...).StringSlice()
	if err != nil {
		return 0, 0, "", false, err
	}
	if len(res) != 4 {
		return 0, 0, "", false, fmt.Errorf("ratelimit: budget script answered %d values, want 4", len(res))
	}
	wait, err1 := strconv.ParseFloat(res[0], 64)
	eff, err2 := strconv.ParseFloat(res[1], 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, 0, "", false, fmt.Errorf("ratelimit: budget script: %w", err)
	}
	b.metrics.budgetRates(b.network, key, l.Rate, eff)
	adjusted(b.log, b.metrics, b.network, key, res[2], l.Rate, eff)
	var d time.Duration
	if wait > 0 {
		d = time.Duration(math.Ceil(wait * float64(time.Second)))
	}
	return d, eff, res[2], res[3] == "1", nil
}

// reserve reserves key's next token under l in Redis, unless it (or the
// end of key's pause) comes at mostWait or later (< 0: no limit): one
// script call. It returns the wait until the token, the spacing of key's
// calls on this replica (see MemoryBudget.depart) and whether the token
// was reserved. An unlimited budget reserves nothing: it reads the pause.
func (b *RedisBudget) reserve(ctx context.Context, key string, l Limit, mostWait time.Duration) (time.Duration, time.Duration, bool, error) {
	if l.Unlimited() {
		left, err := b.client.PTTL(ctx, b.tagged(b.pauseKey, key)).Result()
		if err != nil {
			return 0, 0, false, err
		}
		left = max(left, 0)
		return left, 0, mostWait < 0 || left < mostWait, nil
	}
	d, eff, _, ok, err := b.step(ctx, key, l, "wait", mostWait)
	if err != nil {
		return 0, 0, false, err
	}
	iv := spacing(l, interval(eff, b.margin))
	b.local.learned(key, iv)
	return d, iv, ok, nil
}

func (b *RedisBudget) fallback(ctx context.Context, key string, l Limit, cause error) (bool, Sent, error) {
	b.metrics.fallback(b.fb.mode)
	if b.fb.mode == FailClosed {
		return false, nil, unavailable(cause)
	}
	return b.local.wait(ctx, key, l)
}

// Rejoin implements Budget: the spacing of a replica's calls is kept
// locally (see Depart).
func (b *RedisBudget) Rejoin(key string, l Limit) Sent { return b.local.Rejoin(key, l) }

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
	if err := pauseScript.Run(ctx, b.client, []string{b.tagged(b.pauseKey, key)}, int64(ms)).Err(); err != nil {
		b.fb.failed("pause", err)
		return
	}
	b.fb.succeeded()
}

// Throttled implements Budget: through Redis it slows key on every
// replica; while Redis fails, on the local fallback.
func (b *RedisBudget) Throttled(key string, l Limit) {
	if l.Validate() != nil || l.Unlimited() {
		return
	}
	if !b.fb.try() {
		b.local.Throttled(key, l)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), pauseTimeout)
	defer cancel()
	_, eff, _, _, err := b.step(ctx, key, l, "throttle", -1)
	if err != nil {
		b.fb.failed("throttle", err)
		b.local.Throttled(key, l)
		return
	}
	b.fb.succeeded()
	b.local.learned(key, spacing(l, interval(eff, b.margin)))
}

// tagged is the Redis key of prefix (one of the budget's, ending in its
// open hash tag "{<network>:") for key: the tag closed after key, so that
// one endpoint's keys share a Cluster slot.
func (b *RedisBudget) tagged(prefix, key string) string { return prefix + key + "}" }
