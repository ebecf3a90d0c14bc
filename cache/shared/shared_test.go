package shared

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"streamgate/cache"
	"streamgate/internal/testing/redistest"
	"streamgate/redisconn"
)

// replica is one Tier with a Redis client of its own, as one gateway process
// has.
type replica struct {
	tier *Tier
	m    *Metrics
	rc   *redisconn.Client
	logs *observer.ObservedLogs
}

func newReplica(t *testing.T, url string, cfg Config) *replica {
	t.Helper()
	rc, err := redisconn.NewURL(url, "", redisconn.Options{CommandTimeout: 100 * time.Millisecond, BreakerOpen: 50 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { rc.Close() })
	m, err := NewMetrics(prometheus.NewRegistry())
	require.NoError(t, err)
	core, logs := observer.New(zap.InfoLevel)
	cfg.Client, cfg.Metrics, cfg.Logger = rc, m, zap.New(core)
	tier, err := New(cfg)
	require.NoError(t, err)
	return &replica{tier: tier, m: m, rc: rc, logs: logs}
}

func (r *replica) lookups(result string) float64 {
	return testutil.ToFloat64(r.m.lookups.WithLabelValues(result))
}

func (r *replica) waits(outcome string) float64 {
	return testutil.ToFloat64(r.m.leaseWait.WithLabelValues(outcome))
}

// counted is a fill that counts its calls and answers body.
type counted struct {
	calls atomic.Int32
	entry func() *cache.Entry
}

func (c *counted) fill(context.Context) (*cache.Entry, error) {
	c.calls.Add(1)
	return c.entry(), nil
}

func immutable(body string) func() *cache.Entry {
	return func() *cache.Entry {
		return &cache.Entry{Status: 200, Body: []byte(body), Stored: time.Now()}
	}
}

// parsed is the value a Check rebuilds, as the catalog's view is.
type parsed struct{ body string }

var parsedKind = cache.Kind[*parsed]{Cost: func(_ *parsed, e *cache.Entry) int64 { return int64(len(e.Body)) }}

func rebuild(e *cache.Entry) error {
	if len(e.Body) == 0 || e.Body[0] != '{' {
		return errors.New("not a JSON object")
	}
	parsedKind.With(e, &parsed{string(e.Body)})
	return nil
}

func TestFillOnceForAllReplicas(t *testing.T) {
	srv := redistest.New(t)
	a, b := newReplica(t, srv.URL(), Config{}), newReplica(t, srv.URL(), Config{})
	ctx := context.Background()

	fa := &counted{entry: immutable(`{"a":1}`)}
	e, err := a.tier.Fill(ctx, "report/k1", rebuild, fa.fill)
	require.NoError(t, err)
	assert.Equal(t, `{"a":1}`, string(e.Body))
	assert.EqualValues(t, 1, fa.calls.Load())
	assert.EqualValues(t, 1, a.lookups(LookupMiss))

	// The other replica reads it: its fill is not called, the Value is
	// rebuilt by its Check.
	fb := &counted{entry: immutable(`{"b":2}`)}
	e, err = b.tier.Fill(ctx, "report/k1", rebuild, fb.fill)
	require.NoError(t, err)
	assert.Equal(t, `{"a":1}`, string(e.Body))
	assert.Zero(t, fb.calls.Load())
	v, ok := parsedKind.Value(e)
	require.True(t, ok, "the Check rebuilt the value")
	assert.Equal(t, `{"a":1}`, v.body)
	assert.EqualValues(t, 1, b.lookups(LookupHit))
	assert.EqualValues(t, 1, testutil.ToFloat64(b.m.saved))

	// Namespaced key, an expiry, and the lease released.
	ttl, err := a.rc.PTTL(ctx, a.tier.Key("report/k1")).Result()
	require.NoError(t, err)
	assert.Greater(t, ttl, time.Duration(0))
	assert.LessOrEqual(t, ttl, DefaultTTL)
	n, err := a.rc.Exists(ctx, a.tier.LeaseKey("report/k1")).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "lease released")
}

