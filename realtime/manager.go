package realtime

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// upstream holds a hub's upstream connections: its manager goroutine
// plans the chunks of the wanted feeds within the budget (the shared
// chunks the sharing lets it hold, then planOwn), discovers the HA origins
// and keeps one link per chunk and origin (link.go), switching
// make-before-break. It is given what it needs from the hub as functions:
// the wanted feeds (wanted) and the frame path (frames); and the sharing
// with the other replicas as a small interface (sharing).
type upstream struct {
	cfg    *Config // the hub's, read only
	base   string  // scheme://host[:port] of the WebSocket
	log    *zap.Logger
	mx     *hubMetrics
	st     *hubCounters
	ctx    context.Context // the hub's: ends every link
	wg     *sync.WaitGroup // the hub's
	kickCh chan struct{}
	peers  sharing  // alone{} without sharing
	disc   *origins // the HA origins

	wanted func(now time.Time) map[string]bool           // the feeds wanted, those past their grace dropped
	frames func(origin string, src source, frame []byte) // the hub's frame path

	// Owned by the manager goroutine.
	chunks []*chunk

	linkMu sync.Mutex
	links  map[*link]struct{} // for Stats
	health *linkHealth        // one log line per change of an origin's state
	carry  atomic.Int64       // feeds carried
	// carried and capacity are the feeds carried and how many the budget
	// holds, as the last reconcile left them (for SubscribeOptions.Within); nil and 0 before.
	carried  atomic.Pointer[map[string]bool]
	capacity atomic.Int64
	over     atomic.Int64  // feeds wanted but not carried
	sessN    atomic.Uint64 // numbers the sessions
}

// chunk is a set of feeds carried together: one link per origin.
type chunk struct {
	tag   string   // a shared chunk this replica holds ("n/i"); "" its own
	feeds []string // sorted
	links []*link  // by origin
	next  []string // planning
}

// manage reconciles the upstream connections with the wanted feeds, when
// kicked (a subscription, a link's end, a tick of the sharing) and on a
// tick (for the grace periods).
func (u *upstream) manage() {
	defer u.wg.Done()
	every := min(max(u.cfg.Grace/4, 10*time.Millisecond), time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-u.ctx.Done():
			return // the links end with u.ctx
		case <-u.kickCh:
		case <-t.C:
		}
		u.reconcile()
	}
}

// budget returns how many chunks the connection budget allows: 0 while
// the origins are not known, unless discover asks to discover them. The
// sharing's tick asks it (share.Deps.Budget).
func (u *upstream) budget(discover bool) int {
	origins, ok := u.disc.get(discover)
	if !ok {
		return 0
	}
	return chunkBudget(u.cfg.MaxConnections, len(origins))
}

// chunkBudget is how many chunks maxConns connections carry with origins
// connections each, keeping one chunk's connections free for a
// make-before-break switch, so that the links open, the switch's included,
// are never more than maxConns. When maxConns holds a single chunk, it
// is all the budget and its switches are break-before-make (canSwitch).
func chunkBudget(maxConns, origins int) int {
	n := maxConns / max(origins, 1)
	if n >= 2 {
		return n - 1
	}
	return n
}

