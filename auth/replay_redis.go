package auth

import (
	"context"
	"encoding/hex"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisReplay is a ReplayStore in Redis, shared by every replica that uses
// the same server and prefix. One round trip a request: a script records
// the first use of a signature with an expiry, or compares it with now.
//
// It sits on every signed request's path and has no fallback of its own:
// FirstUse returns Redis's error and the Verifier's local record decides.
// So give it a client whose calls are short and fail at once while Redis
// is down or hung, as ratelimit.NewRedisClient makes them: a deadline on
// every call and a circuit breaker, whose error (ratelimit.ErrCircuitOpen)
// FirstUse then returns without waiting.
type RedisReplay struct {
	client redis.UniversalClient
	prefix string
}

var _ ReplayStore = (*RedisReplay)(nil)

// NewRedisReplay returns a store on client whose keys start with prefix
// (for example "streamgate:replay:").
func NewRedisReplay(client redis.UniversalClient, prefix string) *RedisReplay {
	return &RedisReplay{client: client, prefix: prefix}
}

// replayScript: KEYS[1] the signature; ARGV now (ms), ttl (ms), grace (ms).
// Returns 1 when the use is allowed.
var replayScript = redis.NewScript(`
local first = redis.call('GET', KEYS[1])
if not first then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
if tonumber(ARGV[1]) - tonumber(first) < tonumber(ARGV[3]) then
  return 1
end
return 0
`)

// FirstUse implements ReplayStore.
func (s *RedisReplay) FirstUse(ctx context.Context, key string, sig []byte, now time.Time, ttl, grace time.Duration) (bool, error) {
	k := s.prefix + strconv.Itoa(len(key)) + ":" + key + ":" + hex.EncodeToString(sig)
	n, err := replayScript.Run(ctx, s.client, []string{k},
		now.UnixMilli(), max(ttl.Milliseconds(), 1), grace.Milliseconds()).Int()
	if err != nil {
		return false, err
	}
	return n == 1, nil
}
