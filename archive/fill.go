package archive

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"

	"streamgate/feedid"
	"streamgate/internal/ctxsleep"
)

// A fill is history on demand: an operator asks for a stream's reports
// over a span, and the Filler fetches the span's pages from the upstream
// (through a PageSource: the gateway's own page path, verified, within the
// budget's fill share), writes them and records the coverage each page
// proves. What it needs is read from the coverage, so a fill stopped by a
// restart goes on where the archive's coverage ends, and a span another
// replica or the stream already covered is never fetched again.

// FillJob is one request for history: every report of Stream in
// [From, To] of Network.
type FillJob struct {
	ID      string    `json:"id"`
	Network string    `json:"network"`
	Stream  feedid.ID `json:"feedID"`
	From    uint32    `json:"from"`
	To      uint32    `json:"to"`
	Created time.Time `json:"created"`
	// Hole marks a job the archive started itself for a hole in a
	// stream's coverage (HoleFiller), not an operator's.
	Hole bool `json:"hole,omitempty"`
}

// The states of a fill.
const (
	FillQueued  = "queued"  // waiting for the jobs before it
	FillRunning = "running" // fetching
	FillDone    = "done"    // the span is covered
	FillFailed  = "failed"  // the upstream refused it past the retries; Error says why
)

// FillProgress is what a job has done; it is what the job store keeps.
type FillProgress struct {
	FillJob
	State   string    `json:"state"`
	Covered uint64    `json:"covered_seconds"` // seconds of [From, To] the archive covers, at the last look
	Pages   int64     `json:"pages"`           // upstream pages fetched by this job
	Reports int64     `json:"reports"`         // reports those pages held
	Error   string    `json:"error,omitempty"`
	Updated time.Time `json:"updated"`
}

// Seconds is the length of the job's span.
func (j FillJob) Seconds() uint64 { return uint64(j.To) - uint64(j.From) + 1 }

// PageSource fetches the upstream's page of stream from start (the
// reports of stream with an observationsTimestamp ≥ start, ascending, at
// most limit), every report verified under the rules in force.
type PageSource func(ctx context.Context, network string, stream feedid.ID, start uint32, limit int) ([]Report, error)

// JobStore keeps fill jobs across restarts: in the Pebble directory, or in
// PostgreSQL for the replicas sharing it.
type JobStore interface {
	// SaveFill stores p under its job's ID, replacing what was there.
	SaveFill(ctx context.Context, p FillProgress) error
	// Fills returns every job stored, oldest first.
	Fills(ctx context.Context) ([]FillProgress, error)
	// DeleteFill deletes the job id if it ended (done or failed): one
	// stored again meanwhile, queued, is kept; none stored is no error.
	DeleteFill(ctx context.Context, id string) error
	// ClaimFill reserves the job for this process: ok is false while
	// another process (a replica sharing the database) runs it. release
	// ends the claim.
	ClaimFill(ctx context.Context, id string) (release func(), ok bool, err error)
}

// FillerOptions are a Filler's settings.
type FillerOptions struct {
	PageLimit int           // reports asked per page; 0: 100
	Retries   int           // attempts of a failing page before the job fails; 0: 5
	Backoff   time.Duration // first wait after a failure, doubled each time; 0: 1 s
	Logger    *zap.Logger   // nil: none
	Now       func() time.Time
	// OnDone, if set, is told each job this process ends (done or
	// failed), from the runner's goroutine.
	OnDone func(FillProgress)
}

// Filler runs fill jobs one at a time, in the order they came.
type Filler struct {
	store Store
	jobs  JobStore
	page  PageSource
	o     FillerOptions
	log   *zap.Logger

	mu       sync.Mutex
	progress map[string]*FillProgress
	wake     chan struct{}
	// saveMu orders a job's saves (the runner's progress, a hole's job
	// stored again), each in the store and in progress together: the
	// last state saved is the one both hold.
	saveMu sync.Mutex
}

