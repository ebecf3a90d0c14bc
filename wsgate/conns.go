package wsgate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Conns counts long-lived connections per key (a team's WebSockets)
// against a limit. Implementations are safe for concurrent use.
type Conns interface {
	// Acquire takes one of the limit slots of key and reports whether
	// it got one; release, called once when the connection ends, gives
	// it back. release is nil when ok is false.
	Acquire(ctx context.Context, key string, limit int) (release func(), ok bool)
}

// MemoryConns counts in this process alone. The zero value is ready.
type MemoryConns struct {
	mu sync.Mutex
	n  map[string]int
}

var _ Conns = (*MemoryConns)(nil)

// Acquire implements Conns.
func (m *MemoryConns) Acquire(_ context.Context, key string, limit int) (func(), bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.n[key] >= limit {
		return nil, false
	}
	if m.n == nil {
		m.n = map[string]int{}
	}
	m.n[key]++
	var once sync.Once
	return func() {
		once.Do(func() {
			m.mu.Lock()
			defer m.mu.Unlock()
			if m.n[key]--; m.n[key] <= 0 {
				delete(m.n, key)
			}
		})
	}, true
}

// DefaultConnsTTL is how long a slot held in Redis lasts unless its
// replica renews it (every third of it): a replica that dies frees its
// slots within it.
const DefaultConnsTTL = 30 * time.Second

// RedisConns counts connections across every replica that uses the same
// Redis: each key is a sorted set of slots (replica and connection) scored
// by their expiry on Redis's clock, renewed by the replica that holds them
// while their connections last. While Redis fails, each replica counts its
// own connections alone (Fallback) against the same limit: a limit held
// per replica rather than no limit at all.
type RedisConns struct {
	c        redis.UniversalClient
	prefix   string
	ttl      time.Duration
	replica  string
	fallback MemoryConns

	mu   sync.Mutex
	seq  uint64
	held map[string]map[string]bool // key → slots this replica holds

	stop chan struct{}
	done chan struct{}
}

var _ Conns = (*RedisConns)(nil)

// connsAcquire: KEYS[1] the key's set; ARGV limit, slot, ttl (ms).
var connsAcquire = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then
  return 0
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
`)

// connsRenew: KEYS[1] the key's set; ARGV ttl (ms), then the slots.
var connsRenew = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 2, #ARGV do
  redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[1]), ARGV[i])
end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
`)

// NewRedisConns returns a RedisConns on c (a client with deadlines and a
// breaker, as redisconn.New makes) whose keys start with prefix; ttl 0
// means DefaultConnsTTL. It renews its slots until Close.
func NewRedisConns(c redis.UniversalClient, prefix string, ttl time.Duration) *RedisConns {
	if ttl <= 0 {
		ttl = DefaultConnsTTL
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	r := &RedisConns{c: c, prefix: prefix, ttl: ttl, replica: hex.EncodeToString(b[:]),
		held: map[string]map[string]bool{}, stop: make(chan struct{}), done: make(chan struct{})}
	go r.renew()
	return r
}

// Acquire implements Conns.
func (r *RedisConns) Acquire(ctx context.Context, key string, limit int) (func(), bool) {
	r.mu.Lock()
	r.seq++
	slot := r.replica + ":" + strconv.FormatUint(r.seq, 10)
	r.mu.Unlock()
	n, err := connsAcquire.Run(ctx, r.c, []string{r.prefix + key}, limit, slot, r.ttl.Milliseconds()).Int()
	if err != nil {
		return r.fallback.Acquire(ctx, key, limit)
	}
	if n != 1 {
		return nil, false
	}
	r.mu.Lock()
	if r.held[key] == nil {
		r.held[key] = map[string]bool{}
	}
	r.held[key][slot] = true
	r.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			delete(r.held[key], slot)
			if len(r.held[key]) == 0 {
				delete(r.held, key)
			}
			r.mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			r.c.ZRem(ctx, r.prefix+key, slot) // else it expires within ttl
		})
	}, true
}

// renew renews the slots held every third of the ttl.
func (r *RedisConns) renew() {
	defer close(r.done)
	t := time.NewTicker(r.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		}
		r.mu.Lock()
		batch := make(map[string][]any, len(r.held))
		for key, slots := range r.held {
			args := []any{r.ttl.Milliseconds()}
			for s := range slots {
				args = append(args, s)
			}
			batch[key] = args
		}
		r.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), r.ttl/3)
		for key, args := range batch {
			connsRenew.Run(ctx, r.c, []string{r.prefix + key}, args...)
		}
		cancel()
	}
}

// Close stops the renewals; the slots still held expire within the ttl.
func (r *RedisConns) Close() {
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	<-r.done
}
