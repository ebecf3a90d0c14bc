package share

// What the hub's upstream asks of the sharing and tells it: the chunks
// this replica holds and the feeds it carries alone (Plan), the chunks
// its connections carry (Carrying, which sends the heartbeats), and the
// leases let go when the hub closes (release, or handover while another
// replica takes each chunk).

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// Plan is what a replica's upstream connections carry, as Sharer.Plan
// says.
type Plan struct {
	// Keep: leave the connections as they are. Before the first tick
	// (nothing is known yet), and once the replica has handed its chunks
	// over (it is closing).
	Keep bool
	// Held are the shared chunks this replica holds (tag → feeds): it
	// connects for them and publishes what they read.
	Held map[string][]string
	// Own are the wanted feeds this replica carries on connections of its
	// own, within the budget the held chunks leave.
	Own map[string]bool
	// Sharing: the replica shares now (its last ticks succeeded); Over is
	// then how many feeds of every replica's union the layout leaves out.
	Sharing bool
	Over    int
}

// Plan returns, for the hub's upstream, the chunks this replica holds
// with their feeds, and the wanted feeds (desired) it must carry itself:
// those without a live source for Lease, and those it carries already
// until a source is live; every wanted feed while it does not share.
// carried reports whether a feed is on a connection of the replica's own
// now; up whether a held chunk has a connection up.
func (s *Sharer) Plan(desired map[string]bool, carried func(feed string) bool, up func(tag string) bool) Plan {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.left || !s.ticked {
		return Plan{Keep: true}
	}
	s.planned = s.ticks
	p := Plan{Held: map[string][]string{}, Own: map[string]bool{}, Sharing: s.ok, Over: s.over}
	if s.ok {
		for t := range s.held {
			i, _ := splitTag(t)
			p.Held[t] = s.layout.chunks[i]
		}
	}
	now := time.Now()
	nowNs := int64(now.Sub(s.start))
	for f := range desired {
		if s.ok {
			if i, ok := s.layout.slot[f]; ok {
				t := tag(s.layout.n, i)
				if (s.held[t] && up(t)) || (!s.held[t] && s.remoteLive(t, s.layout.digest[i], now)) {
					delete(s.uncovered, f)
					continue
				}
			}
		}
		since, seen := s.uncovered[f]
		if !seen {
			since = nowNs
			s.uncovered[f] = since
		}
		if !s.ok || carried(f) || time.Duration(nowNs-since) >= s.lease {
			p.Own[f] = true
		}
	}
	for f := range s.uncovered {
		if !desired[f] {
			delete(s.uncovered, f)
		}
	}
	return p
}

// Held is a chunk this replica holds as its connections carry it: its
// feeds and the numbers of its upstream sessions that are up.
type Held struct {
	Tag   string
	Feeds []string
	Up    []uint64
}

// Carrying is told, after each plan the hub's upstream has carried out,
// the chunks it connects for as this replica's holder; after a tick, the
// first such call sends the heartbeat of each chunk still held (its feeds'
// digest and the sessions up). Called by the goroutine of Plan.
func (s *Sharer) Carrying(chunks []Held) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.planned <= s.beaten {
		return
	}
	s.beaten = s.planned
	for _, c := range chunks {
		if s.held[c.Tag] {
			s.heartbeat(c.Tag, c.Feeds, c.Up)
		}
	}
}

// release lets every lease of this replica go, when the hub closes
// without a handover. The tick goroutine's.
func (s *Sharer) release() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	keys := make([]string, max(s.maxConn, s.layout.n))
	for i := range keys {
		keys[i] = s.kLease + strconv.Itoa(i)
	}
	if err := releaseScript.Run(ctx, s.c, keys, s.id).Err(); err != nil && !errors.Is(err, redis.Nil) {
		s.log.Warn("stream sharing: leases not released; they expire", zap.Error(err))
		return
	}
	for range s.held {
		s.mx.lease("released")
	}
	for t := range s.held {
		s.mx.chunkRole(t, "")
	}
	s.mu.Lock()
	s.held = map[string]bool{}
	s.mu.Unlock()
}

// handover lets the leases of the chunks held go and waits, while their
// connections still publish, until another replica's connection for each
// delivers (its frames or heartbeat heard since), within a lease; or
// until a tick and a half shows that no replica took any of them. Then
// the hub may close without a gap for the other replicas' clients. The
// tick goroutine calls it when Leave asks; the replica takes no lease
// again, and Plan keeps the connections as they are.
func (s *Sharer) handover() {
	s.mu.Lock()
	s.left = true
	s.mu.Unlock()
	s.pres.left.Store(true)
	if !s.ok || len(s.held) == 0 {
		return
	}
	var tags, keys []string
	for t := range s.held {
		i, _ := splitTag(t)
		tags = append(tags, t)
		keys = append(keys, s.kLease+strconv.Itoa(i))
	}
	since := time.Now()
	s.release()
	ctx, cancel := context.WithTimeout(context.Background(), s.lease)
	defer cancel()
	tk := time.NewTicker(20 * time.Millisecond)
	defer tk.Stop()
	taken := false
	for {
		if s.takenOver(tags, since) {
			s.log.Info("shared chunks handed over", zap.Strings("chunks", tags))
			return
		}
		if !taken && time.Since(since) > s.tick*3/2 {
			n, err := s.c.Exists(ctx, keys...).Result()
			if err != nil || n == 0 {
				return // nobody wants them, or Redis fails: nothing to wait for
			}
			taken = true
		}
		select {
		case <-ctx.Done():
			s.log.Warn("shared chunks not taken over within a lease: closing", zap.Strings("chunks", tags))
			return
		case <-tk.C:
		}
	}
}
