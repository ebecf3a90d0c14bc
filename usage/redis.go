package usage

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultPrefix starts the ledger's keys in Redis: one hash per UTC day,
// DefaultPrefix + "{YYYY-MM-DD}", whose fields are
// "network|team|field" (field: reports, frames, calls, rest_bytes,
// stream_bytes, or req|endpoint|class) and whose values are counts, and
// beside it, per replica process, the sequence number of its last batch
// applied (":seq:" + a random ID), kept a week after the day.
const DefaultPrefix = "streamgate:usage:v1:"

// NewRedis returns a ledger kept in rc, shared by every replica that
// writes there and kept across restarts: each day's hash expires Retention
// after the day ends. prefix "" is DefaultPrefix.
func NewRedis(rc redis.UniversalClient, prefix string, cfg Config) *Ledger {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return newLedger(&redisStore{rc: rc, prefix: prefix}, cfg)
}

type redisStore struct {
	rc     redis.UniversalClient
	prefix string
}

func (r *redisStore) shared() bool { return true }

// key is the day's hash, its date in braces: the hash tag that puts the
// day's sequence records in its slot.
func (r *redisStore) key(day time.Time) string { return r.prefix + "{" + day.Format(DayLayout) + "}" }

// addScript adds a batch to a day's hash unless the replica's sequence
// record of the day (KEYS[2]) says it was applied: a batch sent again
// after a lost reply is not counted twice. KEYS[1] is the day's hash;
// ARGV: the batch's sequence number, the hash's expiry (Unix seconds), the
// record's lifetime (seconds), then field and count pairs.
var addScript = redis.NewScript(`
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
local seq = tonumber(ARGV[1])
if seq <= last then return 0 end
for i = 4, #ARGV, 2 do
  redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i+1])
end
redis.call('EXPIREAT', KEYS[1], ARGV[2])
redis.call('SET', KEYS[2], ARGV[1], 'EX', ARGV[3])
return 1
`)

// seqKeep is how long a replica's sequence record of a day is kept after
// its last write: a batch whose reply was lost is sent again well within
// it (unless Redis stays away longer).
const seqKeep = 7 * 24 * time.Hour

// add adds a batch of day's counts in one script call (all the counts or
// none, once), and sets the day's hash to expire Retention after the day's
// end. The day's hash and the sequence records share a hash tag: one slot
// in a Cluster.
func (r *redisStore) add(ctx context.Context, replica string, day time.Time, seq int64, counts map[string]int64) error {
	key := r.key(day)
	end := day.AddDate(0, 0, 1)
	args := make([]any, 0, 3+2*len(counts))
	args = append(args, seq, end.Add(Retention).Unix(), int64(seqKeep/time.Second))
	for f, n := range counts {
		args = append(args, f, n)
	}
	if err := addScript.Run(ctx, r.rc, []string{key, key + ":seq:" + replica}, args...).Err(); err != nil {
		return fmt.Errorf("usage: writing %s: %w", key, err)
	}
	return nil
}

// read reads each day's hash in one pipeline.
func (r *redisStore) read(ctx context.Context, days []time.Time) ([]map[string]int64, error) {
	cmds := make([]*redis.MapStringStringCmd, len(days))
	_, err := r.rc.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, d := range days {
			cmds[i] = p.HGetAll(ctx, r.key(d))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("usage: reading the ledger: %w", err)
	}
	out := make([]map[string]int64, len(days))
	for i, c := range cmds {
		m := map[string]int64{}
		for f, v := range c.Val() {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				m[f] = n
			}
		}
		out[i] = m
	}
	return out, nil
}
