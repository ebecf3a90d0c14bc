package realtime

// continuity and its ledger per feed: the watermark (duplicates dropped,
// frames dated in the future too), the newest report, the history, the
// gaps held while their seconds are fetched, the hand-off of each new
// second to Config.Frames, and Recheck. A resume's replay is in
// resume.go, the fetching of seconds in backfill.go.

import (
	"context"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/zap"

	"streamgate/feedid"
)

// continuity is the one owner of a hub's contract with its subscribers:
// every second of each feed, once, in order. It holds, per feed, the
// watermark (the newest second taken), the newest report (for Latest) and
// the history, and it is given what it needs by the hub's Config: the
// report check (Check), the backfill source (Backfill, BackfillMax) and
// the history's span (History). The hub's fan-out hands it every frame
// (take) and delivers only what it lets through; subscriptions that come
// back are started by it (resume).
//
//   - Watermark: a frame not newer than its feed's watermark is a
//     duplicate (HA origins, make-before-break switches, reconnects,
//     other replicas' relays) and dropped; one dated more than MaxFuture
//     ahead of the clock is dropped too, so that it cannot hold the
//     watermark.
//   - History: each feed keeps the frames it delivered in the last
//     Config.History, so that a resumed Subscribe (SubscribeOptions.From)
//     can replay what a returning consumer missed.
//   - Gaps: when a feed's frames stop and start again (its watermark jumps
//     by more than a second: an upstream drop or outage, a holder's crash, a
//     lease moving), the frames that arrive are held back while the missing
//     seconds are fetched from the BackfillSource (REST bulk at each
//     second, at most Config.BackfillMax of them); then the fetched frames
//     and the held ones are delivered in observationsTimestamp order, each
//     once.
//   - Resume: Subscribe with SubscribeOptions.From replays, per feed, the
//     frames after the consumer's watermark from the history, and fetches
//     what the history does not reach (the replica did not carry the feed)
//     the same way, holding that subscription's live frames of the feed
//     meanwhile.
//   - Recheck: after a reload that made verification stricter, what the
//     history and the newest reports hold is checked again.
//
// A second that the source does not return is counted
// (streamgate_ws_gaps_unfilled_total) and logged, as is the part of a gap
// beyond BackfillMax.
type continuity struct {
	network  string
	check    func(frame []byte) bool // nil: every report is taken
	sink     func(Frame)             // Config.Frames; nil: none
	clock    clockwork.Clock         // Config.Clock: dates the reports, runs the timers below
	histSecs int64                   // Config.History in seconds
	bf       *backfiller             // nil without a backfill source: gaps stay gaps
	log      *zap.Logger
	mx       *hubMetrics
	ctx      context.Context // the hub's: ends its fills

	futureLogged atomic.Int64 // Unix seconds of the last log of a frame dated in the future
}

// ledger is what continuity keeps of one feed; guarded by the feed's mu.
type ledger struct {
	watermark int64
	hist      []histFrame // the frames delivered in the last Config.History, oldest first
	filling   int         // gap fills under way
	pending   []histFrame // frames that arrived while filling, held
	fetched   []histFrame // frames the fills under way brought
	handed    int64       // the second last handed to Config.Frames; 0 when what follows does not follow it (start, Recheck)
}

func newContinuity(ctx context.Context, cfg *Config, log *zap.Logger, mx *hubMetrics) *continuity {
	c := &continuity{network: cfg.Network, check: cfg.Check, sink: cfg.Frames, clock: cfg.Clock, histSecs: int64(cfg.History / time.Second),
		log: log, mx: mx, ctx: ctx}
	if cfg.Backfill != nil {
		c.bf = &backfiller{c: c, src: cfg.Backfill, max: int64(cfg.BackfillMax / time.Second), wake: make(chan struct{}, 1)}
	}
	return c
}

// future reports whether a frame of observationsTimestamp ts is dated
// more than MaxFuture ahead of the clock, counting and logging it (at most
// once a minute): the frame path drops it, before any feed's lock. Taken,
// it would hold its feed's watermark, and every report until that time
// would be dropped as old, on every replica.
func (c *continuity) future(ts int64, origin string) bool {
	if ts <= c.clock.Now().Add(MaxFuture).Unix() {
		return false
	}
	c.mx.m.future.WithLabelValues(c.network).Inc()
	if now := time.Now().Unix(); now-c.futureLogged.Load() >= 60 {
		c.futureLogged.Store(now)
		c.log.Warn("report frame dated in the future dropped", zap.String("origin", origin), zap.Int64("observationsTimestamp", ts))
	}
	return true
}

// take is handed each frame of feed f (observationsTimestamp ts, not
// dated in the future) by connection src; f.mu is held. It reports
// whether the frame is to be delivered now: false for a duplicate, a
// frame the check refuses, and one held for a gap's fill (delivered by
// gapFilled).
func (c *continuity) take(f *feed, frame *Frame, src source) bool {
	ts := frame.ObservationsTimestamp
	if ts <= f.watermark {
		if cur := f.latest.Load(); ts == f.watermark && cur != nil && !cur.src.Valid() {
			// The same report from a connection that is up.
			f.latest.Store(&latest{frame: cur.frame, ts: ts, src: src})
		}
		c.mx.duplicate()
		return false
	}
	if c.check != nil && !c.check(frame.Bytes) {
		return false // counted and logged by the checker
	}
	prev := f.watermark
	f.watermark = ts
	f.latest.Store(&latest{frame: frame, ts: ts, src: src})
	if c.holdForGap(f, prev, frame) {
		return false // delivered when the gap is filled
	}
	c.record(f, frame)
	c.newFrames(f, []histFrame{{ts, frame}})
	return true
}

