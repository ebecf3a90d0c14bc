package realtime

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// Presence: a chunk's holder that dies is noticed within about a second,
// not a whole lease.
//
// Every sharing replica writes, every presenceEvery, two keys:
// <prefix><network>:alive:<replica> expiring after presenceTTL, and
// <prefix><network>:known:<replica> expiring after a minute. And every
// presenceEvery it frees the leases whose holder is known but no longer
// alive (reapScript): the holder crashed or lost Redis. Then it runs a
// share tick at once, so that it (or another replica, at its own next
// tick) takes the chunk; the frames the dead holder had not relayed are
// filled from REST as any gap (see continuity.go). A replica that never
// wrote a presence (an older version during a rolling deploy) is not known
// and its leases only expire.
const (
	presenceEvery = 200 * time.Millisecond
	presenceTTL   = 800 * time.Millisecond
	knownTTL      = time.Minute
)

// reapScript deletes, among the leases KEYS, those whose holder is known
// (ARGV[1] .. holder exists) but not alive (ARGV[2] .. holder does not).
// It returns how many it deleted.
var reapScript = redis.NewScript(`
local n = 0
for _, k in ipairs(KEYS) do
  local v = redis.call('GET', k)
  if v and redis.call('EXISTS', ARGV[1] .. v) == 1 and redis.call('EXISTS', ARGV[2] .. v) == 0 then
    redis.call('DEL', k)
    n = n + 1
  end
end
return n
`)

// presence writes this replica's presence and frees the leases of dead
// holders until the hub closes; it deletes the presence when the hub hands
// over.
func (s *sharer) presence() {
	h := s.h
	defer h.wg.Done()
	kAlive, kKnown := s.kBase+"alive:", s.kBase+"known:"
	t := time.NewTicker(presenceEvery)
	defer t.Stop()
	for first := true; ; first = false {
		if !first {
			select {
			case <-h.ctx.Done():
				return
			case <-t.C:
			}
		}
		if s.leftA.Load() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			s.c.Del(ctx, kAlive+s.id)
			cancel()
			return
		}
		ctx, cancel := context.WithTimeout(h.ctx, presenceEvery)
		_, err := s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, kAlive+s.id, "1", presenceTTL)
			p.Set(ctx, kKnown+s.id, "1", knownTTL)
			return nil
		})
		if err == nil {
			keys := make([]string, h.cfg.MaxConnections)
			for i := range keys {
				keys[i] = s.kLease + strconv.Itoa(i)
			}
			var n int64
			n, err = reapScript.Run(ctx, s.c, keys, kKnown, kAlive).Int64()
			if err == nil && n > 0 {
				s.reaped.Add(n)
				h.mx.lease("reaped")
				h.log.Info("a chunk's holder is gone: its lease freed for takeover", zap.Int64("leases", n))
				select {
				case s.stepNow <- struct{}{}:
				default:
				}
			}
		}
		cancel()
	}
}
