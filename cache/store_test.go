package cache

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNewValidates(t *testing.T) {
	cases := []struct {
		name    string
		cfg     Config
		wantErr []string // substrings, all reported at once
	}{
		{"minimal", Config{MaxBytes: 1}, nil},
		{"zero MaxBytes", Config{}, []string{"MaxBytes must be positive"}},
		{"negative MaxBytes", Config{MaxBytes: -5}, []string{"MaxBytes must be positive, got -5"}},
		{"negative FillTimeout", Config{MaxBytes: 1, FillTimeout: -time.Second}, []string{"FillTimeout must not be negative"}},
		{"every problem at once", Config{FillTimeout: -1}, []string{"MaxBytes", "FillTimeout"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(tc.cfg)
			if tc.wantErr == nil {
				require.NoError(t, err)
				require.NotNil(t, s)
				s.Close()
				return
			}
			require.Error(t, err)
			assert.Nil(t, s)
			for _, w := range tc.wantErr {
				assert.ErrorContains(t, err, w)
			}
		})
	}
}

// EntryOverhead must cover at least the Entry itself plus ristretto's
// bookkeeping (about 130 bytes per item).
func TestEntryOverheadCoversEntry(t *testing.T) {
	assert.GreaterOrEqual(t, int64(EntryOverhead), int64(unsafe.Sizeof(Entry{}))+130)
}

func TestNumCounters(t *testing.T) {
	assert.Equal(t, int64(1<<10), numCounters(1), "small caches get the floor")
	assert.Equal(t, int64(10240), numCounters(1<<20), "10 per KiB")
	assert.Equal(t, int64(1<<24), numCounters(1<<40), "large caches are capped")
}

func TestGetFollowsTheClock(t *testing.T) {
	clk := newFakeClock()
	s := newTestStore(t, clk, nil)
	t0 := clk.Now()
	e := &Entry{Body: []byte("catalog"), Status: 200, Stored: t0,
		Expires: t0.Add(300 * time.Second), StaleUntil: t0.Add(360 * time.Second)}
	s.Set("k", e)
	s.Wait()

	steps := []struct {
		advance time.Duration
		want    State
	}{
		{0, Fresh},
		{299 * time.Second, Fresh},
		{time.Second, Stale}, // at Expires
		{59 * time.Second, Stale},
		{time.Second, Missing}, // at StaleUntil
	}
	for i, st := range steps {
		clk.Advance(st.advance)
		got, state := s.Get("k")
		assert.Equal(t, st.want, state, "step %d", i)
		if st.want == Missing {
			assert.Nil(t, got, "step %d", i)
		} else {
			assert.Same(t, e, got, "step %d", i)
		}
	}

	s.Set("immutable", &Entry{Body: []byte("report")})
	s.Wait()
	clk.Advance(10 * 365 * 24 * time.Hour)
	_, state := s.Get("immutable")
	assert.Equal(t, Fresh, state)

	_, state = s.Get("never set")
	assert.Equal(t, Missing, state)
}

func TestSetIgnores(t *testing.T) {
	clk := newFakeClock()
	now := clk.Now()
	cases := []struct {
		name string
		e    *Entry
	}{
		{"nil", nil},
		{"NoStore", &Entry{Body: []byte("x"), NoStore: true}},
		{"already expired, no stale window", &Entry{Expires: now}},
		{"already past StaleUntil", &Entry{Expires: now.Add(-time.Minute), StaleUntil: now}},
		{"larger than MaxBytes", &Entry{Body: make([]byte, 1<<20)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestStore(t, clk, nil)
			s.Set("k", tc.e)
			s.Wait()
			_, state := s.Get("k")
			assert.Equal(t, Missing, state)
			assert.Zero(t, s.Bytes())
		})
	}
}

// With a Clock of its own, only that Clock says when an entry dies: the
// wall clock moving on (a busy machine between two requests of a test)
// does not drop it. An entry with a microsecond to live by a clock that
// stands still is still there after the Set is applied, however long that
// took; ristretto's wall-clock TTL dropped it.
func TestOwnClockAloneEndsEntries(t *testing.T) {
	clk := newFakeClock()
	s := newTestStore(t, clk, nil)
	now := clk.Now()
	s.Set("k", &Entry{Body: []byte("x"), Expires: now.Add(time.Microsecond)})
	s.Wait()
	_, state := s.Get("k")
	assert.Equal(t, Fresh, state, "the Store's clock has not moved")
	clk.Advance(time.Microsecond)
	_, state = s.Get("k")
	assert.Equal(t, Missing, state, "dead by the Store's clock")
}

func TestSetStoresStaleEntries(t *testing.T) {
	clk := newFakeClock()
	s := newTestStore(t, clk, nil)
	now := clk.Now()
	// Past Expires but within its stale window: still worth keeping.
	s.Set("k", &Entry{Expires: now.Add(-time.Second), StaleUntil: now.Add(time.Minute)})
	s.Wait()
	_, state := s.Get("k")
	assert.Equal(t, Stale, state)
}

