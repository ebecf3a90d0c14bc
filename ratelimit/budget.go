package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// Budget is the upstream budget: one GCRA bucket per key, shared by all
// teams, that upstream calls wait on. A Budget is made per network
// (Options.Network); its keys name upstream endpoints from a fixed set,
// such as "/api/v1/reports", and become the "endpoint" label of its
// metrics. Implementations are safe for concurrent use.
//
// A Budget reads a Limit as a token bucket whose tokens come
// 1/rate + Options.BudgetMargin apart, rate being the rate in force: the
// Limit's Rate, or less after upstream 429s (Throttled). With Burst 1 no
// two calls of a key leave a process closer than that interval (Depart:
// counted from the time the one before was written), so no one-second
// window, calendar or sliding, holds more than Rate calls, and an upstream
// that counts as a token bucket of burst 1 finds a token for each, within
// the margin of what brings calls closer after they left.
type Budget interface {
	// Wait blocks until key has a token under l, or returns an error. It
	// reserves the token once and sleeps until its time (see
	// MemoryBudget.reserve and depart). It waits only as long as ctx's
	// deadline allows: when the token (or the end of a pause) comes later
	// than the deadline, or beyond budgetHorizon, it returns at once a
	// *BudgetError, which wraps ErrBudgetExhausted, having reserved
	// nothing; so it does too if the deadline passes while it waits after
	// all (a late timer, a pause set meanwhile), the reservation then
	// spent. It returns ctx's error when ctx is cancelled, or was done on
	// entry; it never sleeps past ctx.Done.
	Wait(ctx context.Context, key string, l Limit) error
	// Depart is Wait for a caller that tells when its call actually
	// left: with the token it returns the call's Sent, which the caller
	// calls once, when the request has been written whole to the
	// upstream connection or has failed before that. Until then the next
	// call of key on this process waits, and afterwards it goes no sooner
	// than the spacing after the write: the budget paces the times calls
	// leave, not the times it let them go, which a busy machine (the
	// caller's goroutine, the HTTP client's writer, a new connection)
	// puts apart by up to tens of milliseconds. On an error Sent is nil.
	//
	// A caller whose connection is not ready within the key's interval
	// reports the zero time at once, so that a slow or stalled connect
	// (an upstream that accepts and never completes the TLS handshake)
	// does not hold the key's other calls; should the connection come
	// after all, it calls Rejoin before writing the request.
	Depart(ctx context.Context, key string, l Limit) (Sent, error)
	// Rejoin is for a call let go by Depart that reported the zero time
	// before its request was written (it stepped out of the spacing while
	// its connection was made) and now has its connection: it takes key's
	// hold on this process as soon as the call holding it is written,
	// waits out the spacing after the last call left while it holds it,
	// and returns the call's new Sent, which the caller reports as it
	// would Depart's. The call keeps the token Depart reserved for it: it
	// waits for neither the schedule nor a pause, and takes no context,
	// since its caller can no longer stop the write; the wait is a
	// spacing, and the writes of the calls that held the key before.
	Rejoin(key string, l Limit) Sent
	// Pause stops calls for key during d, e.g. for the Retry-After of an
	// upstream 429. A pause is never shortened by a later, shorter one.
	Pause(key string, d time.Duration)
	// Throttled tells the budget that the upstream answered a call of key
	// with 429 although the budget allowed it: the rate in force of key
	// under l halves (once per burst of 429s), then recovers step by step
	// while no 429 comes back (see adapt.go). It does not pause: call
	// Pause too for the upstream's Retry-After.
	Throttled(key string, l Limit)
}

// Sent reports that the call a Budget let go (Depart, Rejoin) has left:
// its request was written whole to the upstream connection at written,
// or, with the zero time, it was not (it failed first, or its connection
// outlasted the key's interval: see Depart), and the budget counts it as
// gone when it was let go. Only the first call counts.
type Sent func(written time.Time)

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

