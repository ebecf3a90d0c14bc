package realtime

import (
	"slices"
	"strings"

	"streamgate/realtime/share"
)

// Stats is a snapshot of a hub.
type Stats struct {
	Network string
	Origins []string // the HA origins of the connections held; none without HA
	// Connections are the upstream connections, one per chunk and origin
	// (a make-before-break switch shows both for a moment).
	Connections []ConnStats
	// FeedsWanted are the feeds wanted (subscriptions, pinned, demand, in
	// grace); FeedsSubscribed those carried upstream; FeedsUncarried those
	// over the budget (MaxConnections, FeedsPerConnection).
	FeedsWanted, FeedsSubscribed, FeedsUncarried int
	// FeedsLive are the feeds carried by at least one connection that is
	// up now: FeedsSubscribed counts a feed laid out on a connection
	// whatever its state, so both origins down still carry none live.
	FeedsLive           int
	Subscribers         int
	FramesIn, FramesOut int64            // read upstream; queued to subscriptions
	Duplicates          int64            // dropped by the watermark
	SlowCloses          int64            // subscriptions closed with ErrSlowConsumer
	Reconnects          map[string]int64 // by reason: drop, stall, refused
	LatestServed        int64
	// Backfilled and Unfilled are the (stream, second) pairs of gaps
	// fetched over REST and those that could not be; Resumed the
	// subscriptions resumed from a watermark and Replayed their reports.
	Backfilled, Unfilled, Resumed, Replayed int64
	// Share is the stream sharing with the other replicas; nil when the
	// hub does not share.
	Share *ShareStats
}

// ShareStats is a sharing hub's side of Stats.
type ShareStats = share.Stats

// ConnStats is one upstream connection.
type ConnStats struct {
	Origin string // "" without HA
	State  string // connecting, up, down
	Feeds  int
}

// Stats returns a snapshot of the hub.
func (h *Hub) Stats() Stats {
	s := Stats{Network: h.cfg.Network,
		FramesIn: h.st.framesIn.Load(), FramesOut: h.st.framesOut.Load(),
		Duplicates: h.st.duplicates.Load(), SlowCloses: h.st.slowCloses.Load(),
		LatestServed: h.st.latestServed.Load(),
		Backfilled:   h.st.backfilled.Load(), Unfilled: h.st.unfilled.Load(),
		Resumed: h.st.resumed.Load(), Replayed: h.st.replayed.Load(),
		Reconnects: map[string]int64{reasonDrop: h.st.reconnDrop.Load(),
			reasonStall: h.st.reconnStall.Load(), reasonRefused: h.st.reconnRefused.Load()},
		FeedsSubscribed: int(h.up.carry.Load()), FeedsUncarried: int(h.up.over.Load()),
		Share: h.peers.Stats(),
	}
	h.mu.Lock()
	s.FeedsWanted, s.Subscribers = len(h.wants), len(h.subs)
	h.mu.Unlock()
	live := map[string]struct{}{}
	h.up.linkMu.Lock()
	for l := range h.up.links {
		if st := l.state.Load(); st != nil {
			s.Connections = append(s.Connections, ConnStats{Origin: l.origin, State: *st, Feeds: len(l.feeds)})
			if *st == stateUp {
				for _, f := range l.feeds {
					live[f] = struct{}{}
				}
			}
		}
	}
	h.up.linkMu.Unlock()
	s.FeedsLive = len(live)
	slices.SortFunc(s.Connections, func(a, b ConnStats) int {
		return strings.Compare(a.Origin+a.State, b.Origin+b.State)
	})
	for _, c := range s.Connections {
		if c.Origin != "" && !slices.Contains(s.Origins, c.Origin) {
			s.Origins = append(s.Origins, c.Origin)
		}
	}
	return s
}

// Up returns how many upstream connections are up.
func (s Stats) Up() int {
	n := 0
	for _, c := range s.Connections {
		if c.State == stateUp {
			n++
		}
	}
	return n
}
