package cache

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

var errUpstream = errors.New("upstream: 503")

// gatedFill is a fill that counts its calls and, if gated, blocks until
// released.
type gatedFill struct {
	calls    atomic.Int32
	started  chan struct{} // receives one value per call
	release  chan struct{}
	entry    func() *Entry
	err      error
	lastCtx  atomic.Value // context.Context of the last call
	finished atomic.Int32
}

func newGatedFill(entry func() *Entry, err error) *gatedFill {
	return &gatedFill{started: make(chan struct{}, 100), release: make(chan struct{}), entry: entry, err: err}
}

func (g *gatedFill) fill(ctx context.Context) (*Entry, error) {
	g.calls.Add(1)
	g.lastCtx.Store(ctx)
	g.started <- struct{}{}
	<-g.release
	defer g.finished.Add(1)
	if g.err != nil {
		return nil, g.err
	}
	return g.entry(), nil
}

func immediate(e *Entry, err error) FillFunc {
	return func(context.Context) (*Entry, error) { return e, err }
}

func TestLoadHit(t *testing.T) {
	s := newTestStore(t, newFakeClock(), nil)
	e := &Entry{Body: []byte("x")}
	s.Set("k", e)
	s.Wait()
	got, out, err := s.Load(context.Background(), "k", func(context.Context) (*Entry, error) {
		t.Error("fill called on a hit")
		return nil, nil
	})
	require.NoError(t, err)
	assert.Equal(t, Hit, out)
	assert.Same(t, e, got)
}

func TestLoadCoalescesConcurrentMisses(t *testing.T) {
	const n = 50
	type done struct {
		key     string
		waiters int
	}
	flights := make(chan done, 10)
	s := newTestStore(t, newFakeClock(), func(c *Config) {
		c.OnFlightDone = func(key string, waiters int) { flights <- done{key, waiters} }
	})
	g := newGatedFill(func() *Entry { return &Entry{Body: []byte("report"), Status: 200} }, nil)

	type result struct {
		e   *Entry
		out Outcome
		err error
	}
	results := make(chan result, n)
	for range n {
		go func() {
			e, out, err := s.Load(context.Background(), "k", g.fill)
			results <- result{e, out, err}
		}()
	}
	waitUntil(t, "all callers wait on the flight", func() bool { return s.waitersOf("k") == n })
	close(g.release)

	outcomes := map[Outcome]int{}
	var first *Entry
	for range n {
		r := <-results
		require.NoError(t, r.err)
		outcomes[r.out]++
		if first == nil {
			first = r.e
		}
		assert.Same(t, first, r.e, "every caller gets the one filled entry")
	}
	assert.Equal(t, int32(1), g.calls.Load(), "one fill for all")
	assert.Equal(t, map[Outcome]int{Miss: 1, Coalesced: n - 1}, outcomes)
	assert.Equal(t, done{"k", n}, <-flights)

	s.Wait()
	got, state := s.Get("k")
	assert.Equal(t, Fresh, state)
	assert.Same(t, first, got)
}