// MemoryBudget is a Budget kept in this process: a GCRA schedule per key
// in which a waiter reserves its token's time once, then sleeps until it
// and departs (see reserve and depart), as with the Redis implementation.
type MemoryBudget struct {
	network string
	margin  time.Duration
	keys    *table[budgetEntry]
	metrics *Metrics
	log     *zap.Logger
	asleep  func() // called when a waiter starts sleeping; for tests
	holding func() // called when a waiter waits for the write of the call before it; for tests
}

type budgetEntry struct {
	tat         time.Time // theoretical arrival time of the next call (GCRA)
	pausedUntil time.Time
	adapt       adaptive
	departed    time.Time     // when the last call of this process left: written (Sent), or let go (depart)
	sending     chan struct{} // closed when the call let go last is written (Sent); nil when it was
	spacing     time.Duration // the least time between two calls here, as last learned
}

var _ Budget = (*MemoryBudget)(nil)

// NewMemoryBudget returns a MemoryBudget configured by opts (Network,
// MaxKeys, BudgetMargin, Metrics, Logger).
func NewMemoryBudget(opts Options) (*MemoryBudget, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	return newMemoryBudget(opts), nil
}

func newMemoryBudget(opts Options) *MemoryBudget {
	idle := func(e *budgetEntry, now time.Time) bool {
		return !now.Before(e.pausedUntil) && !now.Before(e.tat) && (e.adapt.eff <= 0 || e.adapt.rest()) &&
			now.Sub(e.departed) > time.Minute && e.sending == nil
	}
	return &MemoryBudget{network: opts.Network, margin: opts.BudgetMargin, keys: newTable(opts.MaxKeys, idle),
		metrics: opts.Metrics, log: opts.Logger}
}

// interval is the time between two tokens at rate eff (> 0) with margin.
func interval(eff float64, margin time.Duration) time.Duration {
	ns := math.Ceil(float64(time.Second)/eff) + float64(margin)
	if ns >= math.MaxInt64/2 {
		return math.MaxInt64 / 2
	}
	return time.Duration(ns)
}

// Wait implements Budget: Depart, the call counted as gone when it is
// let go.
func (b *MemoryBudget) Wait(ctx context.Context, key string, l Limit) error {
	sent, err := b.Depart(ctx, key, l)
	if err == nil {
		sent(time.Time{})
	}
	return err
}