// TestWhatIsWritten: only entries worth sharing reach Redis, each with an
// expiry no later than its freshness ends.
func TestWhatIsWritten(t *testing.T) {
	srv := redistest.New(t)
	r := newReplica(t, srv.URL(), Config{MaxEntryBytes: 256, TTL: time.Hour})
	ctx := context.Background()
	now := time.Now()
	big := make([]byte, 300)
	for i := range big {
		big[i] = 'x'
	}
	cases := []struct {
		name    string
		entry   *cache.Entry
		written bool
		maxTTL  time.Duration
	}{
		{"immutable report: kept for ttl", &cache.Entry{Status: 200, Body: []byte("{}"), Stored: now}, true, time.Hour},
		{"latest: kept until it expires", &cache.Entry{Status: 200, Body: []byte("{}"), Stored: now, Expires: now.Add(5 * time.Second), StaleUntil: now.Add(time.Minute)}, true, 5 * time.Second},
		{"lifetime above ttl: ttl", &cache.Entry{Status: 200, Body: []byte("{}"), Stored: now, Expires: now.Add(48 * time.Hour)}, true, time.Hour},
		{"no data yet (404): not shared", &cache.Entry{Status: 404, Body: []byte("{}"), Stored: now, Expires: now.Add(time.Second)}, false, 0},
		{"NoStore (a growing page): not shared", &cache.Entry{Status: 200, Body: []byte("{}"), Stored: now, NoStore: true}, false, 0},
		{"already expired: not written", &cache.Entry{Status: 200, Body: []byte("{}"), Stored: now, Expires: now.Add(-time.Second)}, false, 0},
		{"larger than max_entry_bytes", &cache.Entry{Status: 200, Body: big, Stored: now}, false, 0},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			key := "k/" + string(rune('a'+i))
			f := &counted{entry: func() *cache.Entry { return c.entry }}
			_, err := r.tier.Fill(ctx, key, nil, f.fill)
			require.NoError(t, err)
			ttl, err := r.rc.PTTL(ctx, r.tier.Key(key)).Result()
			require.NoError(t, err)
			if !c.written {
				assert.Equal(t, time.Duration(-2), ttl, "no key")
				return
			}
			assert.Greater(t, ttl, time.Duration(0))
			assert.LessOrEqual(t, ttl, c.maxTTL)
		})
	}
	assert.EqualValues(t, 1, testutil.ToFloat64(r.m.writes.WithLabelValues("too_large")))
}

// TestLeaseCoalescesReplicas: while one replica fills under the lease, the
// others wait for its entry and do not call their fill.
func TestLeaseCoalescesReplicas(t *testing.T) {
	srv := redistest.New(t)
	holder := newReplica(t, srv.URL(), Config{Lease: 10 * time.Second})
	ctx := context.Background()

	started, release := make(chan struct{}), make(chan struct{})
	slow := func(context.Context) (*cache.Entry, error) {
		close(started)
		<-release
		return &cache.Entry{Status: 200, Body: []byte(`{"holder":1}`), Stored: time.Now()}, nil
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, err := holder.tier.Fill(ctx, "catalog/v", rebuild, slow)
		assert.NoError(t, err)
	}()
	<-started

	waiters := make([]*replica, 2)
	fills := make([]*counted, 2)
	results := make([]*cache.Entry, 2)
	for i := range waiters {
		waiters[i] = newReplica(t, srv.URL(), Config{Lease: 10 * time.Second})
		fills[i] = &counted{entry: immutable(`{"waiter":1}`)}
		wg.Add(1)
		go func() {
			defer wg.Done()
			e, err := waiters[i].tier.Fill(ctx, "catalog/v", rebuild, fills[i].fill)
			assert.NoError(t, err)
			results[i] = e
		}()
	}
	// Release the holder only once both waiters found the lease held.
	require.Eventually(t, func() bool {
		return waiters[0].lookups(LookupMiss) == 1 && waiters[1].lookups(LookupMiss) == 1
	}, 10*time.Second, time.Millisecond)
	close(release)
	wg.Wait()

	for i, w := range waiters {
		assert.Zero(t, fills[i].calls.Load(), "waiter %d called its fill", i)
		require.NotNil(t, results[i])
		assert.Equal(t, `{"holder":1}`, string(results[i].Body))
		_, ok := parsedKind.Value(results[i])
		assert.True(t, ok)
		assert.EqualValues(t, 1, w.waits(WaitValue))
	}
}

