package realtime

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"streamgate/feedid"

	"github.com/jonboulle/clockwork"
	"go.uber.org/zap"
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
}

// BackfillSource fetches the reports of feeds at second ts (REST bulk),
// each as a frame of the stream's shape ({"report":{…}}, the upstream's
// record byte for byte), already verified; a feed without a report that
// second is absent. Safe for concurrent use.
type BackfillSource interface {
	Backfill(ctx context.Context, feeds []feedid.ID, ts int64) (map[feedid.ID][]byte, error)
}

// BackfillFunc is a BackfillSource of a function.
type BackfillFunc func(ctx context.Context, feeds []feedid.ID, ts int64) (map[feedid.ID][]byte, error)

// Backfill calls f.
func (f BackfillFunc) Backfill(ctx context.Context, feeds []feedid.ID, ts int64) (map[feedid.ID][]byte, error) {
	return f(ctx, feeds, ts)
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
	c.newFrames([]histFrame{{ts, frame}})
	return true
}

// histFrame is one frame and its observationsTimestamp (the frame's, kept
// beside it for the sorts and searches of the history).
type histFrame struct {
	ts    int64
	frame *Frame
}

// Backfill bounds. fillGather and the retries run on Config.Clock;
// fillTimeout, a bound on the calls themselves, on the wall clock.
const (
	// fillGather is how long the backfiller waits after a gap is reported
	// for the gaps of the other feeds of the same drop, so that one bulk
	// call per second carries them all.
	fillGather = 100 * time.Millisecond
	// fillTimeout bounds one round of fills; what is not fetched by then is
	// unfilled.
	fillTimeout = 60 * time.Second
	// fillUnpublished: a second this recent that Backfill does not return
	// may not be published yet (some streams publish seconds late): it is
	// asked again (fetch) rather than given up.
	fillUnpublished = 5
	// fillRetryFirst, fillRetryMax and fillTries pace the calls for a
	// second that failed or is not published yet: 250 ms, 500 ms, 1 s,
	// 2 s, 2 s apart, six calls at most, about 6 s: past fillUnpublished.
	fillRetryFirst = 250 * time.Millisecond
	fillRetryMax   = 2 * time.Second
	fillTries      = 6
)

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
	c.newFrames(all)
	n, slow := f.fanOut(all)
	f.mu.Unlock()
	c.mx.fannedOut(n, slow)
}

// newFrames hands frames, each a (stream, second) this hub delivers for
// the first time (live, or a gap's fill), to Config.Frames, in order.
// f.mu is held.
func (c *continuity) newFrames(frames []histFrame) {
	if c.sink == nil {
		return
	}
	for _, x := range frames {
		c.sink(*x.frame)
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

// resume starts the replay of feed f for s after second from: the
// frames of the history, and a fill of what it does not hold. f.mu is
// held; s is not yet among f.subs. It returns the frames to queue now.
func (c *continuity) resume(s *Subscription, f *feed, from int64) []histFrame {
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
		r := &resumeFill{c: c, s: s, f: f, from: from, waitUntil: c.clock.Now().Add(resumeLiveWait)}
		c.bf.add(r.job(from+1, max(from, c.clock.Now().Unix()-1)))
		return nil
	}
	if hi < lo || c.bf == nil {
		return out
	}
	// The history's frames are newer than the fill: they wait with the
	// live ones until it is done.
	s.holdFeed(f.id, out)
	r := &resumeFill{c: c, s: s, f: f, from: from}
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
	return &fillJob{feed: r.f.id, lo: lo, hi: hi, done: r.done, sub: r.s}
}

func (r *resumeFill) done(got []histFrame) {
	c, s, f := r.c, r.s, r.f
	c.mx.replayed(len(got))
	f.mu.Lock()
	held := s.addHeld(f.id, got)
	next := r.from // the last second that follows on from the watermark
	gap := int64(0)
	for _, x := range held {
		if x.ts <= next {
			continue
		}
		if x.ts > next+1 {
			gap = x.ts - 1
			break
		}
		next = x.ts
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

// fillJob is a range of seconds of one feed to fetch, and what to do with
// what was fetched (in order; called once).
type fillJob struct {
	feed   feedid.ID
	lo, hi int64
	done   func([]histFrame)
	// sub is the subscription a resume fetches for: its end stops the
	// job, and its charge is asked for each second.
	sub *Subscription
	// gap is the feed a gap's fill is for (sub nil), for all its
	// subscribers: the job stops when the feed has none left.
	gap *feed
}

// wanted reports whether a subscription still waits for the job: its own
// (a resume's) until it ends, a gap's while the feed has a subscriber. A
// fill stops with the last subscription that needs it.
func (j *fillJob) wanted() bool {
	switch {
	case j.sub != nil:
		return !j.sub.ended()
	case j.gap != nil:
		return j.gap.subscribed()
	}
	return true
}

// subscribed reports whether f has a subscription that has not ended.
func (f *feed) subscribed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.subs {
		if !s.ended() {
			return true
		}
	}
	return false
}

// FillCharge accounts for a second fetched for one subscription's resume
// (SubscribeOptions.Charge), asked before the call for that second: an
// error refuses it, and the subscription's fill stops there (the seconds
// left are counted unfilled; the consumer goes on with live frames).
type FillCharge func(ctx context.Context) error

// backfiller fetches the seconds of fill jobs from the BackfillSource:
// the jobs reported together share one call per second.
type backfiller struct {
	c   *continuity
	src BackfillSource
	max int64 // seconds, from Config.BackfillMax

	mu   sync.Mutex
	jobs []*fillJob
	busy bool // a round is under way
	wake chan struct{}
}

// idle reports whether no job is queued and no round is under way.
func (b *backfiller) idle() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.jobs) == 0 && !b.busy
}