// Depart implements Budget.
func (b *MemoryBudget) Depart(ctx context.Context, key string, l Limit) (Sent, error) {
	start := time.Now()
	waited, sent, err := b.wait(ctx, key, l)
	b.record(key, start, waited, err)
	return sent, err
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

func (b *MemoryBudget) wait(ctx context.Context, key string, l Limit) (waited bool, sent Sent, err error) {
	if err := l.Validate(); err != nil {
		return false, nil, err
	}
	if err := ctx.Err(); err != nil {
		return false, nil, err
	}
	d, iv, ok := b.reserve(key, l, most(ctx))
	if !ok {
		return false, nil, &BudgetError{RetryAfter: d}
	}
	return b.depart(ctx, key, d, iv)
}

// reserveSlack is kept between a reserved token and the caller's deadline:
// the time it takes the answer to come back (from Redis) and the caller
// to set its timer. Without it a token reserved just inside the deadline
// was found outside it by the time the caller would sleep, and spent for
// nothing; a queue of waiters, whose tail is always at the deadline, lost
// a slot that way again and again.
const reserveSlack = 20 * time.Millisecond

// most is how long a waiter with ctx may wait for a token it reserves:
// until its deadline less reserveSlack, or -1 without one.
func most(ctx context.Context) time.Duration {
	deadline, ok := ctx.Deadline()
	if !ok {
		return -1
	}
	return max(time.Until(deadline)-reserveSlack, 0)
}

// budgetHorizon bounds the queue of reservations: a token is reserved no
// further than this after the end of the key's pause (or the reach of its
// burst, if longer); a caller whose token comes later is refused, deadline
// or not. No upstream call is worth waiting a minute for, and the Redis
// script can tell a time of arrival it wrote from one that it did not.
const budgetHorizon = time.Minute

// horizon is how far past the end of a pause tokens are reserved at
// interval t under l.
func horizon(l Limit, t time.Duration) time.Duration {
	if reach := time.Duration(l.Burst) * t; reach > budgetHorizon {
		return reach
	}
	return budgetHorizon
}

// reserve takes key's next token under l for the caller, unless it comes
// (or key's pause ends) too late: at mostWait or later (mostWait < 0: no
// limit), or at the horizon past the pause's end. It returns the wait until the token, the spacing of key's calls
// on this process (see depart: the interval of the rate in force with
// burst 1, 0 otherwise) and whether the token was reserved. A refusal
// reserves nothing: the schedule owes nothing for it.
//
// A reservation is spent whatever becomes of it: a caller cancelled while
// it waits leaves its token unused, which costs the key one call (the
// upstream is spared, not overrun). So a waiter asks once, not after every
// sleep: with the Redis budget, one script call per upstream call.
func (b *MemoryBudget) reserve(key string, l Limit, mostWait time.Duration) (time.Duration, time.Duration, bool) {
	now := time.Now()
	s := b.keys.shard(key)
	s.mu.Lock()
	e, _ := s.get(key, now)
	var d time.Duration
	if now.Before(e.pausedUntil) {
		d = e.pausedUntil.Sub(now)
	}
	if l.Unlimited() {
		s.mu.Unlock()
		return d, 0, mostWait < 0 || d < mostWait
	}
	eff, dir := e.adapt.at(l.Rate, now)
	t := interval(eff, b.margin)
	base := e.tat
	if base.Before(now) {
		base = now
	}
	at := base.Add(-time.Duration(l.Burst-1) * t)
	if at.Before(now) {
		at = now
	}
	if at.Before(e.pausedUntil) {
		at = e.pausedUntil
	}
	d = at.Sub(now)
	from := now
	if from.Before(e.pausedUntil) {
		from = e.pausedUntil
	}
	ok := (mostWait < 0 || d < mostWait) && at.Sub(from) < horizon(l, t)
	e.spacing = spacing(l, t)
	if ok {
		if at.After(base) {
			base = at
		}
		e.tat = base.Add(t)
		e.adapt.seen.granted(at)
	}
	s.mu.Unlock()
	b.metrics.budgetRates(b.network, key, l.Rate, eff)
	adjusted(b.log, b.metrics, b.network, key, dir, l.Rate, eff)
	return d, spacing(l, t), ok
}

// spacing is the least time between two calls of a key under l on one
// process, t being the interval of its rate in force: t with burst 1 (the
// budget's), none for a bucket with a burst or an unlimited one.
func spacing(l Limit, t time.Duration) time.Duration {
	if l.Burst != 1 || l.Unlimited() {
		return 0
	}
	return t
}

// depart sleeps d, the wait of a reserved token of key, then lets the
// caller go once this process allows it: not while key is paused here
// (a pause set while it slept, after an upstream 429: it waits the pause
// out), with a spacing (iv > 0, burst 1) not while the call of key let go
// last from this process is still being written (until its Sent), and no
// sooner than iv, or the spacing of the rate in force if longer (a
// slowdown learned while it slept), after that call left. A waiter woken
// late by a busy machine (its timer, the scheduler), or a call written
// late after it was let go, thus delays the calls after it instead of
// going out closer to the next one. All of it is known locally: departing
// costs no round trip. It returns whether the caller waited and the
// caller's Sent, or the error of sleep when ctx ends first or its
// deadline is too close: the reservation is then spent.
func (b *MemoryBudget) depart(ctx context.Context, key string, d, iv time.Duration) (waited bool, sent Sent, err error) {
	for {
		if d > 0 {
			if err := sleep(ctx, d, b.asleep); err != nil {
				return waited, nil, err
			}
			waited = true
		}
		now := time.Now()
		s := b.keys.shard(key)
		s.mu.Lock()
		e, _ := s.get(key, now)
		if iv > 0 {
			iv = max(iv, e.spacing)
		}
		var held chan struct{}
		switch next := e.departed.Add(iv); {
		case now.Before(e.pausedUntil):
			d = e.pausedUntil.Sub(now)
		case iv > 0 && e.sending != nil:
			held, d = e.sending, 0
		case iv > 0 && now.Before(next):
			d = next.Sub(now)
		default:
			d = 0
			e.departed = now
			sent = sentNothing
			if iv > 0 {
				e.sending = make(chan struct{})
				sent = b.sent(key, e.sending)
			}
		}
		s.mu.Unlock()
		if held != nil {
			if err := b.hold(ctx, held, iv); err != nil {
				return true, nil, err
			}
			waited = true
			continue
		}
		if d == 0 {
			return waited, sent, nil
		}
	}
}

// sentNothing is the Sent of a call without a spacing to keep.
func sentNothing(time.Time) {}

// Rejoin implements Budget: the local departure of depart, without the
// schedule, the pause or a context, the hold taken before the wait for
// the spacing so that the calls let go by the schedule meanwhile go
// after it.
func (b *MemoryBudget) Rejoin(key string, l Limit) Sent {
	if l.Validate() != nil || l.Unlimited() {
		return sentNothing
	}
	for {
		now := time.Now()
		s := b.keys.shard(key)
		s.mu.Lock()
		e, _ := s.get(key, now)
		iv := max(e.spacing, spacing(l, interval(l.Rate, b.margin)))
		if iv == 0 {
			s.mu.Unlock()
			return sentNothing
		}
		if held := e.sending; held != nil {
			s.mu.Unlock()
			_ = b.hold(context.Background(), held, iv)
			continue
		}
		sending := make(chan struct{})
		e.sending = sending
		wait := e.departed.Add(iv).Sub(now)
		s.mu.Unlock()
		if wait > 0 {
			t := time.NewTimer(wait)
			if b.asleep != nil {
				b.asleep()
			}
			<-t.C
		}
		s.mu.Lock()
		if e, _ := s.get(key, time.Now()); e.sending == sending {
			e.departed = time.Now()
		}
		s.mu.Unlock()
		return b.sent(key, sending)
	}
}

// hold waits until the call of a key let go before the caller is written
// (sending is closed), or ctx ends: then the reservation is spent, and
// the error is ctx's, or a *BudgetError if its deadline passed (retry
// after iv, the spacing).
func (b *MemoryBudget) hold(ctx context.Context, sending chan struct{}, iv time.Duration) error {
	if b.holding != nil {
		b.holding()
	}
	select {
	case <-sending:
		return nil
	case <-ctx.Done():
		return late(ctx.Err(), iv)
	}
}

// sent returns the Sent of the call of key let go with sending: the first
// call records when the call left (written, no later than now; when it
// was let go for the zero time) and releases the next call.
func (b *MemoryBudget) sent(key string, sending chan struct{}) Sent {
	var once sync.Once
	return func(written time.Time) {
		once.Do(func() {
			now := time.Now()
			s := b.keys.shard(key)
			s.mu.Lock()
			if e, _ := s.get(key, now); e.sending == sending {
				if written.After(now) {
					written = now
				}
				if written.After(e.departed) {
					e.departed = written
				}
				e.sending = nil
			}
			s.mu.Unlock()
			close(sending)
		})
	}
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

// Throttled implements Budget.
func (b *MemoryBudget) Throttled(key string, l Limit) {
	if l.Validate() != nil || l.Unlimited() {
		return
	}
	now := time.Now()
	s := b.keys.shard(key)
	s.mu.Lock()
	e, _ := s.get(key, now)
	eff, dir := e.adapt.throttle(l.Rate, now)
	e.spacing = spacing(l, interval(eff, b.margin))
	s.mu.Unlock()
	b.metrics.budgetRates(b.network, key, l.Rate, eff)
	adjusted(b.log, b.metrics, b.network, key, dir, l.Rate, eff)
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

// learned records the spacing of key's calls under the rate in force as
// the Redis budget last answered it, for depart.
func (b *MemoryBudget) learned(key string, spacing time.Duration) {
	now := time.Now()
	s := b.keys.shard(key)
	s.mu.Lock()
	e, _ := s.get(key, now)
	e.spacing = spacing
	s.mu.Unlock()
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
