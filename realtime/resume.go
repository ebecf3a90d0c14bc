package realtime

// Resume: a consumer that comes back (SubscribeOptions.From), or that
// asks for its feeds from a point in time (SubscribeOptions.Since), gets,
// per feed, the frames after its watermark from the history, and what the
// history does not reach is read from the archive (Config.Archive) and
// what that lacks fetched (resumeFill), its live frames held meanwhile,
// until they follow on without a gap.

import "time"

// resume starts the replay of feed f for s after second from: the
// frames of the history, and a fill of what it does not hold, reaching
// back reach seconds at most (0: Config.BackfillMax). f.mu is held; s is
// not yet among f.subs. It returns the frames to queue now.
func (c *continuity) resume(s *Subscription, f *feed, from, reach int64) []histFrame {
	var out []histFrame
	// lo..hi: the first seconds after from that the history lacks, before
	// its first frame after from or between two of them (a gap whose fill
	// stopped when its last subscriber went, seconds REST did not have);
	// the fill looks for the next such seconds when it is done.
	lo, hi := from+1, int64(0)
	for _, x := range f.hist {
		if x.ts <= from {
			continue
		}
		out = append(out, x)
		if hi == 0 {
			if x.ts > lo {
				hi = x.ts - 1
			} else {
				lo = x.ts + 1
			}
		}
	}
	switch {
	case hi > 0:
	case f.filling > 0 && len(f.pending) > 0 && f.pending[0].ts > lo:
		// A gap's fill is under way: s gets its seconds with the frames
		// held when it is done, but the fill may have stopped short of
		// them, having found no subscriber before s; s's own fill makes
		// sure of them.
		hi = f.pending[0].ts - 1
	case len(f.hist) == 0 && f.watermark > from:
		hi = f.watermark - 1
		if l := f.latest.Load(); l != nil && l.ts == f.watermark && f.filling == 0 {
			out = append(out, histFrame{l.ts, l.frame})
		}
	case len(f.hist) == 0 && f.watermark == 0:
		// The feed is new here: no frame of it has arrived yet, and the
		// first may come seconds later (a connection to open, a lease to
		// take). Whatever the consumer's watermark, its frames wait for
		// the first live one, and the seconds up to it are filled.
		if c.bf == nil {
			return out
		}
		s.holdFeed(f.id, out)
		r := &resumeFill{c: c, s: s, f: f, from: from, reach: reach, waitUntil: c.clock.Now().Add(resumeLiveWait)}
		c.bf.add(r.job(from+1, max(from, c.clock.Now().Unix()-1)))
		return nil
	}
	if hi < lo || c.bf == nil {
		return out
	}
	// The history's frames are newer than the fill: they wait with the
	// live ones until it is done.
	s.holdFeed(f.id, out)
	r := &resumeFill{c: c, s: s, f: f, from: from, reach: reach}
	c.bf.add(r.job(lo, hi))
	return nil
}

// resumeFill fetches what a returning subscription missed of one feed
// until its frames held (history, live) follow on without a gap, within
// maxResumeTries rounds: a feed this hub did not carry starts live
// some time after the first fill was asked.
type resumeFill struct {
	c     *continuity
	s     *Subscription
	f     *feed
	from  int64
	tries int
	// reach bounds the seconds of one fill instead of Config.BackfillMax
	// (0: it).
	reach int64
	// arch is what the archive held of the first fill's seconds (nil
	// without an archive): its coverage tells the seconds without a
	// report from those still missing.
	arch *archived
	// waitUntil, for a feed new here, bounds the wait for its first live
	// frame (zero: the feed was carried here already).
	waitUntil time.Time
}

// maxResumeTries bounds the fill rounds of one resumed feed.
const maxResumeTries = 10

// resumeLiveWait bounds how long a resumed feed that this hub did not
// carry waits for its first live frame before it starts without one.
const resumeLiveWait = 10 * time.Second

func (r *resumeFill) job(lo, hi int64) *fillJob {
	r.tries++
	j := &fillJob{feed: r.f.id, lo: lo, hi: hi, done: r.done, sub: r.s, max: r.reach}
	if r.arch == nil && r.c.bf.arch != nil {
		// The first fill reads the archive; the next ones are for what
		// it lacked.
		r.arch = &archived{}
		j.arch = r.arch
	}
	return j
}

func (r *resumeFill) done(got []histFrame) {
	c, s, f := r.c, r.s, r.f
	c.mx.replayed(len(got))
	f.mu.Lock()
	held := s.addHeld(f.id, got)
	// next: the last second that follows on from the watermark; a
	// second the archive's coverage holds without a report follows on.
	next := r.arch.through(r.from)
	gap := int64(0)
	for _, x := range held {
		if x.ts <= next {
			continue
		}
		if x.ts > next+1 {
			gap = r.arch.gapEnd(next+1, x.ts-1)
			break
		}
		next = r.arch.through(x.ts)
	}
	// A fill for a subscription that ended, or whose charge was refused,
	// goes no further.
	gone := s.ended() || s.fillRefused.Load()
	if gap > 0 && r.tries < maxResumeTries && c.ctx.Err() == nil && !gone {
		c.bf.add(r.job(next+1, gap))
		f.mu.Unlock()
		return
	}
	if gap == 0 && f.watermark == 0 && !r.waitUntil.IsZero() && c.clock.Now().Before(r.waitUntil) && c.ctx.Err() == nil && !gone {
		// No live frame of the feed here yet: fetch the seconds published
		// meanwhile and look again (a round is at least fillGather).
		r.tries = 0
		c.bf.add(r.job(next+1, max(next, c.clock.Now().Unix()-1)))
		f.mu.Unlock()
		return
	}
	if f.watermark == 0 && next > r.from && f.filling == 0 && !s.ended() {
		// No live frame here yet (the hub did not carry the feed): the
		// first one is a gap after what was replayed, filled for every
		// subscriber. Not for a subscription that has gone: its fill's
		// seconds would make the feed's first live frame a gap that
		// nobody waits for.
		f.watermark = next
	}
	ok := s.unhold(f.id, nil)
	f.mu.Unlock()
	if !ok {
		c.mx.fannedOut(0, []*Subscription{s})
	}
}
