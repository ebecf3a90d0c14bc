package redistest

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// ReachHook is a go-redis hook that counts the commands that reached Redis
// (added after a client's own hooks, such as a circuit breaker, it sees
// only what they let through) and those of them that got no reply.
// Commands a connection's set-up sends inside a call are not counted.
type ReachHook struct{ Reached, Failed atomic.Int64 }

type reachCall struct{}

// DialHook implements redis.Hook.
func (h *ReachHook) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (h *ReachHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if ctx.Value(reachCall{}) != nil { // a connection's set-up, inside a call
			return next(ctx, cmd)
		}
		err := next(context.WithValue(ctx, reachCall{}, true), cmd)
		h.Reached.Add(1)
		var reply redis.Error
		if err != nil && !errors.As(err, &reply) {
			h.Failed.Add(1)
		}
		return err
	}
}

// ProcessPipelineHook implements redis.Hook.
func (h *ReachHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