func TestBytesTracksReplacement(t *testing.T) {
	s := newTestStore(t, newFakeClock(), nil)
	require.Zero(t, s.Bytes())

	s.Set("a", &Entry{Body: make([]byte, 100)})
	s.Wait()
	assert.Equal(t, int64(1+100+EntryOverhead), s.Bytes())

	s.Set("a", &Entry{Body: make([]byte, 1000)}) // replaces, does not add
	s.Wait()
	assert.Equal(t, int64(1+1000+EntryOverhead), s.Bytes())

	s.Set("a", &Entry{Body: make([]byte, 10)}) // shrinks
	s.Wait()
	assert.Equal(t, int64(1+10+EntryOverhead), s.Bytes())

	s.Set("bb", &Entry{Body: make([]byte, 50)})
	s.Wait()
	assert.Equal(t, int64(1+10+EntryOverhead+2+50+EntryOverhead), s.Bytes())
}

// The byte bound is a memory bound: 50 MB of bodies through a 1 MiB store
// leave about 1 MiB behind.
func TestMemoryBound(t *testing.T) {
	const maxBytes = 1 << 20
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)

	s, err := New(Config{MaxBytes: maxBytes})
	require.NoError(t, err)
	defer s.Close()
	for i := range 50_000 {
		body := make([]byte, 1024) // distinct bodies: a shared one would prove nothing
		body[0] = byte(i)
		s.Set(ReportKey("mainnet", "", "0x0003", int64(i)), &Entry{Body: body, Status: 200})
	}
	s.Wait()

	// No slack is needed: only new keys were added, and ristretto admits a
	// new key only after evicting enough to keep the total within MaxCost.
	// (Growing an existing entry is the one way past it; see Bytes.)
	used := s.Bytes()
	assert.LessOrEqual(t, used, int64(maxBytes))
	assert.Greater(t, used, int64(maxBytes/2), "the store should be about full")

	runtime.GC()
	runtime.ReadMemStats(&after)
	growth := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("bytes in use %d, heap growth %d", used, growth)
	// About 1 MiB of entries plus ristretto's fixed structures (counters,
	// 32Ki-slot set buffer, maps); nothing like the 50 MB that went through.
	assert.Less(t, growth, int64(16<<20))
	runtime.KeepAlive(s)
}

func TestClose(t *testing.T) {
	s := newTestStore(t, newFakeClock(), nil)
	s.Set("k", &Entry{Body: []byte("x")})
	s.Wait()
	s.Close()
	s.Close() // again: no effect

	_, state := s.Get("k")
	assert.Equal(t, Missing, state)
	s.Set("k2", &Entry{Body: []byte("x")}) // ignored, no panic
	s.Wait()
	assert.Zero(t, s.Bytes())
	calls := 0
	_, _, err := s.Load(context.Background(), "k", func(context.Context) (*Entry, error) {
		calls++
		return &Entry{}, nil
	})
	assert.ErrorIs(t, err, ErrClosed)
	assert.Zero(t, calls)
}

// Close may race with every other method: ristretto forbids using a cache
// while it closes, so the Store must keep them apart.
func TestCloseWhileInUse(t *testing.T) {
	s, err := New(Config{MaxBytes: 1 << 20})
	require.NoError(t, err)
	fill := func(context.Context) (*Entry, error) { return &Entry{Body: []byte("v")}, nil }
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("k%d-%d", g, i%64)
				s.Set(key, &Entry{Body: []byte(strconv.Itoa(i))})
				s.Get(key)
				_, _, _ = s.Load(context.Background(), key+"L", fill)
				s.Bytes()
			}
		})
	}
	waitUntil(t, "the writers have stored something", func() bool { return s.Bytes() > 0 })
	s.Close()
	close(stop)
	wg.Wait()
	_, state := s.Get("k0-0")
	assert.Equal(t, Missing, state)
}

func BenchmarkGetHit(b *testing.B) {
	s := newTestStore(b, newFakeClock(), nil)
	key := ReportKey("mainnet", "", "0x00037da06d56d083fe599397a4769a042d63aa73dc4ef57709d31e9971a5b439", 1718885772)
	s.Set(key, &Entry{Body: make([]byte, 1024), Status: 200})
	s.Wait()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, st := s.Get(key); st != Fresh {
				b.Fatal("miss")
			}
		}
	})
}

// TestReserve: bytes held outside the entries count against MaxBytes: the
// entries make room for them.
func TestReserve(t *testing.T) {
	s := newTestStore(t, newFakeClock(), func(c *Config) { c.MaxBytes = 64 << 10 })
	for i := range 48 {
		s.Set(strconv.Itoa(i), &Entry{Body: make([]byte, 1024-EntryOverhead-2)})
	}
	s.Wait()
	full := s.Bytes()
	require.Greater(t, full, int64(40<<10))

	s.Reserve(32 << 10)
	for i := range 48 {
		s.Set("n"+strconv.Itoa(i), &Entry{Body: make([]byte, 1024-EntryOverhead-3)})
	}
	s.Wait()
	assert.LessOrEqual(t, s.Bytes(), int64(64<<10), "entries and the reservation within MaxBytes")
	assert.GreaterOrEqual(t, s.Bytes(), int64(32<<10), "the reservation is counted")

	// An entry larger than what is left for entries is not stored.
	s.Set("big", &Entry{Body: make([]byte, 40<<10)})
	s.Wait()
	_, state := s.Get("big")
	assert.Equal(t, Missing, state)
}