// reconcile drops the feeds past their grace, splits the wanted set into
// chunks within the budget and switches the chunks that changed. A
// sharing hub holds the shared chunks whose lease it has and carries on
// its own chunks only the wanted feeds without another source.
func (u *upstream) reconcile() {
	// The sharing: the shared chunks this replica holds, and the wanted
	// feeds left to its own connections.
	wanted := u.wanted(time.Now())
	plan := u.plan(wanted)
	if plan.Keep || (len(wanted) == 0 && len(u.chunks) == 0 && len(plan.Held) == 0) {
		return
	}
	desired := plan.Own
	origins, _ := u.disc.get(true)
	maxChunks := chunkBudget(u.cfg.MaxConnections, len(origins))
	// Without a chunk's connections in reserve, a switch closes the old
	// connections first, then opens the new ones when they have ended (the
	// seconds between are a gap, filled from REST).
	breakFirst := maxChunks*len(origins)+len(origins) > u.cfg.MaxConnections
	maxChunks = max(maxChunks-len(plan.Held), 0)

	started, retiring, total := u.applyShared(plan.Held, origins)

	// This replica's own chunks, as planOwn lays them out.
	var own []*chunk
	var current [][]string
	for _, c := range u.chunks {
		if c.tag == "" {
			own = append(own, c)
			current = append(current, c.feeds)
		}
	}
	next, over := planOwn(current, desired, u.cfg.FeedsPerConnection, maxChunks)
	for i, feeds := range next {
		if i < len(own) {
			own[i].next = feeds
			continue
		}
		c := &chunk{next: feeds}
		own = append(own, c)
		u.chunks = append(u.chunks, c)
	}
	if plan.Sharing {
		u.over.Store(int64(plan.Over))
	} else {
		if over := int64(over); over != u.over.Swap(over) && over > 0 {
			u.log.Warn("feeds over the upstream connection budget stay unsubscribed",
				zap.Int64("feeds", over), zap.Int("max_connections", u.cfg.MaxConnections),
				zap.Int("feeds_per_connection", u.cfg.FeedsPerConnection))
		}
	}
	u.mx.uncarried.Set(float64(u.over.Load()))

	// Switch what changed.
	kept := u.chunks[:0]
	for _, c := range u.chunks {
		if c.tag != "" {
			kept = append(kept, c)
			continue
		}
		slices.Sort(c.next)
		switch {
		case len(c.next) == 0:
			for _, l := range c.links {
				l.retire(nil)
			}
			continue
		case c.links == nil && !u.room(len(origins)):
			// No room yet: the chunk waits, empty, for a later reconcile.
			c.feeds = nil
		case c.links == nil:
			c.feeds = slices.Clone(c.next)
			for _, o := range origins {
				l := u.startLink(o, c.feeds, "")
				c.links = append(c.links, l)
				started = append(started, l)
			}
		case (!slices.Equal(c.feeds, c.next) || !c.on(origins)) && breakFirst:
			// No room for both: the old connections go first; the chunk
			// starts again, empty, when they have ended (their end kicks
			// a reconcile).
			for _, l := range c.links {
				l.retire(nil)
			}
			c.links, c.feeds = nil, nil
		case (!slices.Equal(c.feeds, c.next) || !c.on(origins)) && !u.room(len(origins)):
			// A switch waits while another is in flight: the changes
			// gathered meanwhile make one switch when there is room.
		case !slices.Equal(c.feeds, c.next) || !c.on(origins):
			c.feeds = slices.Clone(c.next)
			old := c.links
			c.links = nil
			for _, o := range origins {
				c.links = append(c.links, u.startLink(o, c.feeds, ""))
			}
			u.retireAfter(old, c.links)
		}
		total += len(c.feeds)
		kept = append(kept, c)
	}
	clear(u.chunks[len(kept):])
	u.chunks = kept
	u.retireWhenUp(retiring, started)
	// What Admit needs: the feeds carried now, and how many this
	// replica's own connections can carry.
	carriedNow := make(map[string]bool, total)
	for _, c := range u.chunks {
		for _, id := range c.feeds {
			carriedNow[id] = true
		}
	}
	u.carried.Store(&carriedNow)
	u.capacity.Store(int64(maxChunks * u.cfg.FeedsPerConnection))
	u.carry.Store(int64(total))
	u.mx.feeds.Set(float64(total))
	u.peers.Carrying(u.held())
}

// on reports whether c's links are one per origin of origins, in order
// (the origins change when a discovery refused at first is answered).
func (c *chunk) on(origins []string) bool {
	if len(c.links) != len(origins) {
		return false
	}
	for i, l := range c.links {
		if l.origin != origins[i] {
			return false
		}
	}
	return true
}

// room reports whether the links of one chunk (origins of them) may start
// now: while the links alive, retiring ones included, and these are at
// most MaxConnections. The chunks planned leave one chunk's links free
// (chunkBudget), which a make-before-break switch takes: the upstream
// never sees more than MaxConnections, whatever the churn. A chunk or
// switch refused waits for a later reconcile (a link's end kicks one),
// and the changes made meanwhile are applied together. Called by the
// manager goroutine.
func (u *upstream) room(origins int) bool {
	u.linkMu.Lock()
	defer u.linkMu.Unlock()
	return len(u.links)+origins <= u.cfg.MaxConnections
}

// retireWhenUp closes old once every link of succ has delivered a frame,
// or after StallTimeout; at once without succ.
func (u *upstream) retireWhenUp(old, succ []*link) {
	if len(old) == 0 {
		return
	}
	if len(succ) == 0 {
		for _, o := range old {
			o.retire(nil)
		}
		return
	}
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		ctx, cancel := context.WithTimeout(u.ctx, u.cfg.StallTimeout)
		defer cancel()
		for _, s := range succ {
			select {
			case <-s.first:
			case <-ctx.Done():
			}
		}
		for _, o := range old {
			o.retire(nil)
		}
	}()
}

// retireAfter closes each of old once its successor (same origin) has
// delivered a frame, or after StallTimeout: make-before-break.
func (u *upstream) retireAfter(old, succ []*link) {
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		ctx, cancel := context.WithTimeout(u.ctx, u.cfg.StallTimeout)
		defer cancel()
		for i, o := range old {
			var s *link
			if i < len(succ) {
				s = succ[i]
				select {
				case <-s.first:
				case <-ctx.Done():
				}
			}
			o.retire(s)
		}
	}()
}

// reconnected counts a reconnect.
func (u *upstream) reconnected(reason string) {
	switch reason {
	case reasonDrop:
		u.st.reconnDrop.Add(1)
	case reasonStall:
		u.st.reconnStall.Add(1)
	case reasonRefused:
		u.st.reconnRefused.Add(1)
	}
	u.mx.m.reconnects.WithLabelValues(u.cfg.Network, reason).Inc()
}

// kick asks the manager to reconcile.
func (u *upstream) kick() {
	select {
	case u.kickCh <- struct{}{}:
	default:
	}
}

// backoff returns the wait before reconnect attempt n (0 first).
func backoff(n int) time.Duration {
	d := backoffMax
	if n < 16 {
		d = min(backoffMin<<n, backoffMax)
	}
	return d/2 + rand.N(d/2+1)
}