// add queues a job; never blocks.
func (b *backfiller) add(j *fillJob) {
	b.mu.Lock()
	b.jobs = append(b.jobs, j)
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// run serves the jobs until the hub closes; jobs left then are done with
// nothing.
func (b *backfiller) run() {
	for {
		select {
		case <-b.c.ctx.Done():
			b.mu.Lock()
			jobs := b.jobs
			b.jobs = nil
			b.mu.Unlock()
			for _, j := range jobs {
				j.done(nil)
			}
			return
		case <-b.wake:
		}
		t := b.c.clock.NewTimer(fillGather)
		select {
		case <-b.c.ctx.Done():
		case <-t.Chan():
		}
		t.Stop()
		b.mu.Lock()
		jobs := b.jobs
		b.jobs = nil
		b.busy = len(jobs) > 0
		b.mu.Unlock()
		if len(jobs) > 0 {
			b.round(jobs)
			b.mu.Lock()
			b.busy = false
			b.mu.Unlock()
		}
	}
}

// round fetches the seconds of jobs, the oldest first, one call per second
// for every feed missing it, and completes each job. A job stops when no
// subscription waits for it any more (fillJob.wanted: a resume's
// subscription ended, a gap's feed has no subscriber left), or when its
// FillCharge refuses a second (the seconds left are then unfilled); a
// second no live job wants any more is not fetched, nor asked again.
func (b *backfiller) round(jobs []*fillJob) {
	c := b.c
	ctx, cancel := context.WithTimeout(c.ctx, fillTimeout)
	defer cancel()
	got := make([][]histFrame, len(jobs))
	var clipped int64
	secSet := map[int64]bool{}
	for _, j := range jobs {
		if b.max <= 0 {
			clipped += j.hi - j.lo + 1
			j.lo = j.hi + 1
		} else if j.hi-j.lo+1 > b.max {
			clipped += j.hi - j.lo + 1 - b.max
			j.lo = j.hi - b.max + 1
		}
		for s := j.lo; s <= j.hi; s++ {
			secSet[s] = true
		}
	}
	secs := make([]int64, 0, len(secSet))
	for s := range secSet {
		secs = append(secs, s)
	}
	slices.Sort(secs)
	stopped := make([]bool, len(jobs))
	var filled, unfilled, refused int64
	var firstErr error
	for _, s := range secs {
		feeds := b.wanted(ctx, jobs, stopped, s, &refused, &firstErr)
		if len(feeds) == 0 {
			continue
		}
		frames, err := b.fetch(ctx, feeds, s, func(id feedid.ID) bool {
			for i, j := range jobs {
				if !stopped[i] && j.feed == id && s >= j.lo && s <= j.hi && j.wanted() {
					return true
				}
			}
			return false
		})
		if err != nil && firstErr == nil {
			firstErr = err
		}
		for _, id := range feeds {
			fr, ok := frames[id]
			if !ok {
				unfilled++
				continue
			}
			filled++
			for i, j := range jobs {
				if !stopped[i] && j.feed == id && s >= j.lo && s <= j.hi {
					got[i] = append(got[i], histFrame{s, fr})
				}
			}
		}
	}
	unfilled += clipped + refused
	c.mx.backfilled(filled)
	if unfilled > 0 {
		fields := []zap.Field{zap.Int64("seconds_unfilled", unfilled), zap.Int64("seconds_filled", filled),
			zap.Int64("beyond_backfill_max", clipped)}
		if refused > 0 {
			fields = append(fields, zap.Int64("refused_by_charge", refused))
		}
		if firstErr != nil {
			fields = append(fields, zap.Error(firstErr))
		}
		c.mx.unfilled(unfilled)
		c.log.Warn("stream gap not filled whole", fields...)
	} else if filled > 0 {
		c.log.Info("stream gap filled", zap.Int64("seconds_filled", filled), zap.Int("streams", len(jobs)))
	}
	for i, j := range jobs {
		j.done(got[i])
	}
}

// fetch asks Backfill for second s of feeds, and asks again for what is
// still missing while the call fails (the upstream's budget refused it, a
// Redis failover left each replica spending its own, the upstream was
// away) or while s is recent enough that a stream may not have published
// it yet (fillUnpublished): after fillRetryFirst, doubling to
// fillRetryMax, at most fillTries calls; a feed no job waits for any more
// (wanted false) is not asked again. A frame that is not the report of the
// feed and second asked is not taken. It returns the frames got and the
// last call's error.
func (b *backfiller) fetch(ctx context.Context, feeds []feedid.ID, s int64, wanted func(feedid.ID) bool) (map[feedid.ID]*Frame, error) {
	got := make(map[feedid.ID]*Frame, len(feeds))
	missing := feeds
	wait := fillRetryFirst
	var err error
	for try := 1; ; try++ {
		if err = ctx.Err(); err != nil {
			return got, err
		}
		var frames map[feedid.ID][]byte
		frames, err = b.src.Backfill(ctx, missing, s)
		left := missing[:0:0]
		for _, id := range missing {
			fr, ok := readFrame(frames[id])
			if ok && (fr.Stream != id || fr.ObservationsTimestamp != s) {
				ok = false // not the report asked for
			}
			if ok {
				got[id] = fr
			} else {
				left = append(left, id)
			}
		}
		missing = slices.DeleteFunc(left, func(id feedid.ID) bool { return !wanted(id) })
		recent := s >= b.c.clock.Now().Unix()-fillUnpublished
		if len(missing) == 0 || try == fillTries || (err == nil && !recent) {
			return got, err
		}
		t := b.c.clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return got, ctx.Err()
		case <-t.Chan():
		}
		wait = min(2*wait, fillRetryMax)
	}
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
			f.watermark = 0
			if n := len(f.hist); n > 0 {
				f.watermark = f.hist[n-1].ts
			}
		}
		f.mu.Unlock()
	}
	return dropped
}

// wanted returns the feeds whose jobs still want second s. A job of an
// ended subscription stops; a subscription's FillCharge is asked once for
// s, and a refusal stops every job of it (its seconds from s on are added
// to refused).
func (b *backfiller) wanted(ctx context.Context, jobs []*fillJob, stopped []bool, s int64, refused *int64, firstErr *error) []feedid.ID {
	var feeds []feedid.ID
	var charged map[*Subscription]bool
	for i, j := range jobs {
		if stopped[i] || s < j.lo || s > j.hi {
			continue
		}
		if !j.wanted() {
			stopped[i] = true
			continue
		}
		if sub := j.sub; sub != nil {
			if sub.charge != nil {
				if charged == nil {
					charged = map[*Subscription]bool{}
				}
				ok, asked := charged[sub]
				if !asked {
					err := sub.charge(ctx)
					if err != nil && *firstErr == nil {
						*firstErr = err
					}
					ok = err == nil
					charged[sub] = ok
				}
				if !ok {
					sub.fillRefused.Store(true)
					stopped[i] = true
					*refused += j.hi - s + 1
					continue
				}
			}
		}
		if !slices.Contains(feeds, j.feed) {
			feeds = append(feeds, j.feed)
		}
	}
	return feeds
}