// A caller that gives up returns at once with its ctx error; the fill goes
// on for the others and fills the cache. Here the one that gives up is the
// one that started the fill.
func TestLoadCallerGivesUp(t *testing.T) {
	s := newTestStore(t, newFakeClock(), nil)
	g := newGatedFill(func() *Entry { return &Entry{Body: []byte("report")} }, nil)

	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "req-1"))
	leaderDone := make(chan error, 1)
	go func() {
		_, out, err := s.Load(ctx, "k", g.fill)
		assert.Equal(t, Miss, out)
		leaderDone <- err
	}()
	<-g.started
	other := make(chan Outcome, 1)
	go func() {
		e, out, err := s.Load(context.Background(), "k", g.fill)
		assert.NoError(t, err)
		assert.Equal(t, []byte("report"), e.Body)
		other <- out
	}()
	waitUntil(t, "the second caller waits", func() bool { return s.waitersOf("k") == 2 })

	cancel()
	// The fill is still blocked, so returning here proves the caller did
	// not wait for it.
	assert.ErrorIs(t, <-leaderDone, context.Canceled)
	fillCtx := g.lastCtx.Load().(context.Context)
	assert.NoError(t, fillCtx.Err(), "the fill's context is detached from the caller's")
	assert.Equal(t, "req-1", fillCtx.Value(ctxKey{}), "but keeps its values")
	deadline, ok := fillCtx.Deadline()
	assert.True(t, ok, "the fill is bounded by FillTimeout")
	assert.LessOrEqual(t, time.Until(deadline), DefaultFillTimeout)

	close(g.release)
	assert.Equal(t, Coalesced, <-other)
	s.Wait()
	_, state := s.Get("k")
	assert.Equal(t, Fresh, state, "the abandoned fill still filled the cache")
	assert.Equal(t, int32(1), g.calls.Load())
}

type ctxKey struct{}

func TestLoadCancelledBeforeStartCallsNoFill(t *testing.T) {
	s := newTestStore(t, newFakeClock(), nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, out, err := s.Load(ctx, "k", func(context.Context) (*Entry, error) {
		t.Error("fill called for a caller already gone")
		return nil, nil
	})
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, Miss, out)
}

func TestLoadFailedFillIsNotCached(t *testing.T) {
	s := newTestStore(t, newFakeClock(), nil)
	g := newGatedFill(nil, errUpstream)
	errs := make(chan error, 3)
	for range 3 {
		go func() {
			e, _, err := s.Load(context.Background(), "k", g.fill)
			assert.Nil(t, e)
			errs <- err
		}()
	}
	waitUntil(t, "all callers wait", func() bool { return s.waitersOf("k") == 3 })
	close(g.release)
	for range 3 {
		assert.ErrorIs(t, <-errs, errUpstream, "every waiter gets the fill's error")
	}
	assert.Equal(t, int32(1), g.calls.Load())

	s.Wait()
	_, state := s.Get("k")
	assert.Equal(t, Missing, state)

	var calls int
	e, out, err := s.Load(context.Background(), "k", func(context.Context) (*Entry, error) {
		calls++
		return &Entry{Body: []byte("ok")}, nil
	})
	require.NoError(t, err)
	assert.Equal(t, 1, calls, "the next Load fills again")
	assert.Equal(t, Miss, out)
	assert.Equal(t, []byte("ok"), e.Body)
}

func TestLoadNoStoreAnswersWaitersOnly(t *testing.T) {
	s := newTestStore(t, newFakeClock(), nil)
	g := newGatedFill(func() *Entry { return &Entry{Body: []byte("private"), Status: 200, NoStore: true} }, nil)
	outs := make(chan Outcome, 2)
	for range 2 {
		go func() {
			e, out, err := s.Load(context.Background(), "k", g.fill)
			assert.NoError(t, err)
			assert.Equal(t, []byte("private"), e.Body)
			outs <- out
		}()
	}
	waitUntil(t, "both callers wait", func() bool { return s.waitersOf("k") == 2 })
	close(g.release)
	assert.ElementsMatch(t, []Outcome{Miss, Coalesced}, []Outcome{<-outs, <-outs})

	s.Wait()
	_, state := s.Get("k")
	assert.Equal(t, Missing, state)
	_, out, err := s.Load(context.Background(), "k", immediate(&Entry{NoStore: true}, nil))
	require.NoError(t, err)
	assert.Equal(t, Miss, out)
}

