package realtime

// The backfiller: the one place the hub fetches seconds it did not get
// live (a gap's, a resumed consumer's) from Config.Backfill, one call per
// second for every feed missing it, asked again while the upstream
// refuses or a second is not published yet; its jobs (fillJob) and their
// bounds. What it fetches is read once, as a live frame is (readFrame).

import (
	"context"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"streamgate/feedid"
)

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
	// max, when above zero, bounds the seconds fetched instead of
	// Config.BackfillMax (a since's reach, SubscribeOptions.Since).
	max int64
	// arch, when not nil, is filled from the archive before the round
	// fetches (readArchive): a resumed feed's first fill.
	arch *archived
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
	// arch reads the archive before a resume's seconds are fetched
	// (Config.Archive); nil: none.
	arch ArchiveSource

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
	// The archive is read first: its seconds are not bounded, only those
	// fetched from the upstream are.
	b.readArchive(ctx, jobs)
	for _, j := range jobs {
		bound := b.max
		if j.max > 0 {
			bound = j.max
		}
		if j.arch != nil {
			clipped += j.arch.clip(j.lo, j.hi, bound)
		} else if bound <= 0 {
			clipped += j.hi - j.lo + 1
			j.lo = j.hi + 1
		} else if j.hi-j.lo+1 > bound {
			clipped += j.hi - j.lo + 1 - bound
			j.lo = j.hi - bound + 1
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
	var filled, unfilled, refused, fromArch int64
	var firstErr error
	for _, s := range secs {
		feeds := b.wanted(ctx, jobs, stopped, s, &refused, &firstErr)
		if len(feeds) == 0 {
			continue
		}
		held, rest := fromArchive(jobs, stopped, s, feeds)
		fromArch += int64(len(held))
		frames, err := b.fetchSome(ctx, rest, held, s, func(id feedid.ID) bool {
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
	filled -= fromArch
	c.mx.backfilled(filled)
	c.mx.archiveReplayed(fromArch)
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

// wanted returns the feeds whose jobs still want second s. A job of an
// ended subscription stops; a subscription's FillCharge is asked once for
// s, and a refusal stops every job of it (its seconds from s on are added
// to refused).
func (b *backfiller) wanted(ctx context.Context, jobs []*fillJob, stopped []bool, s int64, refused *int64, firstErr *error) []feedid.ID {
	var feeds []feedid.ID
	var charged map[*Subscription]bool
	for i, j := range jobs {
		if stopped[i] || s < j.lo || s > j.hi || j.arch.skips(s) {
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
