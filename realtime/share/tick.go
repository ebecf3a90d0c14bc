package share

// The tick: each third of a lease a replica publishes its wants, reads
// the union of every replica's, lays it out and renews and takes its
// leases (tickOnce, exchange), in Redis scripts of one round trip each.

import (
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// leaseScript renews the leases of chunks 1..n this replica holds, takes
// those free that it asks for (ARGV[3+i] = "1"), and deletes those beyond
// n it holds. It returns 1 per key held after it.
var leaseScript = redis.NewScript(`
local out = {}
local n = tonumber(ARGV[3])
for i, k in ipairs(KEYS) do
  local v = redis.call('GET', k)
  out[i] = 0
  if i <= n and ARGV[3 + i] == '1' then
    if v == ARGV[1] then
      redis.call('PEXPIRE', k, ARGV[2])
      out[i] = 1
    elseif not v then
      if redis.call('SET', k, ARGV[1], 'NX', 'PX', ARGV[2]) then out[i] = 1 end
    end
  elseif v == ARGV[1] then
    redis.call('DEL', k)
  end
end
return out
`)

// wantsScript adds this replica's wants (ARGV[3…]) to the sorted set, each
// expiring ARGV[1] ms from now, drops the expired ones and returns the
// others, at most ARGV[2]. Times are Redis's own (TIME), so that the
// replicas' clocks need not agree.
var wantsScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local exp = now + tonumber(ARGV[1])
for i = 3, #ARGV do
  redis.call('ZADD', KEYS[1], exp, ARGV[i])
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('PEXPIRE', KEYS[1], 2 * tonumber(ARGV[1]))
end
return redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'LIMIT', 0, tonumber(ARGV[2]))
`)

// releaseScript deletes the leases this replica holds among KEYS.
var releaseScript = redis.NewScript(`
for _, k in ipairs(KEYS) do
  if redis.call('GET', k) == ARGV[1] then redis.call('DEL', k) end
end
return 0
`)

// tickOnce publishes this replica's wants (local), reads the union, lays
// it out, and renews and takes the leases, within the budget that
// Deps.Budget gives (asked to discover the origins when the union is not
// empty and they are not known yet). The replica stops sharing when ticks
// have failed for half a lease (or the first one fails), and shares again
// at the first that succeeds. The tick goroutine's; it alone writes the
// fields under mu, so it reads them without.
func (s *Sharer) tickOnce(local []string) {
	defer func() { s.holds.Store(int64(len(s.held))) }()
	ctx, cancel := context.WithTimeout(s.ctx, s.lease)
	defer cancel()
	err := s.exchange(ctx, local, s.deps.Budget(false))
	if s.ctx.Err() != nil {
		return
	}
	first := !s.ticked
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ticked = true
	if err == nil {
		s.lastOK = now
		s.queue([]byte("sg1 P " + s.id + "\n"))
	}
	switch {
	case err != nil && s.ok && now.Sub(s.lastOK) < s.lease/2:
		// One failed tick: the leases held stay valid for a while yet.
		s.log.Debug("stream sharing: a tick failed", zap.Error(err))
	case err != nil && (s.ok || first):
		s.ok = false
		s.shared.Store(false)
		s.mx.mode(false)
		s.fallbacks.Add(1)
		s.mx.fallback()
		for i := range s.layout.n {
			s.mx.chunkRole(tag(s.layout.n, i), "")
		}
		s.held, s.layout = map[string]bool{}, layout{}
		s.room.Store(nil)
		s.log.Warn("stream sharing unavailable: this replica holds its own upstream connections", zap.Error(err))
	case err == nil && (!s.ok || first):
		s.ok = true
		s.shared.Store(true)
		s.mx.mode(true)
		if !first {
			s.log.Info("stream sharing back: upstream connections shared with the other replicas", zap.String("replica", s.id))
		} else {
			s.log.Info("stream sharing", zap.String("replica", s.id))
		}
	}
}

// exchange is one tick's Redis calls; when they succeed, it sets the
// held leases, the layout, the over count and the union.
func (s *Sharer) exchange(ctx context.Context, local []string, maxChunks int) error {
	args := make([]any, 0, 2+len(local))
	args = append(args, s.lease.Milliseconds(), maxUnion)
	for _, f := range local {
		args = append(args, f)
	}
	union, err := wantsScript.Run(ctx, s.c, []string{s.kWants}, args...).StringSlice()
	if err != nil {
		return err
	}
	slices.Sort(union)
	if len(union) > 0 && maxChunks == 0 {
		maxChunks = s.deps.Budget(true)
	}
	lay := newLayout(union, maxChunks, s.perConn)
	room := &Union{Feeds: make(map[string]bool, len(union)), Capacity: maxChunks * s.perConn}
	for _, f := range union {
		_, placed := lay.slot[f]
		room.Feeds[f] = placed
	}

	// Leases: the chunks of the layout, and every other index this
	// replica may hold from an earlier layout, to let it go.
	nKeys := max(lay.n, s.maxConn)
	keys := make([]string, nKeys)
	args = []any{s.id, s.lease.Milliseconds(), lay.n}
	for i := range keys {
		keys[i] = s.kLease + strconv.Itoa(i)
		want := "0"
		if i < lay.n && len(lay.chunks[i]) > 0 {
			want = "1"
		}
		args = append(args, want)
	}
	res, err := leaseScript.Run(ctx, s.c, keys, args...).Int64Slice()
	if err != nil {
		return err
	}
	held := map[string]bool{}
	for i, v := range res {
		if v == 1 && i < lay.n {
			held[tag(lay.n, i)] = true
		}
	}
	for t := range held {
		if !s.held[t] {
			s.mx.lease("acquired")
			s.log.Debug("chunk lease acquired", zap.String("chunk", t))
		}
	}
	for t := range s.held {
		if !held[t] {
			s.mx.chunkRole(t, "")
			if i, n := splitTag(t); n == lay.n && i < n && len(lay.chunks[i]) > 0 {
				s.mx.lease("lost")
				s.log.Warn("chunk lease lost to another replica", zap.String("chunk", t))
			} else {
				s.mx.lease("released")
			}
		}
	}
	for old := range s.layout.n {
		if old >= lay.n || s.layout.n != lay.n {
			s.mx.chunkRole(tag(s.layout.n, old), "")
		}
	}
	for i := range lay.n {
		t := tag(lay.n, i)
		if held[t] {
			s.mx.chunkRole(t, RoleHolder)
		} else {
			s.mx.chunkRole(t, RoleFollower)
		}
	}
	s.mu.Lock()
	s.held, s.layout, s.over = held, lay, lay.over
	s.mu.Unlock()
	s.room.Store(room)
	return nil
}
