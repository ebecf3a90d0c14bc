package realtime

import "slices"

// The sharing layer of a reconcile: which shared chunks this replica
// holds, and what it leaves to its own connections (planOwn).

// sharedPlan returns the shared chunks this replica holds (tag → feeds),
// the wanted feeds left to its own connections and the own chunks the
// budget still allows, from desired (every feed wanted) and maxChunks
// (every chunk the budget allows). Called by the manager goroutine of a
// sharing hub.
func (u *upstream) sharedPlan(desired map[string]bool, maxChunks int) (held map[string][]string, own map[string]bool, maxOwn int) {
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
	held, ownList := u.sh.Plan(desired,
		func(id string) bool { return carried[id] },
		func(t string) bool { return up[t] })
	own = make(map[string]bool, len(ownList))
	for _, id := range ownList {
		own[id] = true
	}
	return held, own, max(maxChunks-len(held), 0)
}

// applyShared brings the shared chunks in line with held: it starts those
// new, switches those changed (make-before-break) and returns the links of
// those no longer held (retiring, to close once started are up), with
// the links started and the feeds the kept shared chunks carry. It
// replaces h.chunks (own chunks kept as they are). Called by the manager
// goroutine; without sharing held is nil and only own chunks stay.
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
