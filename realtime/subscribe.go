package realtime

// Subscribing and leaving: Hub.Subscribe with its options (queue, resume
// watermarks, admission within the connection budget, the resume's
// charge), the admission check (admits, roomShared), and the release and
// Drop of a subscription's feeds, with the grace of a feed nobody wants.

import (
	"errors"
	"maps"
	"slices"
	"time"

	"streamgate/feedid"
	"streamgate/realtime/share"
)

// SubscribeOptions are how a consumer subscribes (Hub.Subscribe).
type SubscribeOptions struct {
	// Queue is the subscription's queue length, in frames; DefaultQueue
	// when < 1.
	Queue int
	// From, for a consumer that comes back, holds per feed the
	// observationsTimestamp of the last report it received (0 or absent:
	// none, the feed starts as a new consumer's does). Each such feed
	// first gets, in order, every report after that second: from the
	// hub's history, and what the history does not reach fetched with
	// Config.Backfill (the consumer's newer frames of that feed wait
	// meanwhile); then live ones, each once. Empty: a new consumer.
	From map[feedid.ID]int64
	// Within is for a consumer that must get every one of its feeds: the
	// hub refuses (ErrNoRoom, nothing subscribed) when some feed is not
	// carried now and the wanted set, with the feeds not yet wanted, is
	// over what Config.MaxConnections and Config.FeedsPerConnection
	// carry, so that the consumer is told rather than left without
	// frames. A sharing hub counts every replica's wants instead: it
	// refuses when some feed is neither carried by the layout of the
	// union its last tick read nor by a connection of its own, and the
	// union, with this hub's wants not yet in it and the feeds nobody
	// wants yet, is over what the layout can carry
	// (chunkBudget(MaxConnections, origins) × FeedsPerConnection). While
	// sharing is down (Redis), the hub checks its own wants as an
	// unshared hub does. A hub that has not yet connected, or not yet read
	// the union, admits every consumer. No Redis call: the figures are
	// those of the last reconcile and tick.
	Within bool
	// Charge, if not nil, is asked before each second fetched for the
	// consumer's replay, from the archive or the upstream (see
	// FillCharge).
	Charge FillCharge
	// Since, above zero, is for a consumer that asked for its feeds from
	// a point in time (the endpoint's since, its second - 1 in From for
	// every feed): how far back its replay may reach, which bounds the
	// seconds fetched for each feed instead of Config.BackfillMax. Such a
	// subscription is counted apart (streamgate_ws_since_total).
	Since time.Duration
}

// Subscribe registers a consumer of feeds (stream IDs as feedid.Parse
// gives them, without duplicates, entitled by the caller). The hub connects upstream for the
// feeds not yet carried. The newest report the hub holds of each feed, if
// valid (see Latest), comes first (or, for a feed of o.From, the replay of
// what the consumer missed), then every newer report, each once, in
// observationsTimestamp order per feed, as the upstream's bytes. Feeds
// over the connection budget get nothing (Stats.FeedsUncarried) unless
// o.Within refuses them. The error is ErrNoRoom (o.Within only); after
// Close, the subscription is returned already ended with ErrHubClosed.
// Subscription.Replayed tells how many reports it replayed at once.
func (h *Hub) Subscribe(feeds []feedid.ID, o SubscribeOptions) (*Subscription, error) {
	if o.Within && !h.admits(feeds) {
		return nil, ErrNoRoom
	}
	// A consumer admitted between the check and subscribe may take the
	// last room; the window is a few instructions wide.
	from := o.From
	if len(from) == 0 {
		from = nil
	}
	return h.subscribe(feeds, o.Queue, from, o.Charge, int64(o.Since/time.Second)), nil
}

// subscribe registers s (see Subscribe); charge is the subscription's
// FillCharge (nil: none); reach, in seconds, bounds its fills (0:
// Config.BackfillMax).
func (h *Hub) subscribe(feeds []feedid.ID, queue int, from map[feedid.ID]int64, charge FillCharge, reach int64) *Subscription {
	if queue < 1 {
		queue = DefaultQueue
	}
	s := &Subscription{feeds: feeds, ch: make(chan *Frame, queue), done: make(chan struct{}), charge: charge,
		leave: h.release, drop: h.drop}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		s.end(ErrHubClosed)
		s.releaseOnce.Do(func() {})
		return s
	}
	h.subs[s] = struct{}{}
	added := false
	for _, id := range feeds {
		f := h.wants[id]
		if f == nil {
			f = h.want(id)
			added = true
		}
		f.refs++
		f.idleSince = time.Time{}
	}
	if added {
		h.publishFeeds()
	}
	h.mx.subscribers.Add(1)
	// Under h.mu, so that a release cannot interleave; the feed locks
	// order the newest report (or a returning consumer's replay) before
	// every newer frame.
	var overflow bool
	replayed := 0
	for _, id := range feeds {
		f := h.wants[id]
		f.mu.Lock()
		if mark := from[id]; mark > 0 {
			frames := h.cont.resume(s, f, mark, reach)
			f.subs = append(f.subs, s)
			if n, ok := s.deliver(id, frames); !ok {
				overflow = true
			} else {
				replayed += n
			}
		} else {
			f.subs = append(f.subs, s)
			// While a gap is filled, the newest report is among the frames
			// held, which every subscriber gets when it is filled.
			if l := f.latest.Load(); l != nil && l.src.Valid() && f.filling == 0 {
				if sent, o := s.send(l.frame); sent {
					h.mx.delivered(1)
				} else if o {
					overflow = true
				}
			}
		}
		f.mu.Unlock()
	}
	h.mu.Unlock()
	s.replayed = replayed
	if from != nil {
		if reach > 0 {
			h.mx.since()
		}
		h.mx.resumed()
		h.mx.replayed(replayed)
		h.mx.delivered(replayed)
	}
	if overflow {
		h.mx.slowClose()
		s.release()
	}
	if added {
		h.up.kick()
	}
	return s
}