func TestLoadFillMisbehaves(t *testing.T) {
	core, logs := observer.New(zapcore.ErrorLevel)
	s := newTestStore(t, newFakeClock(), func(c *Config) { c.Logger = zap.New(core) })
	cases := []struct {
		name    string
		fill    FillFunc
		wantErr string
	}{
		{"nil entry and nil error", immediate(nil, nil), "fill returned no entry"},
		{"panic", func(context.Context) (*Entry, error) { panic("boom") }, "fill panicked: boom"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e, out, err := s.Load(context.Background(), tc.name, tc.fill)
			assert.Nil(t, e)
			assert.Equal(t, Miss, out)
			assert.ErrorContains(t, err, tc.wantErr)
		})
	}
	assert.Equal(t, 1, logs.FilterMessage("cache: fill panicked").Len(), "the panic's stack is logged")
}

func TestLoadFillTimeout(t *testing.T) {
	s := newTestStore(t, newFakeClock(), func(c *Config) { c.FillTimeout = time.Millisecond })
	_, _, err := s.Load(context.Background(), "k", func(ctx context.Context) (*Entry, error) {
		<-ctx.Done() // a fill that only ends with its context
		return nil, ctx.Err()
	})
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}

// The flight looks at the cache again before filling: the key may have been
// filled since its caller missed.
func TestFlightChecksCacheAgain(t *testing.T) {
	var flights atomic.Int32
	s := newTestStore(t, newFakeClock(), func(c *Config) {
		c.OnFlightDone = func(string, int) { flights.Add(1) }
	})
	e := &Entry{Body: []byte("filled meanwhile")}
	s.Set("k", e)
	s.Wait()
	f, started, err := s.join(context.Background(), "k", func(context.Context) (*Entry, error) {
		t.Error("fill called although the cache holds a fresh entry")
		return nil, nil
	}, true)
	require.NoError(t, err)
	assert.True(t, started)
	<-f.done
	assert.True(t, f.fromCache)
	assert.Same(t, e, f.entry)
	s.Close() // waits for the flight to retire
	assert.Zero(t, flights.Load(), "no fill ran, so no flight is reported")
}

func TestStaleWhileRevalidate(t *testing.T) {
	clk := newFakeClock()
	flights := make(chan int, 10)
	s := newTestStore(t, clk, func(c *Config) {
		c.OnFlightDone = func(_ string, waiters int) { flights <- waiters }
	})
	old := lifetime{TTL: 10 * time.Second, Stale: time.Minute}.entry(clk.Now(), 200, []byte("old"))
	s.Set("k", old)
	s.Wait()
	clk.Advance(20 * time.Second)

	g := newGatedFill(func() *Entry {
		return lifetime{TTL: 10 * time.Second, Stale: time.Minute}.entry(clk.Now(), 200, []byte("new"))
	}, nil)
	const n = 30
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			e, out, err := s.Load(context.Background(), "k", g.fill)
			assert.NoError(t, err)
			assert.Equal(t, StaleHit, out)
			assert.Same(t, old, e)
		})
	}
	wg.Wait() // every stale read returned while the refresh is still blocked
	<-g.started
	assert.Equal(t, int32(1), g.calls.Load(), "one background refresh")
	assert.Equal(t, 0, s.waitersOf("k"), "nobody waits for it")

	close(g.release)
	assert.Equal(t, 0, <-flights)
	s.Wait()
	e, out, err := s.Load(context.Background(), "k", g.fill)
	require.NoError(t, err)
	assert.Equal(t, Hit, out)
	assert.Equal(t, []byte("new"), e.Body)
	assert.Equal(t, int32(1), g.calls.Load())
}

