package ratelimit

import (
	"hash/maphash"
	"sync"
	"time"
)

const shardCount = 16

// table is a map from key to V bounded in size: each of its shards keeps
// its items in least-recently-used order and drops the oldest when full.
// Callers lock a shard, get an item and use it before unlocking.
type table[V any] struct {
	seed   maphash.Seed
	shards [shardCount]shard[V]
}

type shard[V any] struct {
	mu       sync.Mutex
	items    map[string]*item[V]
	head     *item[V] // most recently used
	tail     *item[V] // least recently used
	perShard int
	// idle reports whether dropping v at now loses nothing; such an item
	// at the tail is dropped when a new key arrives.
	idle func(v *V, now time.Time) bool
}

type item[V any] struct {
	key        string
	val        V
	prev, next *item[V]
}

func newTable[V any](maxKeys int, idle func(*V, time.Time) bool) *table[V] {
	t := &table[V]{seed: maphash.MakeSeed()}
	for i := range t.shards {
		t.shards[i].items = make(map[string]*item[V])
		t.shards[i].perShard = max(1, (maxKeys+shardCount-1)/shardCount)
		t.shards[i].idle = idle
	}
	return t
}

func (t *table[V]) shard(key string) *shard[V] {
	return &t.shards[maphash.String(t.seed, key)%shardCount]
}

// get returns the item of key, created with a zero V if absent, and marks
// it most recently used. s.mu must be held.
func (s *shard[V]) get(key string, now time.Time) (v *V, created bool) {
	if it, ok := s.items[key]; ok {
		if it != s.head {
			s.unlink(it)
			s.pushFront(it)
		}
		return &it.val, false
	}
	if len(s.items) >= s.perShard || (s.tail != nil && s.idle != nil && s.idle(&s.tail.val, now)) {
		old := s.tail
		s.unlink(old)
		delete(s.items, old.key)
	}
	it := &item[V]{key: key}
	s.items[key] = it
	s.pushFront(it)
	return &it.val, true
}

func (s *shard[V]) unlink(it *item[V]) {
	if it.prev != nil {
		it.prev.next = it.next
	} else {
		s.head = it.next
	}
	if it.next != nil {
		it.next.prev = it.prev
	} else {
		s.tail = it.prev
	}
	it.prev, it.next = nil, nil
}

func (s *shard[V]) pushFront(it *item[V]) {
	it.next = s.head
	if s.head != nil {
		s.head.prev = it
	}
	s.head = it
	if s.tail == nil {
		s.tail = it
	}
}

// len returns the number of items held.
func (t *table[V]) len() int {
	n := 0
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		n += len(s.items)
		s.mu.Unlock()
	}
	return n
}