// TestLeaseOfADeadHolder: a lease whose holder died (set here as a dead
// replica would have left it) delays the others until it expires, then one
// of them fills.
func TestLeaseOfADeadHolder(t *testing.T) {
	srv := redistest.New(t)
	r := newReplica(t, srv.URL(), Config{Lease: 5 * time.Second})
	ctx := context.Background()
	const lease = time.Second
	require.NoError(t, r.rc.Set(ctx, r.tier.LeaseKey("page/p"), "dead:1", lease).Err())

	f := &counted{entry: immutable(`{"page":1}`)}
	e, err := r.tier.Fill(ctx, "page/p", nil, f.fill)
	require.NoError(t, err)
	assert.Equal(t, `{"page":1}`, string(e.Body))
	assert.EqualValues(t, 1, f.calls.Load())
	assert.EqualValues(t, 1, r.waits(WaitTakeover), "took the lease over once it expired")
	// The dead holder's lease had expired when this replica filled: its
	// own lease replaced it and was released.
	n, err := r.rc.Exists(ctx, r.tier.LeaseKey("page/p")).Result()
	require.NoError(t, err)
	assert.Zero(t, n)
}

// TestHolderFails: a holder whose fill fails releases its lease at once and
// writes nothing; a waiter takes over and fills.
func TestHolderFails(t *testing.T) {
	srv := redistest.New(t)
	holder := newReplica(t, srv.URL(), Config{Lease: time.Hour})
	waiter := newReplica(t, srv.URL(), Config{Lease: time.Hour})
	ctx := context.Background()
	started, release := make(chan struct{}), make(chan struct{})
	boom := errors.New("upstream 503")
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, err := holder.tier.Fill(ctx, "report/x", nil, func(context.Context) (*cache.Entry, error) {
			close(started)
			<-release
			return nil, boom
		})
		assert.ErrorIs(t, err, boom, "the fill's error, unchanged")
	}()
	<-started
	f := &counted{entry: immutable(`{"w":1}`)}
	wg.Add(1)
	go func() {
		defer wg.Done()
		e, err := waiter.tier.Fill(ctx, "report/x", nil, f.fill)
		assert.NoError(t, err)
		assert.Equal(t, `{"w":1}`, string(e.Body))
	}()
	require.Eventually(t, func() bool { return waiter.lookups(LookupMiss) == 1 }, 10*time.Second, time.Millisecond)
	close(release)
	wg.Wait()
	assert.EqualValues(t, 1, f.calls.Load())
	assert.EqualValues(t, 1, waiter.waits(WaitTakeover), "a lease of an hour did not have to expire")
}

