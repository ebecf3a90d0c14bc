package cache

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeClock is a Config.Clock that moves only when told.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// newTestStore returns a 1 MiB store on clk, closed when the test ends.
func newTestStore(t testing.TB, clk *fakeClock, mod func(*Config)) *Store {
	t.Helper()
	cfg := Config{MaxBytes: 1 << 20, Clock: clk.Now}
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

// waitUntil yields until cond holds. It waits for an event, not for a
// duration; the cap only turns a hang into a failure.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting until %s", what)
		}
		runtime.Gosched()
		time.Sleep(50 * time.Microsecond)
	}
}

// waiters returns how many Load calls wait on the flight for key, or -1.
func (s *Store) waitersOf(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f, ok := s.flights[key]; ok {
		return f.waiters
	}
	return -1
}

// lifetime is a caching policy for the entries a test builds: how long an
// entry is fresh and how long after that it may still be served stale. The
// zero value makes immutable entries.
type lifetime struct {
	// TTL is how long an entry is fresh. Zero means forever (immutable, kept
	// until evicted for space); negative means the entry is not stored.
	TTL time.Duration
	// Stale is how long after TTL an entry may still be served stale, while
	// it is being refreshed or while refreshing it fails. Zero means never.
	Stale time.Duration
}

// entry returns an entry for status and body obtained at now, with this
// lifetime. It does not copy body.
func (l lifetime) entry(now time.Time, status int, body []byte) *Entry {
	e := &Entry{Body: body, Status: status, Stored: now}
	switch {
	case l.TTL < 0:
		e.NoStore = true
	case l.TTL > 0:
		e.Expires = now.Add(l.TTL)
		if l.Stale > 0 {
			e.StaleUntil = e.Expires.Add(l.Stale)
		}
	}
	return e
}

// loadWaiting is Load treating a stale entry like a missing one: the call
// waits for the (coalesced) refresh instead of returning the stale entry at
// once, and gets the stale entry only if the refresh fails (StaleError).
// It reaches the stale-if-error answer of a waiting caller without a race.
func (s *Store) loadWaiting(ctx context.Context, key string, fill FillFunc) (*Entry, Outcome, error) {
	if e, st := s.Get(key); st == Fresh {
		return e, Hit, nil
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
