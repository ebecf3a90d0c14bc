// Package shared is the second cache tier, in Redis, that the replicas of a
// gateway share behind each one's in-memory cache.Store: what one replica
// fetched from the upstream, every replica reads, and many concurrent misses
// for one key across replicas cause one upstream fill.
//
// A Tier is the shared tier of a cache.Store (cache.Config.Shared): the
// Store's LoadFrom answers hits from memory, and only its flight (a miss,
// or the refresh of a stale entry) calls Tier.FillAfter with the key's
// Check and the caller's fill, which
//
//  1. reads the key in Redis and returns a valid fresh entry found there;
//  2. else takes a lease on the key (SET NX with an expiry) and runs the
//     fill, writes its entry to Redis and releases the lease;
//  3. else, another replica holding the lease, polls for its entry, for at
//     most twice the lease: when the lease ends without an entry (that
//     replica's fill failed, or it died), this replica takes it over.
//
// Steps 1 and 2 are one round trip (a script). The parsed value of an entry is
// never stored: the caller's Check rebuilds it from the body and validates
// the entry; an entry that fails, or whose encoding does not hold (checksum,
// key echoed, lengths), is deleted and counted as corrupt, never served.
//
// Redis failing is never fatal: every command goes through the client's
// deadline and circuit breaker (redisconn.New), and a failed
// lookup or write means the fill runs as without the tier. The tier logs
// once when it becomes unavailable and once when it recovers.
//
// Keys are Prefix + "{" + the cache key + "}", Prefix + "lease:{" + the
// cache key + "}" for leases (an entry and its lease share their Redis
// Cluster hash tag, so the scripts that touch both work on a cluster), and Prefix + "lead:" + a name for the leads of Lead
// (DefaultPrefix: streamgate:cache:v1:).
package shared

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"streamgate/cache"
)

// DefaultPrefix namespaces the tier's keys; the version changes with the
// encoding.
const DefaultPrefix = "streamgate:cache:v1:"

// Defaults of Config.
const (
	DefaultTTL           = 24 * time.Hour
	DefaultMaxEntryBytes = 1 << 20
	DefaultLease         = 2 * time.Second
)

// Poll intervals of a replica waiting for another's fill: from pollMin,
// doubling to pollMax, so that a quick fill is seen quickly and a slow one
// costs few round trips.
const (
	pollMin = 2 * time.Millisecond
	pollMax = 40 * time.Millisecond
)

// Config configures a Tier. Client is required.
type Config struct {
	// Client is the Redis client, as redisconn.New makes it
	// (deadline and circuit breaker on every command).
	Client redis.UniversalClient
	// Prefix namespaces the keys. Empty: DefaultPrefix.
	Prefix string
	// TTL bounds how long an entry is kept in Redis; an entry with an
	// Expires is kept until then, at most TTL. Zero: DefaultTTL.
	TTL time.Duration
	// MaxEntryBytes bounds the encoded size of one entry; larger ones are
	// not written. Zero: DefaultMaxEntryBytes.
	MaxEntryBytes int
	// Lease is how long a fill's lease lasts. Zero: DefaultLease.
	Lease time.Duration
	// Clock decides whether an entry read is still fresh. Nil: time.Now.
	Clock func() time.Time
	// Logger receives the tier's transitions (unavailable, recovered) and
	// the corrupt entries dropped. Nil: nothing is logged.
	Logger *zap.Logger
	// Metrics records lookups, writes, lease waits; nil records nothing.
	Metrics *Metrics
}

// Check validates an entry read from Redis for one call site and rebuilds
// its parsed value (cache.Kind) from its Body: the codec of its kind of
// key (cache.Check). An error means the entry must not be served: it is
// dropped from Redis and counted as corrupt. A nil Check accepts every
// entry whose encoding holds.
type Check = cache.Check

// A Tier is the shared tier of a cache.Store (cache.Config.Shared).
var _ cache.Tier = (*Tier)(nil)

// Tier is the shared cache tier. It is safe for concurrent use. A nil *Tier
// is valid and off: Fill runs the fill, Get finds nothing, Set does nothing.
type Tier struct {
	rc       redis.UniversalClient
	prefix   string
	ttl      time.Duration
	maxBytes int
	lease    time.Duration
	now      func() time.Time
	log      *zap.Logger
	m        *Metrics

	tokenBase string
	tokens    atomic.Uint64
	down      atomic.Bool
	downMu    sync.Mutex // orders the transition logs
}