// TestCorruptEntries: nothing read from Redis is served unchecked; a
// corrupt entry is dropped, counted, logged, and the fill replaces it.
func TestCorruptEntries(t *testing.T) {
	srv := redistest.New(t)
	r := newReplica(t, srv.URL(), Config{})
	ctx := context.Background()
	good := encode("report/c", &cache.Entry{Status: 200, Body: []byte(`{"ok":1}`), Stored: time.Now()})
	cases := []struct {
		name  string
		value []byte
	}{
		{"garbage", []byte("not an entry")},
		{"a bit flipped", func() []byte { b := clone(good); b[len(b)-2] ^= 4; return b }()},
		{"another key's entry", encode("report/other", &cache.Entry{Status: 200, Body: []byte(`{"ok":1}`)})},
		{"refused by the call site's Check", encode("report/c", &cache.Entry{Status: 200, Body: []byte(`not json`)})},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.NoError(t, r.rc.Set(ctx, r.tier.Key("report/c"), c.value, time.Hour).Err())
			f := &counted{entry: immutable(`{"fresh":1}`)}
			e, err := r.tier.Fill(ctx, "report/c", rebuild, f.fill)
			require.NoError(t, err)
			assert.Equal(t, `{"fresh":1}`, string(e.Body), "the corrupt entry is not served")
			assert.EqualValues(t, 1, f.calls.Load())
			assert.EqualValues(t, i+1, r.lookups(LookupCorrupt))
			// The fill's entry replaced it.
			raw, err := r.rc.Get(ctx, r.tier.Key("report/c")).Bytes()
			require.NoError(t, err)
			got, err := decode("report/c", raw)
			require.NoError(t, err)
			assert.Equal(t, `{"fresh":1}`, string(got.Body))
		})
	}
	assert.Equal(t, len(cases), r.logs.FilterMessage("shared cache: corrupt entry dropped").Len())

	// GetMany checks the same way.
	require.NoError(t, r.rc.Set(ctx, r.tier.Key("report/d"), "junk", time.Hour).Err())
	got := r.tier.GetMany(ctx, []string{"report/c", "report/d", "report/none"}, func(string) Check { return rebuild })
	require.NotNil(t, got[0])
	assert.Nil(t, got[1])
	assert.Nil(t, got[2])
	n, err := r.rc.Exists(ctx, r.tier.Key("report/d")).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "dropped")
}

// TestRedisDown: with Redis stopped or hanging, every fill still answers
// from its own fill; the outage and the recovery are logged once each and
// counted.
func TestRedisDown(t *testing.T) {
	srv := redistest.New(t)
	r := newReplica(t, srv.URL(), Config{})
	ctx := context.Background()
	fill := &counted{entry: immutable(`{"own":1}`)}

	srv.Stop()
	for i := range 5 {
		e, err := r.tier.Fill(ctx, "report/down", nil, fill.fill)
		require.NoError(t, err, "fill %d", i)
		assert.Equal(t, `{"own":1}`, string(e.Body))
	}
	assert.EqualValues(t, 5, fill.calls.Load())
	assert.EqualValues(t, 5, r.lookups(LookupError))
	assert.EqualValues(t, 0, testutil.ToFloat64(r.m.up))
	assert.Nil(t, r.tier.Get(ctx, "report/down", nil))

	srv.Restart()
	require.Eventually(t, func() bool {
		_, err := r.tier.Fill(ctx, "report/up", nil, fill.fill)
		return err == nil && testutil.ToFloat64(r.m.up) == 1
	}, 10*time.Second, 20*time.Millisecond, "recovers by itself")
	e, err := r.tier.Fill(ctx, "report/up", nil, fill.fill)
	require.NoError(t, err)
	assert.Equal(t, `{"own":1}`, string(e.Body))
	assert.GreaterOrEqual(t, r.lookups(LookupHit), 1.0, "written once Redis was back")

	// A hanging Redis: the same, through the command deadline and the
	// breaker.
	srv.Pause()
	before := fill.calls.Load()
	for range 5 {
		_, err := r.tier.Fill(ctx, "report/hung", nil, fill.fill)
		require.NoError(t, err)
	}
	assert.Equal(t, before+5, fill.calls.Load())
	srv.Resume()

	assert.Equal(t, 2, r.logs.FilterMessage("shared cache unavailable: each replica fills from its memory and the upstream until it recovers").Len())
	assert.GreaterOrEqual(t, r.logs.FilterMessage("shared cache recovered").Len(), 1)
	assert.EqualValues(t, 2, testutil.ToFloat64(r.m.changes.WithLabelValues("down")))
}

