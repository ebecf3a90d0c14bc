package wsgate

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/internal/testing/redistest"
	"streamgate/redisconn"
)

// TestRedisConns: two replicas share a key's limit; a release frees its
// slot; a replica's slots expire once it stops renewing them; while Redis
// is down each replica counts its own against the limit.
func TestRedisConns(t *testing.T) {
	srv := redistest.New(t)
	client := func() *RedisConns {
		c, err := redisconn.NewURL(srv.URL(), "", redisconn.Options{CommandTimeout: 100 * time.Millisecond, BreakerOpen: 100 * time.Millisecond})
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		r := NewRedisConns(c, "test:conns:", 3*time.Second)
		t.Cleanup(r.Close)
		return r
	}
	a, b := client(), client()
	ctx := context.Background()
	relA, ok := a.Acquire(ctx, "team:x", 2)
	require.True(t, ok)
	_, ok = b.Acquire(ctx, "team:x", 2)
	require.True(t, ok)
	_, ok = a.Acquire(ctx, "team:x", 2)
	assert.False(t, ok, "the limit holds for both replicas together")
	_, ok = b.Acquire(ctx, "team:y", 2)
	assert.True(t, ok, "another key has its own")

	relA()
	relB, ok := b.Acquire(ctx, "team:x", 2)
	require.True(t, ok, "a released slot is free")
	// Past the slots' expiries as they stand now, on Redis's clock, only
	// the renewals keep them.
	slots, err := a.c.ZRangeWithScores(ctx, "test:conns:team:x", 0, -1).Result()
	require.NoError(t, err)
	require.Len(t, slots, 2)
	expiry := max(slots[0].Score, slots[1].Score)
	require.Eventually(t, func() bool {
		now, err := a.c.Time(ctx).Result()
		return err == nil && float64(now.UnixMilli()) > expiry
	}, 20*time.Second, 50*time.Millisecond, "Redis's clock passes the slots' expiries")
	_, ok = a.Acquire(ctx, "team:x", 2)
	assert.False(t, ok, "slots renewed while held")

	b.Close() // b stops renewing: as if it died
	require.Eventually(t, func() bool {
		rel, ok := a.Acquire(ctx, "team:x", 2)
		if ok {
			rel()
		}
		return ok
	}, 20*time.Second, 50*time.Millisecond, "a dead replica's slots expire")
	_ = relB

	srv.Stop()
	var rels []func()
	for range 3 {
		if rel, ok := a.Acquire(ctx, "team:z", 2); ok {
			rels = append(rels, rel)
		}
	}
	assert.Len(t, rels, 2, "Redis down: the replica counts its own against the limit")
}
