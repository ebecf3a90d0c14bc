// Package ctxsleep is the one context-aware sleep of the tree.
package ctxsleep

import (
	"context"
	"time"
)

// Sleep waits d, or less when ctx ends first; it reports whether it waited
// the whole d. A d of zero or less returns true at once unless ctx has
// already ended.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
