package auth

import (
	"context"
	"encoding/binary"
	"errors"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// replayCache is a ReplayRecord used with one grace, as the verifier's
// record was first written.
type replayCache struct {
	*ReplayRecord
	grace time.Duration
}

func newReplayCache(ttl, grace time.Duration) replayCache {
	r := NewReplayRecord()
	r.configure(ttl, 0, nil, time.Time{})
	return replayCache{r, grace}
}

// firstUse records (key, sig) and reports whether it may be used.
func (rc replayCache) firstUse(key string, sig []byte, now time.Time) bool {
	return rc.use(replayKeyOf(key, sig), "t", now, rc.grace, 0, false) == nil
}

func TestReplayRecordFull(t *testing.T) {
	ks := testStore(t)
	now := time.UnixMilli(1_750_000_000_000)
	clock := now
	v := NewVerifier(VerifierConfig{MaxSkew: 5 * time.Second, ReplayProtection: true, ReplayGrace: time.Second,
		ReplayMaxEntries: 3, Now: func() time.Time { return clock }})
	req := func(i int) *http.Request {
		return signedRequest("/api/v1/feeds?i="+strconv.Itoa(i), "k-trading", "new-secret-0123456789", now)
	}
	for i := range 3 {
		_, err := v.Verify(ks, req(i))
		require.NoError(t, err)
	}
	_, err := v.Verify(ks, req(3))
	require.ErrorIs(t, err, ErrReplayFull, "a fourth signature, not recorded, is refused")
	assert.NotErrorIs(t, err, ErrReplay)
	assert.Equal(t, "replay_full", Reason(err))
	var fe *ReplayFullError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, 20*time.Second, fe.RetryAfter, "all in the current generation: room after two rotations")

	// Signatures recorded are still decided as before.
	clock = now.Add(500 * time.Millisecond)
	_, err = v.Verify(ks, req(0))
	assert.NoError(t, err, "a twin within the grace")
	clock = now.Add(2 * time.Second)
	_, err = v.Verify(ks, req(1))
	assert.ErrorIs(t, err, ErrReplay)

	st := v.Stats()
	assert.Equal(t, ReplayStats{Entries: 3, Bytes: 3 * ReplayEntryBytes, MaxEntries: 3, FullRefusals: 1}, st)

	// The generation rotates out, and there is room again.
	clock = now.Add(20 * time.Second)
	_, err = v.Verify(ks, signedRequest("/api/v1/feeds?i=4", "k-trading", "new-secret-0123456789", clock))
	assert.NoError(t, err)
	assert.Equal(t, 1, v.Stats().Entries)
}

func heapInuse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

func TestReplayRecordGivesMemoryBack(t *testing.T) {
	const n = 200_000
	t0 := time.Unix(1_750_000_000, 0)
	rc := newReplayCache(10*time.Second, 0)
	before := heapInuse()
	var k replayKey
	for i := range n {
		binary.LittleEndian.PutUint64(k[:], uint64(i)*0x9e3779b97f4a7c15)
		require.NoError(t, rc.use(k, "t", t0.Add(time.Duration(i)*time.Microsecond), 0, 0, false))
	}
	peak := heapInuse()
	grown := int64(peak) - int64(before)
	st := rc.Stats()
	require.Equal(t, n, st.Entries)
	t.Logf("%d entries: heap grew %.1f MB, %.1f bytes an entry; Stats says %.1f MB",
		n, float64(grown)/1e6, float64(grown)/n, float64(st.Bytes)/1e6)
	assert.InDelta(t, 1, float64(grown)/float64(st.Bytes), 0.5, "Bytes approximates the heap taken")

	// One rotation moves the entries to the older generation; they are
	// all still needed.
	require.NoError(t, rc.use(replayKey{1}, "t", t0.Add(10*time.Second), 0, 0, false))
	assert.Equal(t, n+1, rc.Stats().Entries)
	// Past 2×ttl, both generations go, and their memory with them.
	require.NoError(t, rc.use(replayKey{2}, "t", t0.Add(30*time.Second), 0, 0, false))
	assert.Equal(t, 1, rc.Stats().Entries)
	after := heapInuse()
	t.Logf("after rotation: %.1f MB above the start", float64(int64(after)-int64(before))/1e6)
	assert.Less(t, int64(after)-int64(before), grown/2, "the rotated maps' memory is given back")
	runtime.KeepAlive(rc)
}

