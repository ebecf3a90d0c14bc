// This file holds MemoryBudget, the upstream budget kept in this process,
// also the local half (spacing, departures, fallback) of RedisBudget.

package ratelimit

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"
)

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
