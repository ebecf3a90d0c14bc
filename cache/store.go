package cache

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/ristretto/v2"
	"go.uber.org/zap"
)

// EntryOverhead is the fixed number of bytes added to the cost of every entry
// on top of len(key)+len(Body), for what holding an entry costs besides its
// body: the Entry struct (about 140 bytes), ristretto's item in its sharded
// map, its key-cost record in the eviction policy and its TTL bucket record
// (about 130 bytes together). The key itself is not retained (ristretto keeps
// only its hashes), so counting len(key) keeps the bound conservative. The
// cost counts len(Body), not its capacity: a fill should not hand over a
// body with much spare capacity.
const EntryOverhead = 288

// DefaultFillTimeout is the bound on one fill when Config.FillTimeout is zero.
const DefaultFillTimeout = 30 * time.Second

// ErrClosed is returned by Load when a fill would be needed after Close.
var ErrClosed = errors.New("cache: store closed")

// Config configures a Store. Only MaxBytes is required.
type Config struct {
	// MaxBytes bounds the total cost of the entries held, in bytes; the cost
	// of an entry is len(key)+len(Body)+EntryOverhead plus what its
	// parsed value holds (Kind.Cost). Must be
	// positive.
	MaxBytes int64
	// Clock returns the current time, which decides whether an entry is
	// fresh or stale. If nil, time.Now is used, and dead entries are also
	// dropped by a TTL on the wall clock; with a Clock of its own they
	// leave by eviction only.
	Clock func() time.Time
	// Logger receives the fill failures that no caller receives: a failed
	// background refresh, a failure answered with a stale entry, a panic in
	// a fill. If nil, nothing is logged.
	Logger *zap.Logger
	// FillTimeout bounds each fill, which runs detached from the callers'
	// contexts. If zero, DefaultFillTimeout; must not be negative.
	FillTimeout time.Duration
	// OnFlightDone, if non-nil, is called once when a fill has ended, with
	// the fill's key and the number of Load calls that waited for it: 1 for
	// a miss nobody shared, 0 for a background refresh nobody waited for.
	// It is called from the fill's goroutine and must not block.
	OnFlightDone func(key string, waiters int)
	// Shared, if non-nil, is the tier behind memory that LoadFrom asks
	// before a Source's fill (cache/shared's Tier).
	Shared Tier
}

// Store is a byte-bounded cache of entries with coalesced fills. It is safe
// for concurrent use by multiple goroutines. Create one with New and release
// it with Close.
type Store struct {
	rc           *ristretto.Cache[string, *Entry]
	maxBytes     int64
	now          func() time.Time
	log          *zap.Logger
	fillTimeout  time.Duration
	onFlightDone func(key string, waiters int)
	tier         Tier         // nil: no shared tier
	reserved     atomic.Int64 // bytes held outside the entries (Reserve)
	wallClock    bool         // now is time.Now: ristretto's TTLs count the same time

	// closeMu excludes ristretto's Close from every other use of rc:
	// ristretto does not allow them to overlap.
	closeMu sync.RWMutex

	mu      sync.Mutex         // guards flights and closing
	flights map[string]*flight // fills in progress, by key
	closing bool               // no new fills once set
	wg      sync.WaitGroup     // fill goroutines

	closeOnce sync.Once
}