func TestCloseWaitsForBackgroundRefresh(t *testing.T) {
	clk := newFakeClock()
	s := newTestStore(t, clk, nil)
	s.Set("k", lifetime{TTL: time.Second, Stale: time.Minute}.entry(clk.Now(), 200, []byte("old")))
	s.Wait()
	clk.Advance(2 * time.Second)

	g := newGatedFill(func() *Entry { return &Entry{Body: []byte("new")} }, nil)
	_, out, err := s.Load(context.Background(), "k", g.fill)
	require.NoError(t, err)
	require.Equal(t, StaleHit, out)
	<-g.started

	closed := make(chan struct{})
	go func() {
		s.Close()
		close(closed)
	}()
	waitUntil(t, "Close refuses new fills", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.closing
	})
	select {
	case <-closed:
		t.Fatal("Close returned while a refresh was running")
	default:
	}
	// A new fill is refused while Close waits; the stale entry is still served.
	_, _, err = s.Load(context.Background(), "other", immediate(&Entry{}, nil))
	assert.ErrorIs(t, err, ErrClosed)

	close(g.release)
	<-closed
	assert.Equal(t, int32(1), g.finished.Load(), "Close returned only after the refresh ended")
}

func TestStaleIfError(t *testing.T) {
	t.Run("caller waiting for the refresh gets the stale entry", func(t *testing.T) {
		core, logs := observer.New(zapcore.WarnLevel)
		clk := newFakeClock()
		s := newTestStore(t, clk, func(c *Config) { c.Logger = zap.New(core) })
		old := lifetime{TTL: 300 * time.Second, Stale: time.Hour}.entry(clk.Now(), 200, []byte("catalog"))
		s.Set("k", old)
		s.Wait()
		clk.Advance(301 * time.Second)

		e, out, err := s.loadWaiting(context.Background(), "k", immediate(nil, errUpstream))
		require.NoError(t, err, "the failure is answered, not returned")
		assert.Equal(t, StaleError, out)
		assert.Same(t, old, e)
		s.Close() // the flight's log is written when it retires
		require.Equal(t, 1, logs.Len())
		entry := logs.All()[0]
		assert.Equal(t, "cache: fill failed, serving the stale entry", entry.Message)
		assert.Equal(t, errUpstream.Error(), entry.ContextMap()["error"])
	})

	t.Run("failed background refresh keeps the stale entry", func(t *testing.T) {
		core, logs := observer.New(zapcore.WarnLevel)
		clk := newFakeClock()
		s := newTestStore(t, clk, func(c *Config) { c.Logger = zap.New(core) })
		old := lifetime{TTL: time.Second, Stale: time.Minute}.entry(clk.Now(), 200, []byte("latest"))
		s.Set("k", old)
		s.Wait()
		clk.Advance(2 * time.Second)

		var calls atomic.Int32
		fail := func(context.Context) (*Entry, error) { calls.Add(1); return nil, errUpstream }
		e, out, err := s.Load(context.Background(), "k", fail)
		require.NoError(t, err)
		assert.Equal(t, StaleHit, out)
		assert.Same(t, old, e)
		waitUntil(t, "the refresh has retired", func() bool { return s.waitersOf("k") == -1 && calls.Load() == 1 })

		e, out, err = s.Load(context.Background(), "k", fail)
		require.NoError(t, err)
		assert.Equal(t, StaleHit, out, "still served stale after the failed refresh")
		assert.Same(t, old, e)
		s.Close()
		assert.Equal(t, int32(2), calls.Load(), "each stale read after a failure may refresh again")
		assert.Equal(t, 2, logs.FilterMessage("cache: fill failed, serving the stale entry").Len())
	})

	t.Run("refresh failing after the stale window closed is logged", func(t *testing.T) {
		core, logs := observer.New(zapcore.WarnLevel)
		clk := newFakeClock()
		s := newTestStore(t, clk, func(c *Config) { c.Logger = zap.New(core) })
		s.Set("k", lifetime{TTL: time.Second, Stale: time.Minute}.entry(clk.Now(), 200, []byte("old")))
		s.Wait()
		clk.Advance(2 * time.Second)
		g := newGatedFill(nil, errUpstream)
		_, out, err := s.Load(context.Background(), "k", g.fill)
		require.NoError(t, err)
		require.Equal(t, StaleHit, out)
		<-g.started
		clk.Advance(time.Hour) // nothing left to fall back on, nobody waiting
		close(g.release)
		s.Close()
		require.Equal(t, 1, logs.Len())
		assert.Equal(t, "cache: background refresh failed", logs.All()[0].Message)
	})

	t.Run("past StaleUntil the error is returned", func(t *testing.T) {
		clk := newFakeClock()
		s := newTestStore(t, clk, nil)
		s.Set("k", lifetime{TTL: time.Second, Stale: time.Minute}.entry(clk.Now(), 200, []byte("old")))
		s.Wait()
		clk.Advance(time.Minute + time.Second)
		e, out, err := s.loadWaiting(context.Background(), "k", immediate(nil, errUpstream))
		assert.ErrorIs(t, err, errUpstream)
		assert.Equal(t, Miss, out)
		assert.Nil(t, e)
	})

	t.Run("a caller waiting for the refresh gets the new entry when it succeeds", func(t *testing.T) {
		clk := newFakeClock()
		s := newTestStore(t, clk, nil)
		s.Set("k", lifetime{TTL: time.Second, Stale: time.Minute}.entry(clk.Now(), 200, []byte("old")))
		s.Wait()
		clk.Advance(2 * time.Second)
		e, out, err := s.loadWaiting(context.Background(), "k",
			immediate(&Entry{Body: []byte("new")}, nil))
		require.NoError(t, err)
		assert.Equal(t, Miss, out)
		assert.Equal(t, []byte("new"), e.Body)
	})
}

