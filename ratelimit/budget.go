// This file holds what both upstream budgets share: the Budget interface,
// its errors, and the timing rules (interval, spacing, horizon, the
// caller's deadline) that MemoryBudget (budget_memory.go) and RedisBudget
// (budget_redis.go) apply alike.

package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
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

// interval is the time between two tokens at rate eff (> 0) with margin.
func interval(eff float64, margin time.Duration) time.Duration {
	ns := math.Ceil(float64(time.Second)/eff) + float64(margin)
	if ns >= math.MaxInt64/2 {
		return math.MaxInt64 / 2
	}
	return time.Duration(ns)
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

// spacing is the least time between two calls of a key under l on one
// process, t being the interval of its rate in force: t with burst 1 (the
// budget's), none for a bucket with a burst or an unlimited one.
func spacing(l Limit, t time.Duration) time.Duration {
	if l.Burst != 1 || l.Unlimited() {
		return 0
	}
	return t
}

// sentNothing is the Sent of a call without a spacing to keep.
func sentNothing(time.Time) {}