// New returns a Tier configured by cfg.
func New(cfg Config) (*Tier, error) {
	var errs []error
	if cfg.Client == nil {
		errs = append(errs, errors.New("shared: Client is required"))
	}
	if cfg.TTL < 0 || cfg.Lease < 0 || cfg.MaxEntryBytes < 0 {
		errs = append(errs, errors.New("shared: TTL, Lease and MaxEntryBytes must not be negative"))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	t := &Tier{rc: cfg.Client, prefix: cfg.Prefix, ttl: cfg.TTL, maxBytes: cfg.MaxEntryBytes,
		lease: cfg.Lease, now: cfg.Clock, log: cfg.Logger, m: cfg.Metrics}
	if t.prefix == "" {
		t.prefix = DefaultPrefix
	}
	if t.ttl == 0 {
		t.ttl = DefaultTTL
	}
	if t.maxBytes == 0 {
		t.maxBytes = DefaultMaxEntryBytes
	}
	if t.lease == 0 {
		t.lease = DefaultLease
	}
	if t.now == nil {
		t.now = time.Now
	}
	if t.log == nil {
		t.log = zap.NewNop()
	}
	// A lease token names its holder: this process (its start in
	// nanoseconds, which two replicas do not share) and a counter.
	t.tokenBase = strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	return t, nil
}

// Key returns the Redis key of a cache key.
func (t *Tier) Key(key string) string { return t.prefix + "{" + key + "}" }

// LeaseKey returns the Redis key of a cache key's lease.
func (t *Tier) LeaseKey(key string) string { return t.prefix + "lease:{" + key + "}" }

// getOrLease returns the entry's value ({1, value}); else takes the lease
// ({2}); else reports the lease held by another ({3}).
var getOrLease = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v then return {1, v} end
if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then return {2} end
return {3}
`)

// putAndRelease writes the value (unless ARGV[2] is "0") and releases the
// lease if this holder still has it.
var putAndRelease = redis.NewScript(`
if ARGV[2] ~= '0' then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) end
if redis.call('GET', KEYS[2]) == ARGV[3] then redis.call('DEL', KEYS[2]) end
return 1
`)

// Fill returns the entry for key: from Redis, else from fill under the
// key's lease (and then written to Redis), else from the replica holding the
// lease, as the package doc says. fill runs at most once. Without Redis
// (down, or t nil) it is fill(ctx).
func (t *Tier) Fill(ctx context.Context, key string, check Check, fill cache.FillFunc) (*cache.Entry, error) {
	return t.FillAfter(ctx, key, check, 0, fill)
}

// FillAfter is Fill, except that for the first grace it only looks for the
// entry and takes no lease: another replica expected to fill the key (the
// leader of Lead) gets the time to take the lease first, so that the fills
// it batches are not split among the replicas.
func (t *Tier) FillAfter(ctx context.Context, key string, check Check, grace time.Duration, fill cache.FillFunc) (*cache.Entry, error) {
	if t == nil {
		return fill(ctx)
	}
	token := t.tokenBase + strconv.FormatUint(t.tokens.Add(1), 36)
	rkey, lkey := t.Key(key), t.LeaseKey(key)
	leaseMS := strconv.FormatInt(t.lease.Milliseconds(), 10)
	start := time.Now()
	deadline := start.Add(grace + 2*t.lease)
	poll := pollMin
	waited := false   // this call waited for an entry
	sawLease := false // … and found another's lease
	corrupt := 0
	for {
		var res []any
		var err error
		looking := grace > 0 && time.Since(start) < grace
		if looking {
			// Look only: {1, value}, or {3} as if the lease were held.
			var v string
			v, err = t.rc.Get(ctx, rkey).Result()
			switch {
			case err == nil:
				res = []any{int64(1), v}
			case errors.Is(err, redis.Nil):
				res, err = []any{int64(3)}, nil
			}
		} else {
			res, err = getOrLease.Run(ctx, t.rc, []string{rkey, lkey}, token, leaseMS).Slice()
		}
		if err != nil {
			t.failed(err)
			t.m.lookup(LookupError)
			if waited {
				t.m.waited(WaitError)
			}
			return t.fillAlone(ctx, key, fill)
		}
		t.ok()
		code, _ := res[0].(int64)
		switch code {
		case 1:
			raw, _ := res[1].(string)
			e, fresh, err := t.decode(key, []byte(raw), check)
			switch {
			case err != nil:
				t.drop(ctx, key, err)
				corrupt++
				if corrupt > 1 {
					return t.fillAlone(ctx, key, fill)
				}
				continue
			case !fresh:
				// Kept by Redis a little past its end (clocks of the
				// replicas differ): fill without the lease.
				t.m.lookup(LookupMiss)
				return t.fillAlone(ctx, key, fill)
			}
			t.m.lookup(LookupHit)
			t.m.fillSaved()
			if waited {
				t.m.waited(WaitValue)
			}
			return e, nil
		case 2:
			switch {
			case sawLease:
				t.m.waited(WaitTakeover)
			case !waited:
				t.m.lookup(LookupMiss)
			}
			return t.fillLeased(ctx, key, token, fill)
		}
		// Another replica is filling (or, within the grace, may be about
		// to): wait for its entry.
		if !waited {
			t.m.lookup(LookupMiss)
			waited = true
		}
		sawLease = sawLease || !looking
		if time.Now().After(deadline) {
			t.m.waited(WaitTimeout)
			return t.fillAlone(ctx, key, fill)
		}
		timer := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, ctx.Err()
		case <-timer.C:
		}
		poll = min(2*poll, pollMax)
	}
}

// fillLeased runs fill holding the lease, writes its entry and releases
// the lease in one round trip.
func (t *Tier) fillLeased(ctx context.Context, key, token string, fill cache.FillFunc) (*cache.Entry, error) {
	e, err := fill(ctx)
	val, px := t.encodeFor(key, e, err)
	// The fill may have used up ctx; the write must still release the lease.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if rerr := putAndRelease.Run(wctx, t.rc, []string{t.Key(key), t.LeaseKey(key)}, val, strconv.FormatInt(px, 10), token).Err(); rerr != nil {
		t.failed(rerr)
		if px > 0 {
			t.m.write("error")
		}
	} else if px > 0 {
		t.ok()
		t.m.write("ok")
	}
	return e, err
}

// fillAlone runs fill without the lease (Redis failed, or the wait ended)
// and writes its entry if Redis takes it.
func (t *Tier) fillAlone(ctx context.Context, key string, fill cache.FillFunc) (*cache.Entry, error) {
	e, err := fill(ctx)
	if err == nil && !t.down.Load() {
		t.Set(context.WithoutCancel(ctx), key, e)
	}
	return e, err
}

// encodeFor returns the encoded entry and its expiry in milliseconds, or
// px 0 when the entry is not to be written: an error, NoStore, not a 200
// (or a 206, a bulk answer missing some streams), too large, already ended.
func (t *Tier) encodeFor(key string, e *cache.Entry, err error) ([]byte, int64) {
	if err != nil || e == nil || e.NoStore || e.Status != 200 && e.Status != 206 {
		return nil, 0
	}
	ttl := t.ttl
	if !e.Expires.IsZero() {
		ttl = min(ttl, e.Expires.Sub(t.now()))
	}
	px := ttl.Milliseconds()
	if px <= 0 {
		return nil, 0
	}
	val := encode(key, e)
	if len(val) > t.maxBytes {
		t.m.write("too_large")
		return nil, 0
	}
	return val, px
}

// Set writes e under key, if it is to be kept (see encodeFor).
func (t *Tier) Set(ctx context.Context, key string, e *cache.Entry) {
	if t == nil {
		return
	}
	val, px := t.encodeFor(key, e, nil)
	if px <= 0 {
		return
	}
	if err := t.rc.Set(ctx, t.Key(key), val, time.Duration(px)*time.Millisecond).Err(); err != nil {
		t.failed(err)
		t.m.write("error")
		return
	}
	t.ok()
	t.m.write("ok")
}

// SetMany writes several entries in one round trip, each as Set would.
func (t *Tier) SetMany(ctx context.Context, entries map[string]*cache.Entry) {
	if t == nil || len(entries) == 0 || t.down.Load() {
		return
	}
	pipe := t.rc.Pipeline()
	n := 0
	for key, e := range entries {
		if val, px := t.encodeFor(key, e, nil); px > 0 {
			pipe.Set(ctx, t.Key(key), val, time.Duration(px)*time.Millisecond)
			n++
		}
	}
	if n == 0 {
		return
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.failed(err)
		for range n {
			t.m.write("error")
		}
		return
	}
	t.ok()
	for range n {
		t.m.write("ok")
	}
}

// Get returns the fresh entry held under key, or nil. It takes no lease.
func (t *Tier) Get(ctx context.Context, key string, check Check) *cache.Entry {
	if t == nil {
		return nil
	}
	return t.GetMany(ctx, []string{key}, func(string) Check { return check })[0]
}

// GetMany returns the fresh entry held under each key (nil where none), in
// one round trip; checkOf gives each key's Check.
func (t *Tier) GetMany(ctx context.Context, keys []string, checkOf func(key string) Check) []*cache.Entry {
	out := make([]*cache.Entry, len(keys))
	if t == nil || len(keys) == 0 || t.down.Load() {
		return out
	}
	// A pipeline of GETs, not MGET: each key has its own hash tag, and
	// on a Redis Cluster the client sends one pipeline per node, in
	// parallel, where MGET would be refused (CROSSSLOT). On a single node
	// it is one round trip as MGET is.
	pipe := t.rc.Pipeline()
	gets := make([]*redis.StringCmd, len(keys))
	for i, k := range keys {
		gets[i] = pipe.Get(ctx, t.Key(k))
	}
	_, err := pipe.Exec(ctx)
	for _, get := range gets { // Exec tells only the first error
		if gerr := get.Err(); err == nil || errors.Is(err, redis.Nil) {
			if gerr != nil && !errors.Is(gerr, redis.Nil) {
				err = gerr
			}
		}
	}
	if err != nil && !errors.Is(err, redis.Nil) {
		t.failed(err)
		for range keys {
			t.m.lookup(LookupError)
		}
		return out
	}
	t.ok()
	for i, get := range gets {
		raw, err := get.Result()
		if err != nil { // redis.Nil: no entry
			t.m.lookup(LookupMiss)
			continue
		}
		e, fresh, err := t.decode(keys[i], []byte(raw), checkOf(keys[i]))
		switch {
		case err != nil:
			t.drop(ctx, keys[i], err)
		case !fresh:
			t.m.lookup(LookupMiss)
		default:
			t.m.lookup(LookupHit)
			out[i] = e
		}
	}
	return out
}

// decode parses and checks raw, read under key, and reports whether the
// entry is still fresh.
func (t *Tier) decode(key string, raw []byte, check Check) (*cache.Entry, bool, error) {
	e, err := decode(key, raw)
	if err != nil {
		return nil, false, err
	}
	if check != nil {
		if err := check(e); err != nil {
			return nil, false, fmt.Errorf("%w: %w", errCorrupt, err)
		}
	}
	return e, e.Expires.IsZero() || t.now().Before(e.Expires), nil
}

// drop deletes a corrupt entry and counts it.
func (t *Tier) drop(ctx context.Context, key string, cause error) {
	t.m.lookup(LookupCorrupt)
	t.log.Warn("shared cache: corrupt entry dropped", zap.String("key", key), zap.Error(cause))
	if err := t.rc.Del(ctx, t.Key(key)).Err(); err != nil {
		t.failed(err)
	}
}

// failed notes a failed Redis call: the first after a success logs that the
// tier is unavailable.
func (t *Tier) failed(err error) {
	if t.down.Load() || errors.Is(err, context.Canceled) {
		return
	}
	t.downMu.Lock()
	defer t.downMu.Unlock()
	if t.down.CompareAndSwap(false, true) {
		t.m.available(false)
		t.log.Warn("shared cache unavailable: each replica fills from its memory and the upstream until it recovers",
			zap.Error(err))
	}
}

// ok notes a successful Redis call: the first after a failure logs the
// recovery.
func (t *Tier) ok() {
	if !t.down.Load() {
		return
	}
	t.downMu.Lock()
	defer t.downMu.Unlock()
	if t.down.CompareAndSwap(true, false) {
		t.m.available(true)
		t.log.Info("shared cache recovered")
	}
}

// lead takes or keeps the lead of a name: a key held by token with an
// expiry, renewed by its holder.
var lead = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
return 0
`)

// Lead reports whether this process leads name (for example the latest
// refreshes of a network) for the next ttl: it takes the lead when nobody
// holds it, and keeps it while it renews it within ttl. One token is one
// candidate; a leader that stops renewing (or dies) loses the lead after
// ttl. Without Redis nobody leads.
func (t *Tier) Lead(ctx context.Context, name, token string, ttl time.Duration) bool {
	if t == nil {
		return false
	}
	n, err := lead.Run(ctx, t.rc, []string{t.prefix + "lead:" + name}, t.tokenBase+token, ttl.Milliseconds()).Int()
	if err != nil {
		t.failed(err)
		return false
	}
	t.ok()
	return n == 1
}

// resign deletes a lead if token still holds it.
var resign = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)

// Resign gives up the lead of name if this candidate (token) holds it, so
// that another takes it at its next try rather than after the lead's ttl.
func (t *Tier) Resign(ctx context.Context, name, token string) {
	if t == nil {
		return
	}
	if err := resign.Run(ctx, t.rc, []string{t.prefix + "lead:" + name}, t.tokenBase+token).Err(); err != nil {
		t.failed(err)
	}
}
