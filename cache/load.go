package cache

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// FillFunc produces the entry for a key, typically by calling the upstream.
// It decides the entry's lifetime (Expires, StaleUntil) and may mark it
// NoStore. It runs on a goroutine of the Store with a context detached from
// the callers' (their values are kept, their cancellation is not) and bounded
// by Config.FillTimeout, and it should return when that context is done.
type FillFunc func(ctx context.Context) (*Entry, error)

// Outcome says how Load answered.
type Outcome int

const (
	// Hit: a fresh entry was in the cache.
	Hit Outcome = iota
	// Miss: this call started a fill and waited for it.
	Miss
	// Coalesced: this call waited for a fill started by another.
	Coalesced
	// StaleHit: a stale entry was returned at once; a background refresh
	// was started, or one was already running.
	StaleHit
	// StaleError: the fill failed and a stale entry was returned instead.
	StaleError
)

func (o Outcome) String() string {
	switch o {
	case Hit:
		return "hit"
	case Miss:
		return "miss"
	case Coalesced:
		return "coalesced"
	case StaleHit:
		return "stale"
	case StaleError:
		return "stale_error"
	}
	return "unknown"
}

// flight is one fill in progress and, once done is closed, its result.
type flight struct {
	done chan struct{}

	// Written before done is closed, read after.
	entry      *Entry
	err        error // the fill's error, when no entry answers it
	fromCache  bool  // the check inside the flight found a fresh entry
	staleOnErr bool  // entry is a stale one answering a failed fill
	fillErr    error // the failure that staleOnErr answers

	waiters int // Load calls that waited for the result; guarded by Store.mu
}

// Load returns the entry for key, calling fill if needed.
//
//   - A fresh entry is returned at once (Hit).
//   - Without one, the calls for one key share a single fill: the call that
//     starts it gets Miss and the others Coalesced. The fill runs detached
//     from the callers: a caller whose ctx ends gets ctx.Err() at once while
//     the fill goes on for the others and still fills the cache. A failed
//     fill is not cached, and its error, unchanged, goes to every call
//     waiting for it.
//   - A stale entry is returned at once (StaleHit) and one background refresh
//     is started for the key unless a fill is already running.
//   - When a fill fails while a stale entry is held, that entry is returned
//     with StaleError and a nil error; the failure is logged by the Store.
//
// The entry is non-nil exactly when the error is nil; the Outcome is set in
// both cases (Miss or Coalesced with an error). After Close, Load returns
// ErrClosed where it would need a new fill.
func (s *Store) Load(ctx context.Context, key string, fill FillFunc) (*Entry, Outcome, error) {
	e, st := s.Get(key)
	switch st {
	case Fresh:
		return e, Hit, nil
	case Stale:
		// A refresh refused because the Store is closing changes nothing
		// for this caller.
		_, _, _ = s.join(ctx, key, fill, false)
		return e, StaleHit, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, Miss, err
	}
	f, started, err := s.join(ctx, key, fill, true)
	if err != nil {
		return nil, Miss, err
	}
	return f.await(ctx, started)
}

// await waits for the flight that the caller joined (started: as its first
// caller) and returns its result as Load does.
func (f *flight) await(ctx context.Context, started bool) (*Entry, Outcome, error) {
	out := Coalesced
	select {
	case <-f.done:
		// Joined after the fill had answered, while its entry becomes
		// visible: nothing was waited for, so it is a hit.
		if !started {
			out = Hit
		}
	default:
	}
	if started {
		out = Miss
	}
	select {
	case <-f.done:
	case <-ctx.Done():
		select {
		case <-f.done: // finished meanwhile: use it
		default:
			return nil, out, ctx.Err()
		}
	}
	switch {
	case f.fromCache:
		return f.entry, Hit, nil
	case f.staleOnErr:
		return f.entry, StaleError, nil
	case f.err != nil:
		return nil, out, f.err
	}
	return f.entry, out, nil
}

// join returns the flight for key, starting one if none is running, and
// reports whether it started it. A waiting caller is counted as a waiter.
func (s *Store) join(ctx context.Context, key string, fill FillFunc, waiting bool) (*flight, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f, ok := s.flights[key]; ok && !f.outlived(s.now()) {
		if waiting {
			f.waiters++
		}
		return f, false, nil
	}
	if s.closing {
		return nil, false, ErrClosed
	}
	f := &flight{done: make(chan struct{})}
	if waiting {
		f.waiters = 1
	}
	s.flights[key] = f
	s.wg.Add(1)
	go s.run(context.WithoutCancel(ctx), key, f, fill)
	return f, true, nil
}

// run performs the flight f for key and retires it.
func (s *Store) run(ctx context.Context, key string, f *flight, fill FillFunc) {
	defer s.wg.Done()
	var waiters int
	if s.fill(ctx, key, f, fill) {
		// Answer the waiters, but keep the flight joinable until the new
		// entry is visible in the cache: callers that miss meanwhile join
		// it rather than start another fill.
		close(f.done)
		s.Wait()
		waiters = s.retire(key, f)
	} else {
		// Nothing was stored: retire first, so that a call made after the
		// waiters are answered starts a new fill.
		waiters = s.retire(key, f)
		close(f.done)
	}

	switch {
	case f.staleOnErr:
		s.log.Warn("cache: fill failed, serving the stale entry",
			zap.String("key", key), zap.Int("waiters", waiters), zap.Error(f.fillErr))
	case f.err != nil && waiters == 0:
		s.log.Warn("cache: background refresh failed", zap.String("key", key), zap.Error(f.err))
	}
	if s.onFlightDone != nil && !f.fromCache {
		s.onFlightDone(key, waiters)
	}
}

// retire removes the flight f for key, unless a newer one took its place
// (see outlived), and returns its final waiter count.
func (s *Store) retire(key string, f *flight) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.flights[key] == f {
		delete(s.flights, key)
	}
	return f.waiters
}

// outlived reports whether f has answered with an entry that is no longer
// fresh at now. Such a flight, kept joinable only until its entry is
// visible, has nothing to give a caller who found no fresh entry: a new
// flight takes its place. (On a busy machine the entry can die, by a
// short lifetime or a test's clock, before the flight is retired.)
func (f *flight) outlived(now time.Time) bool {
	select {
	case <-f.done:
	default:
		return false // still filling
	}
	return f.entry != nil && !f.entry.Expires.IsZero() && f.entry.state(now) != Fresh
}

// fill sets the result of f, calling fn unless the cache now holds a fresh
// entry, and reports whether it stored a new entry.
func (s *Store) fill(ctx context.Context, key string, f *flight, fn FillFunc) (stored bool) {
	// Another flight may have filled the key since the caller looked.
	if e, st := s.Get(key); st == Fresh {
		f.entry, f.fromCache = e, true
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, s.fillTimeout)
	defer cancel()
	e, err := s.call(ctx, key, fn)
	if err == nil && e == nil {
		err = errors.New("cache: fill returned no entry and no error")
	}
	if err != nil {
		if old, st := s.Get(key); st == Stale {
			f.entry, f.staleOnErr, f.fillErr = old, true, err
		} else {
			f.err = err
		}
		return false
	}
	f.entry = e
	return s.set(key, e)
}

// call runs fn, turning a panic into an error so that it cannot take the
// process down from a goroutine no caller owns.
func (s *Store) call(ctx context.Context, key string, fn FillFunc) (e *Entry, err error) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("cache: fill panicked", zap.String("key", key),
				zap.Any("panic", r), zap.StackSkip("stack", 1))
			e, err = nil, fmt.Errorf("cache: fill panicked: %v", r)
		}
	}()
	return fn(ctx)
}