func TestNilTierIsOff(t *testing.T) {
	var tier *Tier
	f := &counted{entry: immutable("{}")}
	e, err := tier.Fill(context.Background(), "k", nil, f.fill)
	require.NoError(t, err)
	assert.Equal(t, "{}", string(e.Body))
	assert.Nil(t, tier.Get(context.Background(), "k", nil))
	tier.Set(context.Background(), "k", e)
	tier.SetMany(context.Background(), map[string]*cache.Entry{"k": e})
}

// TestFillAfterGrace: within its grace a replica takes no lease, so the
// replica expected to fill (here one that comes later) takes it and the
// first gets its entry.
func TestFillAfterGrace(t *testing.T) {
	srv := redistest.New(t)
	follower := newReplica(t, srv.URL(), Config{})
	leader := newReplica(t, srv.URL(), Config{})
	ctx := context.Background()

	ff := &counted{entry: immutable(`{"follower":1}`)}
	done := make(chan *cache.Entry, 1)
	go func() {
		e, err := follower.tier.FillAfter(ctx, "latest/x", nil, time.Hour, ff.fill)
		assert.NoError(t, err)
		done <- e
	}()
	require.Eventually(t, func() bool { return follower.lookups(LookupMiss) == 1 }, 10*time.Second, time.Millisecond)
	n, err := leader.rc.Exists(ctx, leader.tier.LeaseKey("latest/x")).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "no lease taken within the grace")

	lf := &counted{entry: immutable(`{"leader":1}`)}
	_, err = leader.tier.Fill(ctx, "latest/x", nil, lf.fill)
	require.NoError(t, err)
	e := <-done
	assert.Equal(t, `{"leader":1}`, string(e.Body))
	assert.Zero(t, ff.calls.Load())
	assert.EqualValues(t, 1, lf.calls.Load())
	assert.Zero(t, follower.waits(WaitTakeover))
}

// TestLead: one candidate leads at a time and keeps the lead while it
// renews it; when it stops, another takes it once it expires.
func TestLead(t *testing.T) {
	srv := redistest.New(t)
	a, b := newReplica(t, srv.URL(), Config{}), newReplica(t, srv.URL(), Config{})
	ctx := context.Background()
	const ttl = 2 * time.Second // long enough that a loaded machine does not let it lapse between two lines
	require.True(t, a.tier.Lead(ctx, "refresh/mainnet", "r", ttl))
	assert.False(t, b.tier.Lead(ctx, "refresh/mainnet", "r", ttl))
	assert.True(t, a.tier.Lead(ctx, "refresh/mainnet", "r", ttl), "renewed")
	assert.True(t, b.tier.Lead(ctx, "refresh/testnet", "r", ttl), "another name, another lead")
	require.Eventually(t, func() bool { return b.tier.Lead(ctx, "refresh/mainnet", "r", ttl) }, 10*time.Second, 20*time.Millisecond,
		"a lead not renewed passes to another")
	assert.False(t, a.tier.Lead(ctx, "refresh/mainnet", "r", ttl))

	require.True(t, b.tier.Lead(ctx, "refresh/mainnet", "r", time.Hour), "renewed for long")
	a.tier.Resign(ctx, "refresh/mainnet", "r") // not a's: nothing happens
	assert.False(t, a.tier.Lead(ctx, "refresh/mainnet", "r", time.Hour))
	b.tier.Resign(ctx, "refresh/mainnet", "r")
	assert.True(t, a.tier.Lead(ctx, "refresh/mainnet", "r", time.Hour), "a resigned lead is free at once")

	srv.Stop()
	assert.False(t, b.tier.Lead(ctx, "refresh/mainnet", "r", ttl), "without Redis nobody leads")
}
