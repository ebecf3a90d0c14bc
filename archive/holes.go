package archive

import (
	"context"
	"sort"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"streamgate/feedid"
)

// Holes in a stream's coverage, filled. When a stream the hub carries
// starts a new chain of claims (Writer.OnChain: the gateway started, the
// stream is carried again, or the Writer dropped reports while the store
// was down), the seconds between the stream's previous span and the new
// one are a hole: no replica carried the stream then, or what it carried
// was not stored. The HoleFiller looks up that previous span once the new
// span is recorded (so the store answers again) and hands the hole to the
// Filler (SubmitHole: pages within the budget's fill share, resumable,
// one job per hole for the replicas sharing a store). A stream never
// recorded before has no hole: it is carried for the first time.
//
// That look happens once, when the new chain starts: a hole whose fill
// failed (the upstream refused it past the retries), was left (the
// process stopped, the queue of chain starts overflowed) or appeared
// between older spans later (a span recorded afterwards by another
// replica, an operator's fill) would stay. So the HoleFiller also sweeps
// the coverage, at start and every HoleSweepEvery: for each stream whose
// coverage reaches into the last HoleMax (StreamLister: the streams
// carried lately, by any replica sharing the store), the seconds between
// two of its spans within HoleMax and the retention are handed to the
// Filler like the others (the same job IDs, so replicas sharing
// PostgreSQL run each once). A sweep reads at most holeSweepStreams
// streams' coverage and submits at most holeSweepHoles holes; the next
// one goes on after the last stream looked at. Each sweep also deletes
// the hole jobs that ended more than HoleJobKeep ago, and an operator's
// fill jobs that ended more than OperatorJobKeep ago.

// HoleMax bounds how far back a hole is filled: its newest HoleMax, and
// never before the retention's cutoff; the older seconds are left (and
// counted). Six hours is a night's stop of a small fleet, or a long
// database outage: at pages of 100 reports it is 216 pages a stream, a
// few minutes of the fill share for a few streams; a longer absence is
// an operator's fill to ask for (POST /archive/fill), for the streams
// that need it.
const HoleMax = 6 * time.Hour

// HoleSweepEvery is how often the HoleFiller sweeps the coverage for
// holes (and once as it starts).
const HoleSweepEvery = 5 * time.Minute

// HoleJobKeep is how long a hole job that ended (done or failed) is kept,
// in the job store and on the status page, before a sweep deletes it.
const HoleJobKeep = 24 * time.Hour

// OperatorJobKeep is how long an operator's fill job (POST /archive/fill,
// streamgate archive fill) that ended (done or failed) is kept, in the
// job store and on the status page, before a sweep deletes it: a week to
// read what it did. A job queued or running is kept until it ends.
const OperatorJobKeep = 7 * 24 * time.Hour

// holeSweepStreams and holeSweepHoles bound one sweep's work: the streams
// whose coverage it reads (one Coverage each, two for a stream whose
// first span in the window starts after the window), and the holes it
// submits.
const (
	holeSweepStreams = 2000
	holeSweepHoles   = 100
)

// holeQueue bounds the chain starts waiting to be looked at; beyond it
// they are dropped (counted as found and left whole: their seconds stay
// a hole the coverage shows).
const holeQueue = 4096

// The states of the hole metrics.
const (
	HoleFound  = "found"  // holes found, seconds to fill (within HoleMax)
	HoleFilled = "filled" // holes whose fill is done, and their seconds
	HoleLeft   = "left"   // seconds not filled: beyond HoleMax or the retention, or of a fill that failed
	HoleFailed = "failed" // holes whose fill failed
)

// HoleMetrics are the hole filler's metrics:
//
//	streamgate_archive_holes_total{state}        holes found, filled, failed
//	streamgate_archive_hole_seconds_total{state} their seconds: found (to fill), filled, left
//	streamgate_archive_hole_sweeps_total{result} sweeps of the coverage: ok, failed
//	streamgate_archive_hole_sweep_streams        streams the last sweep looked at
//	streamgate_archive_hole_jobs_deleted_total   hole jobs deleted HoleJobKeep after they ended
//	streamgate_archive_fill_jobs_deleted_total   operator's fill jobs deleted OperatorJobKeep after they ended
type HoleMetrics struct {
	holes   *prometheus.CounterVec
	seconds *prometheus.CounterVec
	sweeps  *prometheus.CounterVec
	swept   prometheus.Gauge
	pruned  prometheus.Counter
	prunedO prometheus.Counter
}

