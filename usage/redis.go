package usage

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultPrefix starts the ledger's keys in Redis: one hash per UTC day,
// DefaultPrefix + "YYYY-MM-DD", whose fields are
// "network|team|field" (field: reports, frames, calls, rest_bytes,
// stream_bytes, or req|endpoint|class) and whose values are counts.
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

func (r *redisStore) key(day time.Time) string { return r.prefix + day.Format(DayLayout) }

// add adds counts to the day's hash in one transaction (MULTI/EXEC, one
// round trip: all the counts or none), and sets the hash's expiry to the
// day's end plus Retention.
func (r *redisStore) add(ctx context.Context, day time.Time, counts map[string]int64) error {
	key := r.key(day)
	_, err := r.rc.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for f, n := range counts {
			p.HIncrBy(ctx, key, f, n)
		}
		p.ExpireAt(ctx, key, day.AddDate(0, 0, 1).Add(Retention))
		return nil
	})
	if err != nil {
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