// Under a steady load the record reuses the maps of the generations it
// drops: once both generations have grown to the load, recording a
// generation's signatures allocates nothing. After a burst, the burst's
// map is dropped rather than kept.
func TestReplayRecordSteadyLoadAllocatesNothing(t *testing.T) {
	const perGen = 5000
	ttl := 10 * time.Second
	t0 := time.Unix(1_750_000_000, 0)
	rc := newReplayCache(ttl, 0)
	seq := uint64(0)
	generation := func(g, n int) {
		start := t0.Add(time.Duration(g) * ttl)
		var k replayKey
		for i := range n {
			seq++
			binary.LittleEndian.PutUint64(k[:], seq*0x9e3779b97f4a7c15)
			if err := rc.use(k, "t", start.Add(time.Duration(i)*time.Microsecond), 0, 0, false); err != nil {
				t.Fatal(err)
			}
		}
	}
	for g := range 3 { // both generations grow to the load
		generation(g, perGen)
	}
	g := 3
	allocs := testing.AllocsPerRun(3, func() { generation(g, perGen); g++ })
	assert.Zero(t, allocs, "a steady load's generation allocates nothing")
	assert.Equal(t, 2*perGen, rc.Stats().Entries)

	big := map[replayKey]int64{}
	for i := range 4 * perGen {
		big[replayKey{byte(i), byte(i >> 8), byte(i >> 16)}] = 0
	}
	rc.mu.Lock()
	next := rc.reuse(big, perGen)
	rc.mu.Unlock()
	assert.Len(t, big, 4*perGen, "a burst's map is not emptied for reuse")
	assert.Empty(t, next)
}

// fakeShared is a ReplayStore in memory that counts its calls.
type fakeShared struct {
	mu    sync.Mutex
	calls int
	err   error
	seen  map[string]time.Time
}

func (f *fakeShared) FirstUse(_ context.Context, u ReplayUse) (bool, error) {
	key, sig, now, grace := u.Key, u.Sig, u.Now, u.Grace
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.err != nil {
		return false, f.err
	}
	k := key + ":" + string(sig)
	if first, ok := f.seen[k]; ok {
		return now.Sub(first) < grace, nil
	}
	f.seen[k] = now
	return true, nil
}

func TestCheckThenRecord(t *testing.T) {
	ks := testStore(t)
	now := time.UnixMilli(1_750_000_000_000)
	clock := now
	shared := &fakeShared{seen: map[string]time.Time{}}
	v := NewVerifier(VerifierConfig{MaxSkew: 5 * time.Second, ReplayProtection: true, Shared: shared,
		Now: func() time.Time { return clock }})
	r := signedRequest("/api/v1/feeds", "k-trading", "new-secret-0123456789", now)

	// Checks alone record nothing: a request refused after them (by a
	// rate limit, say) leaves no trace and may be sent again.
	for range 3 {
		res, err := v.Check(ks, r)
		require.NoError(t, err)
		assert.Equal(t, "k-trading", res.Principal.KeyID)
	}
	assert.Zero(t, v.Stats().Entries, "Check records nothing")
	assert.Zero(t, shared.calls, "nor asks the shared store")

	res, err := v.Check(ks, r)
	require.NoError(t, err)
	require.NoError(t, v.Record(t.Context(), res))
	assert.Equal(t, 1, v.Stats().Entries, "Record records")
	assert.Equal(t, 1, shared.calls, "in the shared store too")

	_, err = v.Check(ks, r)
	assert.ErrorIs(t, err, ErrReplay, "a replay is refused at Check")
	assert.ErrorIs(t, v.Record(t.Context(), res), ErrReplay, "and at Record")
	assert.Equal(t, 1, v.Stats().Entries)

	// A Result that Check refused is not recorded.
	bad, err := v.Check(ks, signedRequest("/api/v1/feeds?x=1", "k-trading", "not-the-secret", now))
	require.ErrorIs(t, err, ErrBadSignature)
	assert.Error(t, v.Record(t.Context(), bad))
	assert.Error(t, v.Record(t.Context(), Result{}))
	assert.Equal(t, 1, v.Stats().Entries)

	// The shared store failing: reported, and the own record decides.
	var failures []error
	shared.err = errors.New("store down")
	v2 := NewVerifier(VerifierConfig{MaxSkew: 5 * time.Second, ReplayProtection: true, Shared: shared,
		SharedFailed: func(err error) { failures = append(failures, err) }, Now: func() time.Time { return clock }})
	res, err = v2.Check(ks, r)
	require.NoError(t, err)
	assert.NoError(t, v2.Record(t.Context(), res))
	assert.Len(t, failures, 1)
	_, err = v2.Check(ks, r)
	assert.ErrorIs(t, err, ErrReplay)

	// Replay protection off: Record has nothing to do.
	off := NewVerifier(VerifierConfig{MaxSkew: 5 * time.Second, Now: func() time.Time { return clock }})
	for range 2 {
		res, err := off.Check(ks, r)
		require.NoError(t, err)
		assert.NoError(t, off.Record(t.Context(), res))
	}
}