// NewHoleMetrics registers the hole filler's metrics on reg.
func NewHoleMetrics(reg prometheus.Registerer) (*HoleMetrics, error) {
	m := &HoleMetrics{
		holes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "streamgate_archive_holes_total",
			Help: "Holes in a carried stream's coverage (seconds no replica stored between two of its spans), by state: found, filled (their fill done), failed (their fill failed).",
		}, []string{"state"}),
		seconds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "streamgate_archive_hole_seconds_total",
			Help: "Seconds of coverage holes, by state: found (to fill), filled, left (beyond the bound or the retention, or of a fill that failed).",
		}, []string{"state"}),
		sweeps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "streamgate_archive_hole_sweeps_total",
			Help: "Sweeps of the carried streams' coverage for holes between their spans, by result: ok, failed (the store did not answer).",
		}, []string{"result"}),
		swept: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "streamgate_archive_hole_sweep_streams",
			Help: "Streams whose coverage the last sweep for holes looked at.",
		}),
		pruned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "streamgate_archive_hole_jobs_deleted_total",
			Help: "Hole fill jobs deleted from the job store a while after they ended.",
		}),
		prunedO: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "streamgate_archive_fill_jobs_deleted_total",
			Help: "An operator's fill jobs deleted from the job store a week after they ended.",
		}),
	}
	for _, c := range []prometheus.Collector{m.holes, m.seconds, m.sweeps, m.swept, m.pruned, m.prunedO} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, s := range []string{HoleFound, HoleFilled, HoleFailed} {
		m.holes.WithLabelValues(s)
	}
	for _, s := range []string{HoleFound, HoleFilled, HoleLeft} {
		m.seconds.WithLabelValues(s)
	}
	m.sweeps.WithLabelValues("ok")
	m.sweeps.WithLabelValues("failed")
	return m, nil
}

// sweep counts a sweep and the streams it looked at (failed: it could not list
// them, or read one's coverage), and the hole jobs and the operator's
// jobs it deleted.
func (m *HoleMetrics) sweep(streams int, failed bool, pruned, prunedOperators int) {
	if m == nil {
		return
	}
	result := "ok"
	if failed {
		result = "failed"
	}
	m.sweeps.WithLabelValues(result).Inc()
	m.swept.Set(float64(streams))
	m.pruned.Add(float64(pruned))
	m.prunedO.Add(float64(prunedOperators))
}

func (m *HoleMetrics) add(state string, holes int, seconds uint64) {
	if m == nil {
		return
	}
	if holes > 0 {
		m.holes.WithLabelValues(state).Add(float64(holes))
	}
	if seconds > 0 && state != HoleFailed {
		m.seconds.WithLabelValues(state).Add(float64(seconds))
	}
}

// HoleFiller finds the holes before each new chain of a stream's claims
// and has the Filler fill them. Make it with NewHoleFiller; ChainStarted
// is safe for concurrent use.
type HoleFiller struct {
	store     Store
	filler    *Filler
	retention time.Duration
	now       func() time.Time
	log       *zap.Logger
	m         *HoleMetrics

	starts     chan chainStart
	overflowed atomic.Bool // logged once

	sweepEvery time.Duration // HoleSweepEvery; shorter in tests
	cursor     StreamRef     // the last stream the last sweep looked at; Run's goroutine only
}

type chainStart struct {
	network string
	stream  feedid.ID
	from    uint32
}

// NewHoleFiller returns a HoleFiller over store handing holes to filler;
// retention is the archive's (0: none), now its clock (nil: time.Now), m
// its metrics (nil: none). Run starts it.
func NewHoleFiller(store Store, filler *Filler, retention time.Duration, now func() time.Time, log *zap.Logger, m *HoleMetrics) *HoleFiller {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = zap.NewNop()
	}
	return &HoleFiller{store: store, filler: filler, retention: retention, now: now, log: log, m: m,
		starts: make(chan chainStart, holeQueue), sweepEvery: HoleSweepEvery}
}

// ChainStarted is Writer.OnChain: the stream's claims start again at from.
// It never blocks.
func (h *HoleFiller) ChainStarted(network string, stream feedid.ID, from uint32) {
	select {
	case h.starts <- chainStart{network, stream, from}:
	default:
		if h.overflowed.CompareAndSwap(false, true) {
			h.log.Warn("archive: too many streams started again at once; the holes before some are not filled (logged once)",
				zap.Int("queue", holeQueue))
		}
	}
}