// New returns a Store configured by cfg, or an error naming every problem
// of cfg.
func New(cfg Config) (*Store, error) {
	var errs []error
	if cfg.MaxBytes <= 0 {
		errs = append(errs, fmt.Errorf("cache: MaxBytes must be positive, got %d", cfg.MaxBytes))
	}
	if cfg.FillTimeout < 0 {
		errs = append(errs, fmt.Errorf("cache: FillTimeout must not be negative, got %s", cfg.FillTimeout))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	s := &Store{
		maxBytes:     cfg.MaxBytes,
		now:          cfg.Clock,
		log:          cfg.Logger,
		fillTimeout:  cfg.FillTimeout,
		onFlightDone: cfg.OnFlightDone,
		tier:         cfg.Shared,
		flights:      make(map[string]*flight),
	}
	if s.now == nil {
		s.now, s.wallClock = time.Now, true
	}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	if s.fillTimeout == 0 {
		s.fillTimeout = DefaultFillTimeout
	}
	rc, err := ristretto.NewCache(&ristretto.Config[string, *Entry]{
		NumCounters:        numCounters(cfg.MaxBytes),
		MaxCost:            cfg.MaxBytes,
		BufferItems:        64,
		IgnoreInternalCost: true,
	})
	if err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	s.rc = rc
	return s, nil
}

// numCounters sizes ristretto's admission counters: ten per entry that fits
// if entries are about 1 KiB, as ristretto advises, within [1Ki, 16Mi]
// (about 3 bytes each, so at most about 50 MB, reached from 1.6 GiB).
func numCounters(maxBytes int64) int64 {
	const lo, hi = 1 << 10, 1 << 24
	n := maxBytes / 1024 * 10
	return min(max(n, lo), hi)
}

// cost is what an entry counts against MaxBytes.
func cost(key string, e *Entry) int64 {
	return int64(len(key)) + int64(len(e.Body)) + EntryOverhead + max(e.valueCost, 0)
}

// Get returns the entry stored under key and its state now. A Missing state
// comes with a nil entry. The entry must not be modified.
func (s *Store) Get(key string) (*Entry, State) {
	return s.get(key, time.Time{})
}

// GetAt is Get at now, a reading of the Store's clock the caller already
// made (a request's one reading), so that a hit reads no clock of its own.
func (s *Store) GetAt(key string, now time.Time) (*Entry, State) {
	return s.get(key, now)
}

// get is Get at now, or at the clock's time when now is zero.
func (s *Store) get(key string, now time.Time) (*Entry, State) {
	s.closeMu.RLock()
	e, ok := s.rc.Get(key)
	s.closeMu.RUnlock()
	if !ok || e == nil {
		return nil, Missing
	}
	if e.Expires.IsZero() {
		return e, Fresh
	}
	if now.IsZero() {
		now = s.now()
	}
	st := e.state(now)
	if st == Missing {
		return nil, Missing
	}
	return e, st
}

// Set stores e under key, replacing any entry there. Like every write to
// the underlying cache it is asynchronous and may be dropped (under
// contention, or by the admission policy when the store is full): a Get right
// after it may miss; Wait makes it visible. Entries marked NoStore, entries
// already past their StaleUntil (or Expires, without a stale window) and
// entries costing more than MaxBytes are not stored. The Store keeps e
// itself: the caller must not modify it afterwards.
func (s *Store) Set(key string, e *Entry) {
	s.set(key, e)
}

// set is Set, reporting whether the write was accepted for processing.
func (s *Store) set(key string, e *Entry) bool {
	if e == nil || e.NoStore {
		return false
	}
	c := cost(key, e)
	if c > s.maxBytes-s.reserved.Load() {
		return false
	}
	// Entries are also given a ristretto TTL, so that memory held by dead
	// entries is reclaimed without waiting for eviction. ristretto counts
	// that TTL on the wall clock, so only a Store on the wall clock gives
	// one: with a Clock of its own (a test's, standing still while the
	// machine is slow) a wall-clock TTL would drop entries its Clock still
	// calls fresh. The Store's Clock alone decides freshness; without a
	// TTL, dead entries leave by eviction.
	var ttl time.Duration
	if !e.Expires.IsZero() {
		end := e.Expires
		if e.StaleUntil.After(end) {
			end = e.StaleUntil
		}
		ttl = end.Sub(s.now())
		if ttl <= 0 {
			return false // dead already
		}
		if !s.wallClock {
			ttl = 0
		}
	}
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	return s.rc.SetWithTTL(key, e, c, ttl)
}

// Wait blocks until every Set made before it has been applied (or dropped).
// A flight waits for its own entry (Load keeps it joinable until then); a
// fill that stores other keys too (a bulk's reports, a page's) calls Wait
// before it answers, so that a request made after the answer is a hit.
func (s *Store) Wait() {
	s.closeMu.RLock()
	s.rc.Wait()
	s.closeMu.RUnlock()
}

// Clear drops every entry held in memory (the shared tier is not
// touched); what Reserve counted stays. Gets and Sets wait while it runs.
// A fill under way may still store its entry afterwards. The gateway
// calls it when a reload makes report verification stricter, so that
// nothing admitted under the old rules is served from memory.
func (s *Store) Clear() {
	s.closeMu.Lock()
	s.rc.Clear()
	s.closeMu.Unlock()
}

// MetricBytes is the name of the gauge of Bytes, registered by the
// assembly (server) and read by the status page, both from here: a rename
// breaks the build, not the page.
const MetricBytes = "streamgate_cache_bytes"

// Bytes returns the total cost of the entries held, in bytes, and of what
// Reserve counted: what the eviction policy has admitted minus what it has
// evicted, expired or replaced. It stays within MaxBytes, except that
// replacing an entry with a larger one is admitted without eviction until
// the next new entry is added.
func (s *Store) Bytes() int64 {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	return s.rc.MaxCost() - s.rc.RemainingCost() + s.reserved.Load()
}

// Reserve counts n more bytes held for the cache outside its entries (the
// keys a caller keeps made, say) against MaxBytes: the entries may hold
// that much less from then on, and the next new entries evict to make up
// for it. A negative n gives bytes back.
func (s *Store) Reserve(n int64) {
	r := s.reserved.Add(n)
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	s.rc.UpdateMaxCost(max(s.maxBytes-r, 1))
}

// Close stops new fills, waits for the running ones (foreground fills and
// background refreshes; each is bounded by FillTimeout if its fill honours
// its context), then releases the cache. Afterwards Get misses, Set is
// ignored and Load returns ErrClosed where it would need a fill. Close may be
// called more than once.
func (s *Store) Close() {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closing = true
		s.mu.Unlock()
		s.wg.Wait()
		s.closeMu.Lock()
		s.rc.Close()
		s.closeMu.Unlock()
	})
}
