package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"go.uber.org/zap"
)

// Sentinel errors, checked with errors.Is.
var (
	// ErrInvalidLimit reports a Limit that Validate rejects.
	ErrInvalidLimit = errors.New("ratelimit: invalid limit")
	// ErrUnavailable reports that a FailClosed Redis implementation could
	// not reach Redis and refused instead of deciding. Map it to HTTP 503.
	ErrUnavailable = errors.New("ratelimit: redis unavailable")
	// ErrBudgetExhausted reports that the upstream budget has no token
	// within the caller's deadline. The error is a *BudgetError.
	ErrBudgetExhausted = errors.New("ratelimit: upstream budget exhausted")
)

// Limit is a token bucket: Rate tokens are added per second, up to Burst.
// Every event takes one token.
type Limit struct {
	// Rate is the sustained rate in events per second. Zero means
	// unlimited: every event is allowed and nothing is stored.
	Rate float64
	// Burst is the bucket size: how many events may happen at once after
	// a quiet period. It must be at least 1 when Rate is set.
	Burst int
}

// Unlimited reports whether l lets every event through.
func (l Limit) Unlimited() bool { return l.Rate == 0 }

// Validate reports whether l is usable: a finite, non-negative Rate and, if
// Rate is set, a Burst of at least 1. The error wraps ErrInvalidLimit.
func (l Limit) Validate() error {
	switch {
	case math.IsNaN(l.Rate) || math.IsInf(l.Rate, 0) || l.Rate < 0:
		return fmt.Errorf("%w: rate %v is not a finite number >= 0", ErrInvalidLimit, l.Rate)
	case l.Burst < 0:
		return fmt.Errorf("%w: burst %d is negative", ErrInvalidLimit, l.Burst)
	case l.Rate > 0 && l.Burst < 1:
		return fmt.Errorf("%w: burst must be at least 1 when rate is set", ErrInvalidLimit)
	}
	return nil
}

// durationFor returns how long it takes l to add tokens, rounded up to the
// nanosecond so that waiting that long is always enough. l must be limited.
func (l Limit) durationFor(tokens float64) time.Duration {
	if tokens <= 0 {
		return 0
	}
	ns := math.Ceil(tokens / l.Rate * float64(time.Second))
	if ns >= math.MaxInt64 {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(ns)
}

// Decision is the outcome of one event.
type Decision struct {
	// Allowed reports whether the event may happen.
	Allowed bool
	// Limit is the limit that was applied.
	Limit Limit
	// Remaining is the number of further events that would be allowed
	// right now.
	Remaining int
	// RetryAfter is, when the event was refused, how long until one event
	// would be allowed. It is zero when the event was allowed.
	RetryAfter time.Duration
	// Reset is how long until the bucket is full again (for a daily quota:
	// until the end of the UTC day).
	Reset time.Duration
}

// Limiter decides whether one event for key may happen under l.
// Implementations are safe for concurrent use.
type Limiter interface {
	Allow(ctx context.Context, key string, l Limit) (Decision, error)
}

// FailMode says what a Redis implementation does while Redis does not
// answer.
type FailMode int

const (
	// FailOpen decides with a local memory implementation: every replica
	// enforces the full limits on its own. It is the zero value.
	FailOpen FailMode = iota
	// FailClosed refuses with an error wrapping ErrUnavailable.
	FailClosed
)

// String returns "open" or "closed", the values ParseFailMode accepts.
func (m FailMode) String() string {
	switch m {
	case FailOpen:
		return "open"
	case FailClosed:
		return "closed"
	}
	return fmt.Sprintf("FailMode(%d)", int(m))
}

// ParseFailMode parses "open" or "closed".
func ParseFailMode(s string) (FailMode, error) {
	switch s {
	case "open":
		return FailOpen, nil
	case "closed":
		return FailClosed, nil
	}
	return 0, fmt.Errorf("ratelimit: fail mode %q is neither \"open\" nor \"closed\"", s)
}

// Defaults of Options.
const (
	DefaultMaxKeys       = 100_000
	DefaultPrefix        = "streamgate:rl:"
	DefaultRetryInterval = time.Second
)

// Options configure every constructor of this package. The zero value is
// valid; fields that do not apply to a type are ignored by it.
type Options struct {
	// Name is the "limiter" label of streamgate_ratelimit_decisions_total
	// for a Limiter or Quota, e.g. "team" or "quota". It must come from a
	// fixed set. Default "default".
	Name string
	// Network is the "network" label of a Budget's metrics and part of its
	// Redis keys, e.g. "mainnet". Default "default". Budgets only.
	Network string
	// MaxKeys bounds the keys a memory implementation holds (a Redis one:
	// its local fallback), rounded up to a multiple of 16. When it is
	// reached the least recently used key is dropped; a key whose bucket is
	// full again, or whose quota day is over, loses nothing by that, and
	// such keys are also dropped as new ones arrive. Default 100000.
	MaxKeys int
	// Now returns the current time; nil means time.Now. The memory
	// Limiter decides at Now, and Redis implementations schedule their
	// retries of Redis by it. Budgets always wait in real time, and a
	// Quota takes the time as an argument.
	Now func() time.Time
	// Metrics receives the counters; nil records nothing.
	Metrics *Metrics
	// Logger receives one line each time Redis becomes unavailable and
	// each time it is back, and, for a Budget, each time the rate in force
	// of a key changes (Budget.Throttled); nil logs nothing.
	Logger *zap.Logger
	// BudgetMargin is added to the interval 1/rate between two tokens of
	// a Budget: a safety margin for an upstream that sees the calls a
	// little closer together than they were sent (network and scheduling
	// jitter). Default 0; it must not be negative. Budgets only.
	BudgetMargin time.Duration

	// Prefix starts every Redis key. Default "streamgate:rl:". Keys are
	// Prefix+"rate:"+key for a Limiter, Prefix+"quota:"+key+":"+YYYY-MM-DD
	// for a Quota, and Prefix+"budget:{"+network+":"+key+"}",
	// Prefix+"pause:{"+network+":"+key+"}" and (the rate learned from
	// upstream 429s) Prefix+"adapt:{"+network+":"+key+"}" for a Budget,
	// the three of one key in one Redis Cluster slot. Callers give a
	// team's keys its hash tag (TeamRateKey, KeyRateKey, DailyKey). Redis
	// only.
	Prefix string
	// FailMode is what to do while Redis fails. Default FailOpen. Redis
	// only.
	FailMode FailMode
	// RetryInterval is how long to decide without Redis after it failed
	// before trying it again (one request then probes it). Default 1s.
	// Redis only.
	RetryInterval time.Duration
}

func (o Options) withDefaults() (Options, error) {
	if o.MaxKeys < 0 {
		return o, fmt.Errorf("ratelimit: MaxKeys %d is negative", o.MaxKeys)
	}
	if o.BudgetMargin < 0 {
		return o, fmt.Errorf("ratelimit: BudgetMargin %v is negative", o.BudgetMargin)
	}
	if o.RetryInterval < 0 {
		return o, fmt.Errorf("ratelimit: RetryInterval %v is negative", o.RetryInterval)
	}
	if o.FailMode != FailOpen && o.FailMode != FailClosed {
		return o, fmt.Errorf("ratelimit: unknown %v", o.FailMode)
	}
	if o.Name == "" {
		o.Name = "default"
	}
	if o.Network == "" {
		o.Network = "default"
	}
	if o.MaxKeys == 0 {
		o.MaxKeys = DefaultMaxKeys
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.RetryInterval == 0 {
		o.RetryInterval = DefaultRetryInterval
	}
	return o, nil
}