// NewFiller returns a Filler over store, keeping its jobs in jobs and
// fetching with page. Run starts it.
func NewFiller(store Store, jobs JobStore, page PageSource, o FillerOptions) *Filler {
	if o.PageLimit <= 0 {
		o.PageLimit = 100
	}
	if o.Retries <= 0 {
		o.Retries = 5
	}
	if o.Backoff <= 0 {
		o.Backoff = time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	f := &Filler{store: store, jobs: jobs, page: page, o: o, log: o.Logger,
		progress: map[string]*FillProgress{}, wake: make(chan struct{}, 1)}
	if f.log == nil {
		f.log = zap.NewNop()
	}
	return f
}

// ErrFillSpan is wrapped by Submit's error for a span it cannot fill.
var ErrFillSpan = errors.New("archive: fill")

// FillSettle is how far behind the present a fill ends: the upstream's
// page of the last seconds may not hold every report yet, and a page
// proves coverage only of what it could hold. The live stream covers the
// rest.
const FillSettle = time.Minute

// Submit stores a new job for [from, to] of stream and wakes the runner.
// to is cut to FillSettle before the present; a span ending before it
// starts is refused.
func (f *Filler) Submit(ctx context.Context, network string, stream feedid.ID, from, to uint32) (FillProgress, error) {
	now := f.o.Now()
	if n := uint32(now.Add(-FillSettle).Unix()); to > n {
		to = n
	}
	if !validNetwork(network) || !feedid.Canonical(string(stream)) {
		return FillProgress{}, fmt.Errorf("%w: not a network and a stream ID", ErrFillSpan)
	}
	if from > to {
		return FillProgress{}, fmt.Errorf("%w: from %d is after to %d (a fill ends %s before now at the latest)", ErrFillSpan, from, to, FillSettle)
	}
	p := FillProgress{
		FillJob: FillJob{ID: fmt.Sprintf("%s-%d-%d-%d", network, from, to, now.UnixNano()), Network: network,
			Stream: stream, From: from, To: to, Created: now.UTC()},
		State: FillQueued, Updated: now.UTC(),
	}
	if err := f.jobs.SaveFill(ctx, p); err != nil {
		return FillProgress{}, err
	}
	f.mu.Lock()
	if _, ok := f.progress[p.ID]; !ok { // the runner may have taken it from the store already
		f.progress[p.ID] = &p
	}
	f.mu.Unlock()
	f.poke()
	return p, nil
}

// SubmitHole stores a job for the hole [from, to] of stream's coverage,
// unless this process knows a hole job of the stream queued or running
// over any of its seconds, and wakes the runner; the job's
// ID is the hole's (network, stream, from), so that the replicas sharing
// a store that find the same hole save one job, which one of them runs
// (JobStore.ClaimFill) and the others find covered. Unlike Submit, to is
// not cut to FillSettle before the present: a hole ends where the
// stream's next span begins, and its pages are asked no longer than the
// hole (fetch), so a full one proves it at once. It reports whether it
// stored a new job. A job of the same ID that ended (failed: the
// upstream refused it; or done, and the hole is back) is stored again,
// queued: the hole is still there, and a failure is not forever.
func (f *Filler) SubmitHole(ctx context.Context, network string, stream feedid.ID, from, to uint32) (bool, error) {
	if !validNetwork(network) || !feedid.Canonical(string(stream)) || from > to {
		return false, fmt.Errorf("%w: not a hole of a stream: %s %s [%d, %d]", ErrFillSpan, network, stream, from, to)
	}
	id := fmt.Sprintf("hole-%s-%s-%d", network, stream, from)
	f.saveMu.Lock()
	defer f.saveMu.Unlock()
	if f.holePending(network, stream, from, to) {
		return false, nil
	}
	now := f.o.Now()
	p := FillProgress{
		FillJob: FillJob{ID: id, Network: network, Stream: stream, From: from, To: to, Created: now.UTC(), Hole: true},
		State:   FillQueued, Updated: now.UTC(),
	}
	if err := f.jobs.SaveFill(ctx, p); err != nil {
		return false, err
	}
	f.mu.Lock()
	if cur, ok := f.progress[p.ID]; !ok || cur.State == FillDone || cur.State == FillFailed { // the runner may have taken it from the store already
		f.progress[p.ID] = &p
	}
	f.mu.Unlock()
	f.poke()
	return true, nil
}

// holePending reports whether a hole job of stream this process knows,
// queued or running, overlaps [from, to]: the same hole, or the same
// seen with another bound (HoleMax's start moves with the clock).
func (f *Filler) holePending(network string, stream feedid.ID, from, to uint32) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.progress {
		if p.Hole && p.Network == network && p.Stream == stream && p.From <= to && p.To >= from &&
			p.State != FillDone && p.State != FillFailed {
			return true
		}
	}
	return false
}

