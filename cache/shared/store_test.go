package shared

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/cache"
	"streamgate/internal/testing/redistest"
)

// newStore is a replica's cache.Store with r's tier behind its memory.
func newStore(t *testing.T, r *replica) *cache.Store {
	t.Helper()
	s, err := cache.New(cache.Config{MaxBytes: 1 << 20, Shared: r.tier})
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

// TestStoreLoadFromTiers: Store.LoadFrom does memory, then the shared
// tier (through the key's Check), then the fill, and keeps in memory what
// came from the tier.
func TestStoreLoadFromTiers(t *testing.T) {
	srv := redistest.New(t)
	ra, rb := newReplica(t, srv.URL(), Config{}), newReplica(t, srv.URL(), Config{})
	a, b := newStore(t, ra), newStore(t, rb)
	ctx := context.Background()
	const key = "report/k"

	fa := &counted{entry: immutable(`{"a":1}`)}
	e, out, err := a.LoadFrom(ctx, key, cache.Source{Fill: fa.fill, Check: rebuild})
	require.NoError(t, err)
	assert.Equal(t, cache.Miss, out)
	assert.EqualValues(t, 1, fa.calls.Load(), "the origin, once")
	assert.EqualValues(t, 1, ra.lookups(LookupMiss), "after the tier was asked")

	// The other replica: from the tier, its value rebuilt by the Check.
	fb := &counted{entry: immutable(`{"b":2}`)}
	e, out, err = b.LoadFrom(ctx, key, cache.Source{Fill: fb.fill, Check: rebuild})
	require.NoError(t, err)
	assert.Equal(t, cache.Miss, out)
	assert.Equal(t, `{"a":1}`, string(e.Body))
	assert.Zero(t, fb.calls.Load())
	v, ok := parsedKind.Value(e)
	require.True(t, ok)
	assert.Equal(t, `{"a":1}`, v.body)
	assert.EqualValues(t, 1, rb.lookups(LookupHit))

	// Now in b's memory: a hit that never reaches the tier.
	b.Wait()
	e, out, err = b.LoadFrom(ctx, key, cache.Source{Fill: fb.fill, Check: rebuild})
	require.NoError(t, err)
	assert.Equal(t, cache.Hit, out)
	assert.Equal(t, `{"a":1}`, string(e.Body))
	assert.EqualValues(t, 1, rb.lookups(LookupHit)+rb.lookups(LookupMiss), "one lookup in all")

	// Without a Check the key stays out of the tier.
	fc := &counted{entry: immutable(`{"c":3}`)}
	_, _, err = b.LoadFrom(ctx, "report/local", cache.Source{Fill: fc.fill})
	require.NoError(t, err)
	assert.EqualValues(t, 1, fc.calls.Load())
	n, err := ra.rc.Exists(ctx, ra.tier.Key("report/local")).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "a key without a Check is not written to the tier")
}

// TestStoreNotInMemory: a NotInMemory source's entry reaches the tier and
// the waiters, never the Store's memory.
func TestStoreNotInMemory(t *testing.T) {
	srv := redistest.New(t)
	ra := newReplica(t, srv.URL(), Config{})
	a := newStore(t, ra)
	ctx := context.Background()
	const key = "bulk/chunk"

	f := &counted{entry: immutable(`{"reports":[]}`)}
	src := cache.Source{Fill: f.fill, Check: rebuild, NotInMemory: true}
	e, _, err := a.LoadFrom(ctx, key, src)
	require.NoError(t, err)
	assert.Equal(t, `{"reports":[]}`, string(e.Body))
	a.Wait()
	_, state := a.Get(key)
	assert.Equal(t, cache.Missing, state, "not kept in memory")
	assert.Zero(t, a.Bytes())
	n, err := ra.rc.Exists(ctx, ra.tier.Key(key)).Result()
	require.NoError(t, err)
	assert.EqualValues(t, 1, n, "kept in the tier")

	// Asked again: from the tier, not the origin.
	_, _, err = a.LoadFrom(ctx, key, src)
	require.NoError(t, err)
	assert.EqualValues(t, 1, f.calls.Load())
}