func TestRecordRace(t *testing.T) {
	ks := testStore(t)
	now := time.UnixMilli(1_750_000_000_000)
	clock := now
	verifier := func(grace time.Duration) *Verifier {
		return NewVerifier(VerifierConfig{MaxSkew: 5 * time.Second, ReplayProtection: true, ReplayGrace: grace,
			Now: func() time.Time { return clock }})
	}
	r := signedRequest("/api/v1/feeds", "k-trading", "new-secret-0123456789", now)
	twins := func(v *Verifier) (Result, Result) {
		a, err := v.Check(ks, r)
		require.NoError(t, err)
		b, err := v.Check(ks, r)
		require.NoError(t, err, "both pass Check: neither is recorded yet")
		return a, b
	}

	v := verifier(0)
	a, b := twins(v)
	require.NoError(t, v.Record(t.Context(), a))
	assert.ErrorIs(t, v.Record(t.Context(), b), ErrReplay, "without a grace, only the first recorded passes")

	v = verifier(time.Second)
	a, b = twins(v)
	require.NoError(t, v.Record(t.Context(), a))
	assert.NoError(t, v.Record(t.Context(), b), "within the grace, both pass")

	// Checked later, recorded first: the earlier check is within the
	// grace of it, and without a grace still refused.
	for _, grace := range []time.Duration{0, time.Second} {
		v = verifier(grace)
		clock = now
		early, err := v.Check(ks, r)
		require.NoError(t, err)
		clock = now.Add(10 * time.Millisecond)
		late, err := v.Check(ks, r)
		require.NoError(t, err)
		require.NoError(t, v.Record(t.Context(), late))
		if err := v.Record(t.Context(), early); grace == 0 {
			assert.ErrorIs(t, err, ErrReplay)
		} else {
			assert.NoError(t, err)
		}
	}

	// A twin checked beyond the grace of a first use recorded meanwhile is
	// refused at Record.
	v = verifier(time.Second)
	clock = now
	a, err := v.Check(ks, r)
	require.NoError(t, err)
	clock = now.Add(2 * time.Second)
	b, err = v.Check(ks, r)
	require.NoError(t, err)
	require.NoError(t, v.Record(t.Context(), a))
	assert.ErrorIs(t, v.Record(t.Context(), b), ErrReplay)

	// Truly concurrent: of identical requests, exactly one is recorded.
	v = verifier(0)
	clock = now
	var wg sync.WaitGroup
	var passed atomic.Int32
	for range 8 {
		wg.Go(func() {
			res, err := v.Check(ks, r)
			if err != nil {
				assert.ErrorIs(t, err, ErrReplay)
				return
			}
			if err := v.Record(context.Background(), res); err != nil {
				assert.ErrorIs(t, err, ErrReplay)
				return
			}
			passed.Add(1)
		})
	}
	wg.Wait()
	assert.Equal(t, int32(1), passed.Load())
}

