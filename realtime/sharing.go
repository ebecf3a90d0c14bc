package realtime

import (
	"context"
	"slices"

	"streamgate/realtime/share"
)

// sharing is what the upstream asks of the sharing of its connections
// with the other replicas of the network: which shared chunks it holds
// and which wanted feeds it carries itself (Plan), and what the chunks it
// holds read and carry (Publish, SessionDown, Carrying). *share.Sharer
// implements it through Redis (it runs its own tick, and kicks the
// manager after each); alone{} is a hub that does not share. Called by the
// manager goroutine, Publish and SessionDown by the links.
type sharing interface {
	// Plan splits the wanted feeds: the shared chunks this replica holds
	// (tag → feeds) and the wanted feeds it carries on connections of its
	// own. carried reports whether a feed is on an own connection now, up
	// whether a held chunk has a connection up. Keep leaves the
	// connections as they are.
	Plan(wanted map[string]bool, carried func(feed string) bool, up func(tag string) bool) share.Plan
	// Publish relays a frame that session sess of held chunk tag read.
	Publish(tag string, sess uint64, frame []byte)
	// SessionDown says at once that session sess of held chunk tag ended.
	SessionDown(tag string, sess uint64)
	// Carrying is told, after each plan carried out, the held chunks as
	// the connections carry them (for the heartbeats).
	Carrying(held []share.Held)
}

// membership is what the hub itself asks of the sharing: to start it
// (Start, with the hub's context), to hand over as it closes (Leave, then
// Wait for its goroutines), whether it shares now and the union its last
// tick read, for admission (Sharing, Union; see
// SubscribeOptions.Within), and its side of Stats (nil: none).
// *share.Sharer implements it; alone{} is a hub that does not share.
type membership interface {
	Start(ctx context.Context)
	Leave()
	Wait()
	Sharing() bool
	Union() *share.Union
	Stats() *share.Stats
}

var (
	_ sharing    = (*share.Sharer)(nil)
	_ membership = (*share.Sharer)(nil)
	_ sharing    = alone{}
	_ membership = alone{}
)

// alone is the sharing of a hub that does not share: it holds no shared
// chunk and carries every feed it wants itself; it has nothing to start
// or hand over, never shares and has no stats.
type alone struct{}

func (alone) Start(context.Context) {}
func (alone) Leave()                {}
func (alone) Wait()                 {}
func (alone) Sharing() bool         { return false }
func (alone) Union() *share.Union   { return nil }
func (alone) Stats() *share.Stats   { return nil }

func (alone) Plan(wanted map[string]bool, _, _ func(string) bool) share.Plan {
	return share.Plan{Own: wanted}
}
func (alone) Publish(string, uint64, []byte) {}
func (alone) SessionDown(string, uint64)     {}
func (alone) Carrying([]share.Held)          {}

// plan asks the sharing for the plan of wanted, telling it which feeds
// the own chunks carry and which held chunks have a connection up.
// Called by the manager goroutine.
func (u *upstream) plan(wanted map[string]bool) share.Plan {
	carried := map[string]bool{}
	up := map[string]bool{}
	for _, c := range u.chunks {
		if c.tag == "" {
			for _, id := range c.feeds {
				carried[id] = true
			}
			continue
		}
		for _, l := range c.links {
			if ss := l.sess.Load(); ss != nil && ss.alive.Load() {
				up[c.tag] = true
			}
		}
	}
	return u.peers.Plan(wanted,
		func(id string) bool { return carried[id] },
		func(t string) bool { return up[t] })
}

// held returns the shared chunks as reconciled: their feeds and their
// sessions up. Called by the manager goroutine.
func (u *upstream) held() []share.Held {
	var out []share.Held
	for _, c := range u.chunks {
		if c.tag == "" {
			continue
		}
		h := share.Held{Tag: c.tag, Feeds: c.feeds}
		for _, l := range c.links {
			if ss := l.sess.Load(); ss != nil && ss.alive.Load() {
				h.Up = append(h.Up, ss.id)
			}
		}
		out = append(out, h)
	}
	return out
}

// applyShared brings the shared chunks in line with held: it starts those
// new, switches those changed (make-before-break) and returns the links of
// those no longer held (retiring, to close once started are up), with
// the links started and the feeds the kept shared chunks carry. It
// replaces h.chunks (own chunks kept as they are). Called by the manager
// goroutine; without sharing held is empty and only own chunks stay.
func (u *upstream) applyShared(held map[string][]string, origins []string) (started, retiring []*link, total int) {
	kept := make([]*chunk, 0, len(u.chunks)+len(held))
	// As for own chunks (reconcile): without room in reserve, a switch
	// closes the old connections first.
	breakFirst := chunkBudget(u.cfg.MaxConnections, len(origins))*len(origins)+len(origins) > u.cfg.MaxConnections
	for _, c := range u.chunks {
		if c.tag == "" {
			kept = append(kept, c)
			continue
		}
		feeds, ok := held[c.tag]
		switch {
		case !ok || len(feeds) == 0:
			retiring = append(retiring, c.links...)
			continue
		case (!slices.Equal(c.feeds, feeds) || !c.on(origins)) && breakFirst:
			for _, l := range c.links {
				l.retire(nil)
			}
			continue // started again below once there is room
		case (!slices.Equal(c.feeds, feeds) || !c.on(origins)) && u.room(len(origins)):
			c.feeds = slices.Clone(feeds)
			old := c.links
			c.links = nil
			for _, o := range origins {
				c.links = append(c.links, u.startLink(o, c.feeds, c.tag))
			}
			u.retireAfter(old, c.links)
		}
		delete(held, c.tag)
		total += len(c.feeds)
		kept = append(kept, c)
	}
	for t, feeds := range held {
		if len(feeds) == 0 || !u.room(len(origins)) {
			continue // no room yet: a later reconcile starts it
		}
		c := &chunk{tag: t, feeds: slices.Clone(feeds)}
		for _, o := range origins {
			l := u.startLink(o, c.feeds, t)
			c.links = append(c.links, l)
			started = append(started, l)
		}
		total += len(c.feeds)
		kept = append(kept, c)
	}
	u.chunks = kept
	return started, retiring, total
}
