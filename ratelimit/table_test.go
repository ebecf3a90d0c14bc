package ratelimit

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type testVal struct{ idle bool }

// shardOf returns the shard of "seed" in a new table of perShard items per
// shard, a getter on it, and n keys of each prefix that fall in it.
func shardOf(t *testing.T, perShard int, n int, prefixes ...string) (*shard[testVal], func(string) (*testVal, bool), [][]string) {
	t.Helper()
	tab := newTable(perShard*shardCount, func(v *testVal, _ time.Time) bool { return v.idle })
	s := tab.shard("seed")
	get := func(k string) (*testVal, bool) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.get(k, t0)
	}
	var keys [][]string
	for _, p := range prefixes {
		var ks []string
		for i := 0; len(ks) < n; i++ {
			if k := p + strconv.Itoa(i); tab.shard(k) == s {
				ks = append(ks, k)
			}
		}
		keys = append(keys, ks)
	}
	return s, get, keys
}

func TestTableDropsLeastRecentlyUsed(t *testing.T) {
	s, get, keys := shardOf(t, 4, 5, "k")
	k := keys[0]
	for _, key := range k[:4] {
		_, created := get(key)
		require.True(t, created)
	}
	_, created := get(k[0]) // k[0] is now the most recently used
	require.False(t, created)

	get(k[4]) // the shard is full: k[1], the least recently used, goes
	assert.Len(t, s.items, 4)
	assert.NotContains(t, s.items, k[1])
	for _, key := range []string{k[0], k[2], k[3], k[4]} {
		assert.Contains(t, s.items, key)
	}
}

func TestTableDropsIdleFirst(t *testing.T) {
	s, get, keys := shardOf(t, 100, 50, "old", "new")
	for _, k := range keys[0] {
		v, _ := get(k)
		v.idle = true
	}
	for _, k := range keys[1] {
		get(k)
	}
	assert.Len(t, s.items, 50, "each new key drops one idle key, though the shard is not full")
	for _, k := range keys[0] {
		assert.NotContains(t, s.items, k)
	}
}
