package archive

import (
	"context"
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

// HoleMax bounds how far back a hole is filled: its newest HoleMax, and
// never before the retention's cutoff; the older seconds are left (and
// counted). Six hours is a night's stop of a small fleet, or a long
// database outage: at pages of 100 reports it is 216 pages a stream, a
// few minutes of the fill share for a few streams; a longer absence is
// an operator's fill to ask for (POST /archive/fill), for the streams
// that need it.
const HoleMax = 6 * time.Hour

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
type HoleMetrics struct {
	holes   *prometheus.CounterVec
	seconds *prometheus.CounterVec
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
	}
	for _, c := range []prometheus.Collector{m.holes, m.seconds} {
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
	return m, nil
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
		starts: make(chan chainStart, holeQueue)}
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

// Run looks at each chain start until ctx ends.
func (h *HoleFiller) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case s := <-h.starts:
			if err := h.find(ctx, s); err != nil && ctx.Err() == nil {
				h.log.Warn("archive: the coverage before a stream's new span could not be read; a hole there is not filled",
					zap.String("network", s.network), zap.String("feedID", string(s.stream)), zap.Uint32("from", s.from), zap.Error(err))
			}
		}
	}
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