// histFrame is one frame and its observationsTimestamp (the frame's, kept
// beside it for the sorts and searches of the history).
type histFrame struct {
	ts    int64
	frame *Frame
}

// record keeps frame in f's history, dropping what is older than the
// history's span. f.mu is held.
func (c *continuity) record(f *feed, frame *Frame) {
	if c.histSecs <= 0 {
		return
	}
	ts := frame.ObservationsTimestamp
	f.hist = append(f.hist, histFrame{ts, frame})
	oldest := ts - c.histSecs
	i := 0
	for i < len(f.hist) && f.hist[i].ts <= oldest {
		i++
	}
	if i > 0 {
		n := copy(f.hist, f.hist[i:])
		clear(f.hist[n:])
		f.hist = f.hist[:n]
	}
}

// holdForGap reports whether frame (ts, newer than prev, the feed's
// watermark before it) must wait for a gap fill of f; it starts one when
// the watermark jumps. f.mu is held.
func (c *continuity) holdForGap(f *feed, prev int64, frame *Frame) bool {
	ts := frame.ObservationsTimestamp
	if c.bf == nil {
		return false
	}
	if prev > 0 && ts > prev+1 {
		f.filling++
		c.bf.add(&fillJob{feed: f.id, lo: prev + 1, hi: ts - 1, gap: f, done: func(got []histFrame) { c.gapFilled(f, got) }})
	}
	if f.filling == 0 {
		return false
	}
	f.pending = append(f.pending, histFrame{ts, frame})
	return true
}

// gapFilled delivers a fill's frames and the frames held meanwhile, once
// the last fill of f under way is done.
func (c *continuity) gapFilled(f *feed, got []histFrame) {
	f.mu.Lock()
	f.fetched = append(f.fetched, got...)
	if f.filling--; f.filling > 0 {
		f.mu.Unlock()
		return
	}
	all := mergeFrames(f.fetched, f.pending)
	f.fetched, f.pending = nil, nil
	for _, x := range all {
		c.record(f, x.frame)
	}
	c.newFrames(f, all)
	n, slow := f.fanOut(all)
	f.mu.Unlock()
	c.mx.fannedOut(n, slow)
}

// newFrames hands frames, each a (stream, second) this hub delivers for
// the first time (live, or a gap's fill), to Config.Frames, in order,
// each with Follows set when it is the second after the one handed before
// it: then this hub delivered both and nothing can lie between them. A
// jump is never bridged, even over seconds a gap's fill asked for and got
// none: REST's 206 says "not yet available", not "never", and its answer
// may come from a cache of a moment when the second was recent. Such a
// second stays out of the stream's claims, for the archive to fill from
// a page, which proves it. f.mu is held.
func (c *continuity) newFrames(f *feed, frames []histFrame) {
	if c.sink == nil {
		return
	}
	for _, x := range frames {
		fr := *x.frame
		if f.handed > 0 && x.ts == f.handed+1 {
			fr.Follows = f.handed
		}
		f.handed = x.ts
		c.sink(fr)
	}
}

// mergeFrames returns a and b in observationsTimestamp order, each second
// once.
func mergeFrames(a, b []histFrame) []histFrame {
	all := append(slices.Clip(a), b...)
	slices.SortStableFunc(all, func(x, y histFrame) int { return cmpInt(x.ts, y.ts) })
	return slices.CompactFunc(all, func(x, y histFrame) bool { return x.ts == y.ts })
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Recheck applies admit (the report verification now in force) to what
// the hub holds of each feed, after a reload that made verification
// stricter: a frame of the history (what resume replays) or the newest
// report (what latest answers) that admit refuses is dropped. When the
// newest report is, the feed's watermark goes back to the newest frame
// kept (0 when none), so that the genuine reports of the seconds it
// claimed are delivered when they come. It returns the frames dropped.
func (h *Hub) Recheck(admit func(frame []byte) bool) int {
	return h.cont.recheck(*h.feeds.Load(), admit)
}

// recheck is Recheck over feeds.
func (c *continuity) recheck(feeds map[feedid.ID]*feed, admit func(frame []byte) bool) int {
	dropped := 0
	for _, f := range feeds {
		f.mu.Lock()
		kept := f.hist[:0]
		for _, x := range f.hist {
			if admit(x.frame.Bytes) {
				kept = append(kept, x)
			} else {
				dropped++
			}
		}
		clear(f.hist[len(kept):])
		f.hist = kept
		if l := f.latest.Load(); l != nil && !admit(l.frame.Bytes) {
			f.latest.Store(nil)
			dropped++
			f.handed = 0 // the genuine report of that second follows nothing certain
			f.watermark = 0
			if n := len(f.hist); n > 0 {
				f.watermark = f.hist[n-1].ts
			}
		}
		f.mu.Unlock()
	}
	return dropped
}
