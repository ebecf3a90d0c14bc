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
// With the redis backend the gateway makes that check in its admission's
// script call instead (Keys, and ratelimit.AdmitFirstUse, whose script
// decides as this one), and calls FirstUse only while the admission's
// checks go one by one.
//
// It sits on every signed request's path and has no fallback of its own:
// FirstUse returns Redis's error and the Verifier's local record decides.
// So give it a client whose calls are short and fail at once while Redis
// is down or hung, as redisconn.New makes them: a deadline on
// every call and a circuit breaker, whose error (redisconn.ErrCircuitOpen)
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

// replayScript: KEYS[1] the signature, KEYS[2] and KEYS[3] the team's
// counts of first uses in the current and the previous period of ttl;
// ARGV now (ms), ttl (ms), grace (ms), the team's most (0: none).
// Returns 1 when the use is allowed, 0 for a replay, 2 when the team's
// first uses kept are at its most.
var replayScript = redis.NewScript(`
local first = redis.call('GET', KEYS[1])
if not first then
  local most = tonumber(ARGV[4])
  if most > 0 then
    local n = tonumber(redis.call('GET', KEYS[2]) or '0') + tonumber(redis.call('GET', KEYS[3]) or '0')
    if n >= most then
      return 2
    end
  end
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  redis.call('INCR', KEYS[2])
  redis.call('PEXPIRE', KEYS[2], 2 * tonumber(ARGV[2]))
  return 1
end
if tonumber(ARGV[1]) - tonumber(first) < tonumber(ARGV[3]) then
  return 1
end
return 0
`)

// FirstUse implements ReplayStore. A team's first uses are counted per
// period of u.TTL: those of the current and the previous period (every
// signature kept is in them) are bounded by u.TeamMax, so that no team
// fills the store for the others.
func (s *RedisReplay) FirstUse(ctx context.Context, u ReplayUse) (bool, error) {
	k := s.Keys(u)
	n, err := replayScript.Run(ctx, s.client, []string{k.Sig, k.Counts[0], k.Counts[1]},
		u.Now.UnixMilli(), k.TTL.Milliseconds(), u.Grace.Milliseconds(), max(u.TeamMax, 0)).Int()
	switch {
	case err != nil:
		return false, err
	case n == 2:
		return false, k.FullError(u.Now)
	}
	return n == 1, nil
}

// RedisKeys are the keys of a use in a RedisReplay, all with the team's
// Redis Cluster hash tag: a script that records the use with other checks
// of the team's (ratelimit.RedisAdmitter's) runs in the same slot.
type RedisKeys struct {
	// Sig holds the time of the signature's first use, for TTL.
	Sig string
	// Counts are the team's first uses in the current and the previous
	// period of TTL, bounded together by the use's TeamMax.
	Counts [2]string
	// TTL is the use's TTL, at least a millisecond.
	TTL time.Duration
}

// Keys returns the keys of u: one signature's, and its team's counts in
// the period of u.Now and the one before. A key belongs to one team, so
// its signatures are the team's.
func (s *RedisReplay) Keys(u ReplayUse) RedisKeys {
	tag := "{" + u.Team + "}:"
	ttl := max(u.TTL.Milliseconds(), 1)
	period := u.Now.UnixMilli() / ttl
	team := s.prefix + tag + "team:"
	return RedisKeys{
		Sig:    s.prefix + tag + strconv.Itoa(len(u.Key)) + ":" + u.Key + ":" + hex.EncodeToString(u.Sig),
		Counts: [2]string{team + strconv.FormatInt(period, 10), team + strconv.FormatInt(period-1, 10)},
		TTL:    time.Duration(ttl) * time.Millisecond,
	}
}

// FullError is the error of a use at now refused because its team's
// first uses are at their most: room comes when the period ends.
func (k RedisKeys) FullError(now time.Time) *ReplayFullError {
	ttl := k.TTL.Milliseconds()
	return &ReplayFullError{RetryAfter: time.Duration(ttl-now.UnixMilli()%ttl) * time.Millisecond, Team: true}
}