// PruneEnded deletes the jobs that ended (done or failed) long enough
// before now, from the job store and from this process's view: a hole
// job HoleJobKeep after it ended, an operator's OperatorJobKeep after
// (its record is what the operator asked, kept longer; a job queued or
// running is never deleted). It returns how many of each it deleted from
// the store.
func (f *Filler) PruneEnded(ctx context.Context, now time.Time) (holes, operators int, err error) {
	old := func(p *FillProgress) bool {
		keep := OperatorJobKeep
		if p.Hole {
			keep = HoleJobKeep
		}
		return (p.State == FillDone || p.State == FillFailed) && p.Updated.Before(now.Add(-keep))
	}
	stored, err := f.jobs.Fills(ctx)
	if err != nil {
		return 0, 0, err
	}
	for i := range stored {
		if !old(&stored[i]) {
			continue
		}
		if err := f.jobs.DeleteFill(ctx, stored[i].ID); err != nil {
			return holes, operators, err
		}
		if stored[i].Hole {
			holes++
		} else {
			operators++
		}
	}
	f.mu.Lock()
	for id, p := range f.progress {
		if old(p) {
			delete(f.progress, id)
		}
	}
	f.mu.Unlock()
	return holes, operators, nil
}

func (f *Filler) poke() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// Progress returns every job this process knows, oldest first.
func (f *Filler) Progress() []FillProgress {
	f.mu.Lock()
	out := make([]FillProgress, 0, len(f.progress))
	for _, p := range f.progress {
		out = append(out, *p)
	}
	f.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.Before(out[j].Created)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// Run runs jobs until ctx ends: first those the job store holds unfinished
// (a restart's), then each one submitted. A job stopped by ctx stays
// unfinished in the store, for the next Run.
func (f *Filler) Run(ctx context.Context) {
	for ctx.Err() == nil {
		stored, err := f.jobs.Fills(ctx)
		if err != nil {
			f.log.Warn("archive: fill jobs could not be read", zap.Error(err))
			if !ctxsleep.Sleep(ctx, f.o.Backoff) {
				return
			}
			continue
		}
		ran := false
		for _, p := range stored {
			f.mu.Lock()
			if _, ok := f.progress[p.ID]; !ok {
				p := p
				f.progress[p.ID] = &p
			}
			f.mu.Unlock()
			if p.State == FillDone || p.State == FillFailed {
				continue
			}
			if f.runJob(ctx, p) {
				ran = true
			}
			if ctx.Err() != nil {
				return
			}
		}
		if ran {
			continue // look again: a job may have come meanwhile
		}
		select {
		case <-ctx.Done():
			return
		case <-f.wake:
		case <-time.After(30 * time.Second): // a job another replica left
		}
	}
}

// runJob runs p if no other process does; it reports whether it ran it.
func (f *Filler) runJob(ctx context.Context, p FillProgress) bool {
	release, ok, err := f.jobs.ClaimFill(ctx, p.ID)
	if err != nil || !ok {
		return false
	}
	defer release()
	p.State = FillRunning
	f.update(ctx, &p)
	failures, unsettled := 0, 0
	for ctx.Err() == nil {
		hole, covered, err := f.firstHole(ctx, p.FillJob)
		if err == nil {
			p.Covered = covered
			if hole == nil {
				p.State, p.Error = FillDone, ""
				f.update(ctx, &p)
				f.log.Info("archive: fill done", zap.String("network", p.Network), zap.String("feedID", string(p.Stream)),
					zap.Uint32("from", p.From), zap.Uint32("to", p.To), zap.Int64("pages", p.Pages), zap.Int64("reports", p.Reports),
					zap.Bool("hole", p.Hole))
				f.done(p)
				return true
			}
			err = f.fetch(ctx, &p, *hole)
		}
		if err == nil {
			failures = 0
			f.update(ctx, &p)
			continue
		}
		if ctx.Err() != nil {
			break
		}
		if errors.Is(err, errUnsettled) {
			// Not a failure: the upstream's page of these seconds may
			// not be whole yet. Asked again, Backoff doubling up to
			// FillSettle apart, until it is whole or settled.
			f.update(ctx, &p)
			if !ctxsleep.Sleep(ctx, min(f.o.Backoff<<min(unsettled, 10), FillSettle)) {
				break
			}
			unsettled++
			continue
		}
		failures++
		p.Error = err.Error()
		if failures >= f.o.Retries {
			p.State = FillFailed
			f.update(ctx, &p)
			f.log.Warn("archive: fill failed", zap.String("network", p.Network), zap.String("feedID", string(p.Stream)),
				zap.Bool("hole", p.Hole), zap.Error(err))
			f.done(p)
			return true
		}
		f.update(ctx, &p)
		if !ctxsleep.Sleep(ctx, f.o.Backoff<<(failures-1)) {
			break
		}
	}
	return true // stopped: unfinished in the store, for the next Run
}

// errUnsettled is fetch's for a short page of seconds too recent for it
// to prove them.
var errUnsettled = errors.New("archive: fill: the page of these seconds is not settled yet")

// done tells OnDone that this process ended p.
func (f *Filler) done(p FillProgress) {
	if f.o.OnDone != nil {
		f.o.OnDone(p)
	}
}

// fetch asks for the page at hole.From, of at most the hole's length, and
// records what it proves: a full page covers [hole.From, its last
// report]; a page shorter than asked holds every report from hole.From
// up to the time it was asked, so it covers the whole hole once the hole
// ended FillSettle before that time (an operator's job always has: Submit
// cuts its To there; a hole's job may not yet: errUnsettled, and it is
// asked again once it has).
func (f *Filler) fetch(ctx context.Context, p *FillProgress, hole Span) error {
	limit := f.o.PageLimit
	if n := uint64(hole.To) - uint64(hole.From) + 1; n < uint64(limit) {
		limit = int(n)
	}
	asked := f.o.Now()
	reports, err := f.page(ctx, p.Network, p.Stream, hole.From, limit)
	if err != nil {
		return err
	}
	p.Pages++
	p.Reports += int64(len(reports))
	last := uint32(0)
	for i := range reports {
		r := &reports[i]
		if r.Network != p.Network || r.Stream != p.Stream || r.ObservationsTimestamp < hole.From ||
			(i > 0 && r.ObservationsTimestamp <= last) {
			return fmt.Errorf("archive: fill: the page at %d holds a report that does not belong to it (%s at %d)",
				hole.From, r.Stream, r.ObservationsTimestamp)
		}
		last = r.ObservationsTimestamp
	}
	if len(reports) > 0 {
		if _, err := f.store.Write(ctx, reports); err != nil {
			return err
		}
	}
	span := Span{From: hole.From, To: hole.To}
	switch {
	case len(reports) >= limit:
		span.To = last
	case int64(hole.To) > asked.Add(-FillSettle).Unix():
		return errUnsettled
	case last > span.To:
		span.To = last
	}
	return f.store.AddCoverage(ctx, p.Network, p.Stream, span)
}

// firstHole returns the first span of job the archive does not cover (nil
// when none) and how many of its seconds are covered.
func (f *Filler) firstHole(ctx context.Context, job FillJob) (*Span, uint64, error) {
	spans, err := f.store.Coverage(ctx, job.Network, job.Stream, job.From, job.To)
	if err != nil {
		return nil, 0, err
	}
	holes := Holes(spans, job.From, job.To)
	covered := job.Seconds()
	for _, h := range holes {
		covered -= uint64(h.To) - uint64(h.From) + 1
	}
	if len(holes) == 0 {
		return nil, covered, nil
	}
	return &holes[0], covered, nil
}

// Holes returns the parts of [from, to] that spans (ascending, as Coverage
// returns them) leave uncovered, in ascending order.
func Holes(spans []Span, from, to uint32) []Span {
	var out []Span
	next := uint64(from)
	for _, s := range spans {
		if uint64(s.From) > next && next <= uint64(to) {
			out = append(out, Span{From: uint32(next), To: min(s.From-1, to)})
		}
		if uint64(s.To)+1 > next {
			next = uint64(s.To) + 1
		}
	}
	if next <= uint64(to) {
		out = append(out, Span{From: uint32(next), To: to})
	}
	return out
}

// update saves p in the store (a failure only logged: the coverage, not
// this record, is what the job resumes from) and in the process's view.
func (f *Filler) update(ctx context.Context, p *FillProgress) {
	p.Updated = f.o.Now().UTC()
	f.saveMu.Lock()
	defer f.saveMu.Unlock()
	f.mu.Lock()
	cp := *p
	f.progress[p.ID] = &cp
	f.mu.Unlock()
	if err := f.jobs.SaveFill(context.WithoutCancel(ctx), *p); err != nil {
		f.log.Warn("archive: fill progress could not be saved", zap.String("job", p.ID), zap.Error(err))
	}
}