// JobDone is Filler.OnDone: it counts the hole jobs this process ended.
func (h *HoleFiller) JobDone(p FillProgress) {
	if !p.Hole {
		return
	}
	switch p.State {
	case FillDone:
		h.m.add(HoleFilled, 1, p.Seconds())
	case FillFailed:
		h.m.add(HoleFailed, 1, 0)
		h.m.add(HoleLeft, 0, p.Seconds()-min(p.Covered, p.Seconds()))
	}
}

// Run looks at each chain start, and sweeps the coverage as it starts and
// every HoleSweepEvery, until ctx ends.
func (h *HoleFiller) Run(ctx context.Context) {
	h.sweep(ctx)
	tick := time.NewTicker(h.sweepEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			h.sweep(ctx)
		case s := <-h.starts:
			if err := h.find(ctx, s); err != nil && ctx.Err() == nil {
				h.log.Warn("archive: the coverage before a stream's new span could not be read; a hole there is not filled",
					zap.String("network", s.network), zap.String("feedID", string(s.stream)), zap.Uint32("from", s.from), zap.Error(err))
			}
		}
	}
}

// window returns the seconds a hole is filled in, as of now: at most
// HoleMax back from end, never before the retention's cutoff; ok is false
// when none is.
func (h *HoleFiller) window(end uint32) (lo uint32, ok bool) {
	if back := int64(HoleMax / time.Second); int64(end) >= back {
		lo = end + 1 - uint32(back)
	}
	if h.retention > 0 {
		if c := h.now().Add(-h.retention).Unix(); c > int64(lo) {
			if c > int64(end) {
				return 0, false
			}
			lo = uint32(c)
		}
	}
	return lo, true
}

// sweep looks for the holes between the spans of the streams whose
// coverage reaches into the window, at most holeSweepStreams of them
// after the cursor, and submits at most holeSweepHoles; then deletes the
// jobs that ended long enough ago (Filler.PruneEnded). It logs once when it found any.
func (h *HoleFiller) sweep(ctx context.Context) {
	lister, ok := h.store.(StreamLister)
	if !ok || ctx.Err() != nil {
		return
	}
	stop := ctx
	ctx, cancel := context.WithTimeout(ctx, HoleSweepEvery/2)
	defer cancel()
	now := h.now()
	end := uint32(min(max(now.Unix(), 0), 1<<32-1))
	lo, ok := h.window(end)
	if !ok {
		return
	}
	refs, err := lister.CoveredStreams(ctx, lo)
	if err != nil {
		if stop.Err() == nil {
			h.log.Warn("archive: the streams' coverage could not be listed; the sweep for holes is tried again later", zap.Error(err))
		}
		h.m.sweep(0, true, 0, 0)
		return
	}
	// Go on after the stream the last sweep looked at last.
	start := sort.Search(len(refs), func(i int) bool { return refAfter(refs[i], h.cursor) })
	order := append(refs[start:len(refs):len(refs)], refs[:start]...)
	looked, holes, left := 0, 0, uint64(0)
	var seconds uint64
	var failed error
	for _, ref := range order {
		if looked == holeSweepStreams || holes == holeSweepHoles || ctx.Err() != nil {
			break
		}
		looked++
		h.cursor = ref
		found, err := h.streamHoles(ctx, ref, lo, end)
		if err != nil {
			failed = err
			break
		}
		for _, g := range found {
			if holes == holeSweepHoles {
				break
			}
			added, err := h.filler.SubmitHole(ctx, ref.Network, ref.Stream, g.From, g.To)
			if err != nil {
				failed = err
				break
			}
			if !added {
				continue
			}
			holes++
			n := uint64(g.To) - uint64(g.From) + 1
			seconds += n
			h.m.add(HoleFound, 1, n)
			h.m.add(HoleLeft, 0, g.left)
			left += g.left
		}
		if failed != nil {
			break
		}
	}
	pruned, prunedOperators, err := h.filler.PruneEnded(ctx, now)
	if err != nil && failed == nil {
		failed = err
	}
	h.m.sweep(looked, failed != nil, pruned, prunedOperators)
	if failed != nil && stop.Err() == nil {
		h.log.Warn("archive: the sweep for holes in the carried streams' coverage stopped; tried again later",
			zap.Int("streams_looked_at", looked), zap.Error(failed))
	}
	if holes > 0 {
		h.log.Info("archive: holes between the carried streams' spans; they are filled from the upstream",
			zap.Int("holes", holes), zap.Uint64("seconds", seconds), zap.Uint64("seconds_left", left),
			zap.Int("streams_looked_at", looked), zap.Int("streams", len(refs)), zap.Duration("bound", HoleMax))
	}
}

