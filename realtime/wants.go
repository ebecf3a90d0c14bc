package realtime

// The wanted set: the feeds the hub's subscriptions, Config.Pinned and
// REST demand (Want) ask for, published copy-on-write for the frame path
// (publishFeeds), and what the upstream's reconcile and the sharing's
// tick read of it (wanted, local).

import (
	"time"

	"streamgate/feedid"
)

// want returns the new feed entry of id. Called with h.mu held; the caller
// publishes.
func (h *Hub) want(id feedid.ID) *feed {
	f := h.wants[id]
	if f == nil {
		f = &feed{id: id}
		h.wants[id] = f
	}
	return f
}

// publishFeeds makes the wanted set visible to the frame path. Called with
// h.mu held.
func (h *Hub) publishFeeds() {
	m := make(map[feedid.ID]*feed, len(h.wants))
	for id, f := range h.wants {
		m[id] = f
	}
	h.feeds.Store(&m)
}

// Want records REST demand for feed: a latest request the hub could not
// answer. DemandThreshold calls within DemandWindow subscribe the feed; it
// is dropped Grace after the last call once no subscription holds it.
// Malformed feed IDs are ignored.
func (h *Hub) Want(feed feedid.ID) {
	if !validFeedID(feed) {
		return
	}
	now := time.Now()
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	if f := h.wants[feed]; f != nil {
		f.demandAt = now
		h.mu.Unlock()
		return
	}
	r := h.demand[feed]
	if r == nil {
		if len(h.demand) >= maxDemandTracked {
			h.pruneDemand(now)
		}
		r = &demandRing{}
		h.demand[feed] = r
	}
	r.t[r.i] = now
	r.i = (r.i + 1) % DemandThreshold
	oldest := r.t[r.i] // the DemandThreshold-th last call
	if oldest.IsZero() || now.Sub(oldest) > DemandWindow {
		h.mu.Unlock()
		return
	}
	delete(h.demand, feed)
	f := h.want(feed)
	f.demandAt = now
	f.idleSince = now
	h.publishFeeds()
	h.mu.Unlock()
	h.up.kick()
}

// pruneDemand forgets the demand older than DemandWindow, or all of it when
// none is. Called with h.mu held.
func (h *Hub) pruneDemand(now time.Time) {
	for id, r := range h.demand {
		newest := r.t[(r.i+DemandThreshold-1)%DemandThreshold]
		if now.Sub(newest) > DemandWindow {
			delete(h.demand, id)
		}
	}
	if len(h.demand) >= maxDemandTracked {
		clear(h.demand)
	}
}

// wanted drops the feeds past their grace (nobody subscribed, not pinned,
// no REST demand within Grace) and returns those wanted: what the
// upstream's reconcile carries.
func (h *Hub) wanted(now time.Time) map[string]bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	dropped := false
	for id, f := range h.wants {
		if f.refs > 0 || f.pinned || now.Sub(f.idleSince) < h.cfg.Grace ||
			(!f.demandAt.IsZero() && now.Sub(f.demandAt) < h.cfg.Grace) {
			continue
		}
		delete(h.wants, id)
		dropped = true
	}
	if dropped {
		h.publishFeeds()
	}
	desired := make(map[string]bool, len(h.wants))
	for id := range h.wants {
		desired[string(id)] = true
	}
	return desired
}

// local returns the feeds wanted now (grace included): what a share tick
// publishes.
func (h *Hub) local() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	local := make([]string, 0, len(h.wants))
	for id := range h.wants {
		local = append(local, string(id))
	}
	return local
}