// ErrNoRoom is the error of Subscribe with SubscribeOptions.Within when
// the upstream connection budget cannot carry the feeds asked for.
var ErrNoRoom = errors.New("realtime: the upstream connection budget is full")

// admits reports whether the budget has room for feeds (see
// SubscribeOptions.Within).
func (h *Hub) admits(feeds []feedid.ID) bool {
	if h.peers.Sharing() {
		return h.roomShared(feeds, h.peers.Union())
	}
	capacity := h.up.capacity.Load()
	carried := h.up.carried.Load()
	if capacity == 0 || carried == nil {
		return true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	fresh, all := 0, true
	for _, id := range feeds {
		if !(*carried)[string(id)] {
			all = false
		}
		if h.wants[id] == nil {
			fresh++
		}
	}
	return all || int64(len(h.wants)+fresh) <= capacity
}

// roomShared reports whether the union u of a sharing hub's last tick has
// room for feeds (see SubscribeOptions.Within); nil u or capacity 0: room. Another
// replica's consumer admitted since that tick may take the last room: the
// window is a tick wide.
func (h *Hub) roomShared(feeds []feedid.ID, u *share.Union) bool {
	if u == nil || u.Capacity == 0 {
		return true
	}
	var own map[string]bool
	if c := h.up.carried.Load(); c != nil {
		own = *c
	}
	all := true
	for _, id := range feeds {
		if !u.Feeds[string(id)] && !own[string(id)] {
			all = false
			break
		}
	}
	if all {
		return true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	size := len(u.Feeds)
	for _, id := range feeds {
		if _, in := u.Feeds[string(id)]; !in && h.wants[id] == nil {
			size++
		}
	}
	if size > u.Capacity {
		return false
	}
	// This hub's wants the tick has not published yet (a consumer just
	// admitted here) count too.
	for id := range h.wants {
		if _, in := u.Feeds[string(id)]; !in {
			if size++; size > u.Capacity {
				return false
			}
		}
	}
	return true
}

// release removes s from its feeds; the feeds nobody wants any more start
// their grace.
func (h *Hub) release(s *Subscription) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.subs[s]; !ok {
		return // the hub closed
	}
	delete(h.subs, s)
	h.mx.subscribers.Add(-1)
	now := time.Now()
	for _, id := range s.feeds {
		h.unwant(s, id, now)
	}
}

// drop stops feeds for s (Subscription.Drop).
func (h *Hub) drop(s *Subscription, feeds []feedid.ID) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	drop := make(map[feedid.ID]bool, len(feeds))
	for _, id := range feeds {
		if slices.Contains(s.feeds, id) {
			drop[id] = true
		}
	}
	if len(drop) == 0 {
		return len(s.feeds)
	}
	// The caller's slice is shared: build a new one.
	kept := make([]feedid.ID, 0, len(s.feeds))
	for _, id := range s.feeds {
		if !drop[id] {
			kept = append(kept, id)
		}
	}
	old := map[feedid.ID]bool{}
	if d := s.dropped.Load(); d != nil {
		maps.Copy(old, *d)
	}
	maps.Copy(old, drop)
	s.dropped.Store(&old)
	if _, ok := h.subs[s]; ok {
		now := time.Now()
		for id := range drop {
			h.unwant(s, id, now)
		}
	}
	s.feeds = kept
	return len(kept)
}

// unwant removes s from feed id's subscribers; a feed nobody wants any more
// starts its grace at now. h.mu is held.
func (h *Hub) unwant(s *Subscription, id feedid.ID, now time.Time) {
	f := h.wants[id]
	if f == nil {
		return
	}
	f.mu.Lock()
	if i := slices.Index(f.subs, s); i >= 0 {
		last := len(f.subs) - 1
		f.subs[i] = f.subs[last]
		f.subs[last] = nil
		f.subs = f.subs[:last]
	}
	f.mu.Unlock()
	if f.refs--; f.refs == 0 {
		f.idleSince = now
	}
}