func TestCheckUnadmittedTakesNoRoom(t *testing.T) {
	// The review's attack: a key sends many distinct signatures, all
	// refused by its rate limit after Check. None is recorded.
	ks := testStore(t)
	now := time.UnixMilli(1_750_000_000_000)
	v := NewVerifier(VerifierConfig{MaxSkew: 5 * time.Second, ReplayProtection: true, ReplayMaxEntries: 10,
		Now: func() time.Time { return now }})
	for i := range 1000 {
		_, err := v.Check(ks, signedRequest("/api/v1/feeds?i="+strconv.Itoa(i), "k-trading", "new-secret-0123456789", now))
		require.NoError(t, err)
	}
	assert.Equal(t, ReplayStats{MaxEntries: 10}, v.Stats())

	// Peeking allocates nothing.
	k := replayKeyOf("k-trading", make([]byte, 32))
	allocs := testing.AllocsPerRun(100, func() {
		if _, _, err := v.replay.peek(k, "t", now, 0); err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, allocs)
}

func TestReplayRecordKeptAcrossSettings(t *testing.T) {
	ks := testStore(t)
	now := time.UnixMilli(1_750_000_000_000)
	clock := now
	cfg := VerifierConfig{MaxSkew: 5 * time.Second, ReplayProtection: true, Now: func() time.Time { return clock }}
	v1 := NewVerifier(cfg)
	r := signedRequest("/api/v1/feeds", "k-trading", "new-secret-0123456789", now)
	_, err := v1.Verify(ks, r)
	require.NoError(t, err)

	// A reload changes the grace: the first use is kept, and the new grace
	// is reckoned from it.
	cfg.ReplayGrace = time.Second
	v2 := v1.WithSettings(cfg)
	assert.Same(t, v1.ReplayRecord(), v2.ReplayRecord())
	assert.Equal(t, 1, v2.Stats().Entries)
	clock = now.Add(500 * time.Millisecond)
	_, err = v2.Verify(ks, r)
	assert.NoError(t, err, "a twin within the new grace of the first use")
	clock = now.Add(2 * time.Second)
	_, err = v2.Verify(ks, r)
	assert.ErrorIs(t, err, ErrReplay, "a replay beyond the new grace")
	_, err = v1.Verify(ks, r)
	assert.ErrorIs(t, err, ErrReplay, "the old verifier shares the record")

	// Replay protection off, then on again: the record is still there.
	off := cfg
	off.ReplayProtection = false
	v3 := v2.WithSettings(off)
	_, err = v3.Verify(ks, r)
	assert.NoError(t, err, "replay protection off")
	v4 := v3.WithSettings(cfg)
	_, err = v4.Verify(ks, r)
	assert.ErrorIs(t, err, ErrReplay, "replay protection on again")

	// The same through VerifierConfig.Record.
	cfg.Record = v4.ReplayRecord()
	_, err = NewVerifier(cfg).Verify(ks, r)
	assert.ErrorIs(t, err, ErrReplay)
}

func TestReplayRecordSkewChanges(t *testing.T) {
	ks := testStore(t)
	t0 := time.UnixMilli(1_750_000_000_000)
	clock := t0
	verifier := func(skew time.Duration) *Verifier {
		return NewVerifier(VerifierConfig{MaxSkew: skew, ReplayProtection: true, Now: func() time.Time { return clock }})
	}
	req := func(i int, at time.Time) *http.Request {
		return signedRequest("/api/v1/feeds?i="+strconv.Itoa(i), "k-trading", "new-secret-0123456789", at)
	}
	// verify verifies a new request at at, which rotates the record when
	// due.
	i := 0
	verify := func(v *Verifier, at time.Duration) {
		clock = t0.Add(at)
		i++
		_, err := v.Verify(ks, req(i, clock))
		require.NoError(t, err)
	}

	// Longer: 5 s to 10 s. A signature dated 5 s ahead, used at t0, is
	// valid until t0+15s under the new skew; with the old ttl of 10 s the
	// rotations at t0+0.1s and t0+10.1s would have dropped it.
	v := verifier(5 * time.Second)
	verify(v, -9900*time.Millisecond) // the generation starts
	clock = t0
	s := req(0, t0.Add(5*time.Second))
	_, err := v.Verify(ks, s)
	require.NoError(t, err)
	verify(v, 100*time.Millisecond) // rotation
	clock = t0.Add(time.Second)
	v = v.WithSettings(VerifierConfig{MaxSkew: 10 * time.Second, ReplayProtection: true, Now: func() time.Time { return clock }})
	verify(v, 10100*time.Millisecond)
	clock = t0.Add(12 * time.Second)
	_, err = v.Verify(ks, s)
	assert.ErrorIs(t, err, ErrReplay, "kept for the longer skew")

	// Shorter: 10 s to 5 s. A signature dated 10 s ahead, used at t0 under
	// the old skew, is valid from t0+5s to t0+15s under the new one; a ttl
	// of 10 s at once would drop it at t0+11s.
	v = verifier(10 * time.Second)
	verify(v, -9*time.Second) // the generation starts
	clock = t0
	s = req(0, t0.Add(10*time.Second))
	_, err = v.Verify(ks, s)
	require.NoError(t, err)
	clock = t0.Add(time.Second)
	v = v.WithSettings(VerifierConfig{MaxSkew: 5 * time.Second, ReplayProtection: true, Now: func() time.Time { return clock }})
	verify(v, time.Second)
	verify(v, 11*time.Second)
	clock = t0.Add(12 * time.Second)
	_, err = v.Verify(ks, s)
	assert.ErrorIs(t, err, ErrReplay, "kept for the old skew")

	// Once the old ttl has passed, the shorter one applies: a generation
	// lasts 10 s again.
	verify(v, 22*time.Second)
	verify(v, 32*time.Second)
	verify(v, 42*time.Second)
	assert.Equal(t, 2, v.Stats().Entries, "two generations of one request each")
}

func TestReplayRecordShortensTwice(t *testing.T) {
	// The skew shortens (ttl 20 s to 10 s) at c, and a reload at c+15s
	// keeps the shorter skew. A signature recorded at c+14s by the
	// verifier of the first reload is kept its 10 s, although the ttl of
	// 20 s in force before c has passed at c+20s.
	c := time.Unix(1_750_000_000, 0)
	rc := newReplayCache(20*time.Second, 0)
	require.NoError(t, rc.use(replayKey{1}, "t", c.Add(-time.Second), 0, 0, false)) // the generation starts
	rc.configure(10*time.Second, 0, nil, c)
	require.NoError(t, rc.use(replayKey{2}, "t", c.Add(14*time.Second), 0, 0, false))
	rc.configure(10*time.Second, 0, nil, c.Add(15*time.Second))
	require.NoError(t, rc.use(replayKey{3}, "t", c.Add(20*time.Second), 0, 0, false))
	assert.ErrorIs(t, rc.use(replayKey{2}, "t", c.Add(23*time.Second), 0, 0, false), ErrReplay)

	// Later on, the ttl is 10 s.
	for i, at := range []time.Duration{30, 40, 50} {
		require.NoError(t, rc.use(replayKey{byte(10 + i)}, "t", c.Add(at*time.Second), 0, 0, false))
	}
	assert.Equal(t, 2, rc.Stats().Entries)
}

// Record after Check searches only the current generation when no
// rotation came between; a rotation between sends it to both again, so a
// twin recorded meanwhile and rotated to the older generation is found.
func TestRecordAfterPeekAcrossRotation(t *testing.T) {
	t0 := time.Unix(1_750_000_000, 0)
	for _, rotate := range []bool{false, true} {
		rc := newReplayCache(10*time.Second, 0)
		k := replayKey{7}
		require.NoError(t, rc.use(replayKey{1}, "t", t0, 0, 0, false)) // the generation starts
		gen, unseen, err := rc.peek(k, "t", t0.Add(time.Second), 0)
		require.NoError(t, err)
		require.True(t, unseen)
		require.NoError(t, rc.use(k, "t", t0.Add(time.Second), 0, 0, false), "a twin is recorded first")
		at := t0.Add(2 * time.Second)
		if rotate {
			at = t0.Add(11 * time.Second)
			require.NoError(t, rc.use(replayKey{2}, "t", at, 0, 0, false)) // the twin moves to the older generation
		}
		assert.ErrorIs(t, rc.use(k, "t", at, 0, gen, unseen), ErrReplay, "rotation between: %v", rotate)
	}
}

func TestReplayShares(t *testing.T) {
	for _, c := range []struct {
		name string
		max  int
		need map[string]int
		want map[string]int
	}{
		{"no rate: equal parts", 1000, map[string]int{"a": 0, "b": 0}, map[string]int{"a": 500, "b": 500}},
		{"a small rate takes what it needs, the rest to the others", 1000,
			map[string]int{"a": 100, "b": 0, "c": 0}, map[string]int{"a": 100, "b": 450, "c": 450}},
		{"large needs are cut to fair parts", 900,
			map[string]int{"a": 5000, "b": 5000, "c": 100}, map[string]int{"a": 400, "b": 400, "c": 100}},
		{"no team", 1000, map[string]int{}, map[string]int{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := ReplayShares(c.max, c.need)
			assert.Equal(t, c.want, got)
			sum := 0
			for _, s := range got {
				sum += s
			}
			assert.LessOrEqual(t, sum, c.max, "the shares never add up to more than the record")
		})
	}
}

// TestReplayRecordTeamShare: a team at its share is refused, with room
// left for the others.
func TestReplayRecordTeamShare(t *testing.T) {
	rc := NewReplayRecord()
	t0 := time.Now()
	rc.configure(10*time.Second, 100, map[string]int{"flood": 3, "quiet": 3}, t0)
	for i := range 3 {
		require.NoError(t, rc.use(replayKey{byte(i)}, "flood", t0, 0, 0, false))
	}
	var full *ReplayFullError
	require.ErrorAs(t, rc.use(replayKey{9}, "flood", t0, 0, 0, false), &full)
	assert.True(t, full.Team)
	require.NoError(t, rc.use(replayKey{10}, "quiet", t0, 0, 0, false), "another team is not denied")
	require.NoError(t, rc.use(replayKey{11}, "flood", t0.Add(25*time.Second), 0, 0, false), "room again once the generations are gone")
}
