package share

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// Presence: a chunk's holder that dies is noticed within about a second,
// not a whole lease.
//
// Every sharing replica writes, every presenceEvery, its presence in two
// sorted sets of the network, scored with an expiry by Redis's clock:
// <prefix>{<network>}:alive (presenceTTL ahead) and <prefix>{<network>}:known
// (a minute ahead). In the same script it frees the leases whose holder is
// known but no longer alive (presenceScript): the holder crashed or lost
// Redis. Then it runs a share tick at once, so that it (or another
// replica, at its own next tick) takes the chunk; the frames the dead
// holder had not relayed are filled from REST as any gap (the hub's
// continuity). A replica that never wrote a presence (an older version
// during a rolling deploy) is not known and its leases only expire.
//
// A replica frees nobody's lease until its own presence writes have
// succeeded for reapAfter in a row: after a Redis failover or outage
// every replica is "not alive" until its next write, the replicas' clients
// come back up to a second apart (a circuit breaker lets one call through
// a second after it opened), and the first one back must not take the
// others' chunks for that.
const (
	presenceEvery = 200 * time.Millisecond
	presenceTTL   = 800 * time.Millisecond
	knownTTL      = time.Minute
	reapAfter     = presenceTTL + time.Second
)

// presenceScript writes replica ARGV[1] alive for ARGV[2] ms and known for
// ARGV[3] ms in the sorted sets KEYS[1] and KEYS[2], drops the expired
// members, and, when ARGV[4] is "1", deletes among the leases KEYS[3…]
// those whose holder is known but not alive. It returns how many it
// deleted. Every key is declared and shares the network's hash tag.
var presenceScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[3]), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
local n = 0
if ARGV[4] == '1' then
  for i = 3, #KEYS do
    local v = redis.call('GET', KEYS[i])
    if v and redis.call('ZSCORE', KEYS[2], v) and not redis.call('ZSCORE', KEYS[1], v) then
      redis.call('DEL', KEYS[i])
      n = n + 1
    end
  end
end
return n
`)

// presence is a Sharer's presence in Redis: it writes it and frees the
// leases of dead holders (asking its Sharer for a tick at once, stepNow).
type presence struct {
	c      redis.UniversalClient
	id     string   // this replica
	kAlive string   // replica → expiry (ms, Redis's clock)
	keys   []string // alive, known (replicas seen within knownTTL), and every lease
	log    *zap.Logger
	mx     shareMetrics

	stepNow chan struct{} // a tick at once: a dead holder's lease was freed
	left    atomic.Bool   // the Sharer handed over: delete the presence and stop
	reaped  atomic.Int64  // leases of dead holders freed
	reaping atomic.Bool   // the presence may free leases (see reapAfter)
}

// newPresence returns the presence of replica id among the keys of base
// (<prefix>{<network>}:), with leases 0 to maxConns-1.
func newPresence(c redis.UniversalClient, id, base string, maxConns int, log *zap.Logger, mx shareMetrics) *presence {
	keys := []string{base + "alive", base + "known"}
	for i := range maxConns {
		keys = append(keys, base+"lease:"+strconv.Itoa(i))
	}
	return &presence{c: c, id: id, kAlive: base + "alive", keys: keys, log: log, mx: mx, stepNow: make(chan struct{}, 1)}
}

// run writes this replica's presence and frees the leases of dead
// holders until ctx ends; it deletes the presence when the Sharer hands
// over.
func (s *presence) run(ctx context.Context) {
	keys := s.keys
	args := []any{s.id, presenceTTL.Milliseconds(), knownTTL.Milliseconds(), "0"}
	t := time.NewTicker(presenceEvery)
	defer t.Stop()
	var okSince time.Time // the first of the writes that succeeded in a row
	for first := true; ; first = false {
		if !first {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
		if s.left.Load() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			s.c.ZRem(ctx, s.kAlive, s.id)
			cancel()
			return
		}
		now := time.Now()
		reap := !okSince.IsZero() && now.Sub(okSince) >= reapAfter
		s.reaping.Store(reap)
		args[3] = "0"
		if reap {
			args[3] = "1"
		}
		wctx, cancel := context.WithTimeout(ctx, presenceEvery)
		n, err := presenceScript.Run(wctx, s.c, keys, args...).Int64()
		cancel()
		if err != nil {
			okSince = time.Time{}
			continue
		}
		if okSince.IsZero() {
			okSince = now
		}
		if n > 0 {
			s.reaped.Add(n)
			s.mx.lease("reaped")
			s.log.Info("a chunk's holder is gone: its lease freed for takeover", zap.Int64("leases", n))
			select {
			case s.stepNow <- struct{}{}:
			default:
			}
		}
	}
}