func BenchmarkLoadHit(b *testing.B) {
	s := newTestStore(b, newFakeClock(), nil)
	key := LatestKey("mainnet", "", "0x00037da06d56d083fe599397a4769a042d63aa73dc4ef57709d31e9971a5b439")
	s.Set(key, &Entry{Body: make([]byte, 1024), Status: 200})
	s.Wait()
	fill := immediate(nil, errUpstream)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, out, _ := s.Load(ctx, key, fill); out != Hit {
				b.Fatal("not a hit")
			}
		}
	})
}

// A flight that has answered stays joinable until its entry is visible;
// if meanwhile the entry dies (a short lifetime, a clock moved on, a busy
// machine), a caller who found no fresh entry gets a new fill, not the
// dead entry as a hit. The window between the answer and the flight's
// retirement is held open here by putting such a flight in place.
func TestAnsweredFlightWithADeadEntryIsNotJoined(t *testing.T) {
	clk := newFakeClock()
	s := newTestStore(t, clk, nil)
	old := &flight{done: make(chan struct{}), entry: &Entry{Status: 404, Body: []byte("old"), Expires: clk.Now().Add(time.Second)}}
	close(old.done)
	s.mu.Lock()
	s.flights["k"] = old
	s.mu.Unlock()

	// Still fresh: joined, its entry is the answer (as when not yet visible).
	e, out, err := s.Load(context.Background(), "k", func(context.Context) (*Entry, error) {
		t.Error("a fill while the answered flight's entry is fresh")
		return nil, errors.New("unexpected")
	})
	require.NoError(t, err)
	assert.Equal(t, Hit, out)
	assert.Equal(t, "old", string(e.Body))

	clk.Advance(2 * time.Second)
	e, out, err = s.Load(context.Background(), "k", func(context.Context) (*Entry, error) {
		return &Entry{Status: 200, Body: []byte("new"), Expires: clk.Now().Add(time.Second)}, nil
	})
	require.NoError(t, err)
	assert.Equal(t, Miss, out, "a new fill, not the dead entry")
	assert.Equal(t, "new", string(e.Body))

	// The old flight, retired late, does not remove a newer one.
	newer := &flight{done: make(chan struct{})}
	s.mu.Lock()
	s.flights["k"] = newer
	s.mu.Unlock()
	s.retire("k", old)
	s.mu.Lock()
	assert.Same(t, newer, s.flights["k"])
	s.mu.Unlock()
}