// refAfter reports whether a comes after b in CoveredStreams' order.
func refAfter(a, b StreamRef) bool {
	if a.Network != b.Network {
		return a.Network > b.Network
	}
	return a.Stream > b.Stream // canonical IDs: the order of their bytes
}

// sweptHole is a hole a sweep found, and the seconds before it left
// (beyond the window).
type sweptHole struct {
	Span
	left uint64
}

// streamHoles returns the holes of ref's coverage within [lo, end]: the
// seconds between two of its spans, and those between lo and its first
// span in the window when an older span exists (the seconds before lo
// are left). The seconds after its last span are not a hole: the stream
// goes on there, or stopped.
func (h *HoleFiller) streamHoles(ctx context.Context, ref StreamRef, lo, end uint32) ([]sweptHole, error) {
	spans, err := h.store.Coverage(ctx, ref.Network, ref.Stream, lo, end)
	if err != nil || len(spans) == 0 {
		return nil, err
	}
	var out []sweptHole
	if first := spans[0]; first.From > lo && lo > 0 {
		older, err := h.store.Coverage(ctx, ref.Network, ref.Stream, 0, lo-1)
		if err != nil {
			return nil, err
		}
		if n := len(older); n > 0 {
			out = append(out, sweptHole{Span{lo, first.From - 1}, uint64(lo) - uint64(older[n-1].To) - 1})
		}
	}
	for i := 1; i < len(spans); i++ {
		from, to := max(spans[i-1].To+1, lo), spans[i].From-1
		if from <= to {
			out = append(out, sweptHole{Span: Span{from, to}})
		}
	}
	return out, nil
}

// find looks for the hole before s.from: the seconds after the newest span
// of the stream that ends before it, at most HoleMax back and not before
// the retention's cutoff; and submits its fill.
func (h *HoleFiller) find(ctx context.Context, s chainStart) error {
	if s.from == 0 {
		return nil
	}
	end := s.from - 1
	lo := uint32(0)
	if back := int64(HoleMax / time.Second); int64(s.from) > back {
		lo = s.from - uint32(back)
	}
	if h.retention > 0 {
		if c := h.now().Add(-h.retention).Unix(); c > int64(lo) {
			lo = uint32(min(c, int64(end)+1))
		}
	}
	if lo > end {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	spans, err := h.store.Coverage(ctx, s.network, s.stream, lo, end)
	if err != nil {
		return err
	}
	from, left := lo, uint64(0)
	if n := len(spans); n > 0 {
		last := spans[n-1]
		if last.To >= end {
			return nil // no hole: the new span touches the previous one
		}
		if last.To >= lo {
			from = last.To + 1
		}
	}
	if from == lo {
		// Nothing within the bound: a hole only if the stream was
		// recorded before it.
		if lo == 0 {
			return nil
		}
		older, err := h.store.Coverage(ctx, s.network, s.stream, 0, lo-1)
		if err != nil {
			return err
		}
		if len(older) == 0 {
			return nil // carried for the first time
		}
		left = uint64(lo) - uint64(older[len(older)-1].To) - 1
	}
	seconds := uint64(end) - uint64(from) + 1
	added, err := h.filler.SubmitHole(ctx, s.network, s.stream, from, end)
	if err != nil || !added {
		return err
	}
	h.m.add(HoleFound, 1, seconds)
	h.m.add(HoleLeft, 0, left)
	fields := []zap.Field{zap.String("network", s.network), zap.String("feedID", string(s.stream)),
		zap.Uint32("from", from), zap.Uint32("to", end), zap.Uint64("seconds", seconds)}
	if left > 0 {
		fields = append(fields, zap.Uint64("seconds_left", left), zap.Duration("bound", HoleMax))
	}
	h.log.Info("archive: a hole in a carried stream's coverage; it is filled from the upstream", fields...)
	return nil
}
