package realtime

import (
	"sync"
	"time"

	"go.uber.org/zap"
)

// linkHealth turns the upstream connections' ups and downs into one log
// line per change of an origin's state: "upstream WebSocket lost" (or
// "refused") when a first connection to an origin fails while the origin
// was well, "upstream WebSocket back" once every connection to it that
// failed since is up again or gone (a switch closed it) and one is up. The refusals and losses in
// between, every connection's every attempt, are logged at debug level
// and counted (streamgate_ws_reconnects_total), so an outage of seconds
// is two lines per origin, not one per attempt.
type linkHealth struct {
	log *zap.Logger

	mu   sync.Mutex
	down map[string]*originDown    // by origin ("" without HA)
	ups  map[string]map[*link]bool // the connections up, by origin
}

// originDown is an origin whose connections are failing.
type originDown struct {
	since    time.Time
	failing  map[*link]bool
	failures int // refusals and losses since it went down
}

func newLinkHealth(log *zap.Logger) *linkHealth {
	return &linkHealth{log: log, down: map[string]*originDown{}, ups: map[string]map[*link]bool{}}
}

// failed records that l's connection was refused (lost false) or lost.
func (lh *linkHealth) failed(l *link, lost bool, fields ...zap.Field) {
	msg := "upstream WebSocket refused"
	if lost {
		msg = "upstream WebSocket lost"
	}
	lh.mu.Lock()
	delete(lh.ups[l.origin], l)
	d := lh.down[l.origin]
	first := d == nil
	if first {
		d = &originDown{since: time.Now(), failing: map[*link]bool{}}
		lh.down[l.origin] = d
	}
	d.failing[l] = true
	d.failures++
	lh.mu.Unlock()
	fields = append(fields, zap.String("origin", l.origin), zap.Int("feeds", len(l.feeds)))
	if first {
		lh.log.Warn(msg, fields...)
		return
	}
	if ce := lh.log.Check(zap.DebugLevel, msg); ce != nil {
		ce.Write(fields...)
	}
}

// up records that l's connection is up; the origin is back when no other
// connection of it is failing.
func (lh *linkHealth) up(l *link) {
	lh.mu.Lock()
	if lh.ups[l.origin] == nil {
		lh.ups[l.origin] = map[*link]bool{}
	}
	lh.ups[l.origin][l] = true
	lh.settle(l)
}

// gone records that l ended (retired, closed): it no longer holds its
// origin down. The origin is back only when a connection of it is up.
func (lh *linkHealth) gone(l *link) {
	lh.mu.Lock()
	delete(lh.ups[l.origin], l)
	lh.settle(l)
}

// settle takes l out of its origin's failing connections and logs the
// origin back when none is left failing and one is up. lh.mu is held; it
// unlocks it.
func (lh *linkHealth) settle(l *link) {
	d := lh.down[l.origin]
	if d == nil {
		lh.mu.Unlock()
		return
	}
	delete(d.failing, l)
	back := len(d.failing) == 0 && len(lh.ups[l.origin]) > 0
	if back {
		delete(lh.down, l.origin)
	}
	lh.mu.Unlock()
	if back {
		lh.log.Info("upstream WebSocket back", zap.String("origin", l.origin),
			zap.Duration("down", time.Since(d.since).Round(time.Millisecond)), zap.Int("failures", d.failures))
	}
}
