package archive

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

// runHoles runs h until the test ends (before its store closes).
func runHoles(t *testing.T, h *HoleFiller) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); h.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// waitCovered waits until one span of stream's coverage holds [from, to].
func waitCovered(t *testing.T, s Store, i int, from, to uint32) {
	t.Helper()
	require.Eventually(t, func() bool {
		ok, err := Covered(context.Background(), s, "testnet", stream(i), from, to)
		require.NoError(t, err)
		return ok
	}, 30*time.Second, 5*time.Millisecond, "stream %d covered over [%d, %d]", i, from, to)
}

// The holes between a stream's older spans, which no new chain looks at
// (a fill that failed or never ran, a span recorded later between two
// others), are found by the sweep the HoleFiller runs as it starts, and
// filled: each page asked at a hole's start, within HoleMax (the older
// seconds left) and never for a stream whose coverage ends before it.
func TestHoleSweepFillsHolesBetweenOlderSpans(t *testing.T) {
	fillStores(t, func(t *testing.T, s Store, jobs JobStore) {
		ctx := context.Background()
		now := fillTime()
		n := uint32(now.Unix())
		max := uint32(HoleMax / time.Second)
		span := func(i int, from, to uint32) {
			require.NoError(t, s.AddCoverage(ctx, "testnet", stream(i), Span{from, to}))
		}
		// Stream 1: three spans, two holes between them, all older than
		// any chain this process will start.
		span(1, n-3000, n-2001)
		span(1, n-1900, n-1001)
		span(1, n-900, n-100)
		// Stream 2: a span beyond HoleMax, a hole across its start, a
		// span within it.
		span(2, n-max-1000, n-max-501)
		span(2, n-max+100, n-max+200)
		// Stream 3: every span ends before HoleMax: not looked at.
		span(3, n-max-5000, n-max-4001)
		span(3, n-max-3000, n-max-2001)

		up := &upstreamPages{t: t, network: "testnet", stream: stream(1), seconds: history(n-3000, n-100)}
		f := NewFiller(s, jobs, up.page, FillerOptions{PageLimit: 100, Now: fillTime, Logger: zaptest.NewLogger(t)})
		reg := prometheus.NewRegistry()
		m, err := NewHoleMetrics(reg)
		require.NoError(t, err)
		var h *HoleFiller
		f.o.OnDone = func(p FillProgress) { h.JobDone(p) }
		h = NewHoleFiller(s, f, 30*24*time.Hour, fillTime, zaptest.NewLogger(t), m)
		t.Cleanup(runFiller(t, f))
		runHoles(t, h)

		waitCovered(t, s, 1, n-3000, n-100)
		waitCovered(t, s, 2, n-max+1, n-max+200)
		assert.Equal(t, []uint32{n - 2000, n - 1000, n - max + 1}, up.calls(), "one page at each hole's start")
		spans, err := s.Coverage(ctx, "testnet", stream(3), 0, n)
		require.NoError(t, err)
		assert.Len(t, spans, 2, "a stream whose coverage ends before HoleMax is left")
		assert.Equal(t, float64(3), testutil.ToFloat64(m.holes.WithLabelValues(HoleFound)))
		assert.Equal(t, float64(100+100+99), testutil.ToFloat64(m.seconds.WithLabelValues(HoleFound)))
		assert.Equal(t, float64(501), testutil.ToFloat64(m.seconds.WithLabelValues(HoleLeft)), "stream 2's seconds before HoleMax")
		require.Eventually(t, func() bool { return testutil.ToFloat64(m.holes.WithLabelValues(HoleFilled)) == 3 },
			30*time.Second, 5*time.Millisecond)
	})
}

// A hole whose fill failed (the upstream refused it past the retries) is
// found again by the next sweep and filled then; a hole that appears
// between two spans after a sweep is found by the next.
func TestHoleSweepRetriesAFailedFill(t *testing.T) {
	fillStores(t, func(t *testing.T, s Store, jobs JobStore) {
		ctx := context.Background()
		now := fillTime()
		n := uint32(now.Unix())
		span := func(from, to uint32) { require.NoError(t, s.AddCoverage(ctx, "testnet", stream(1), Span{from, to})) }
		span(n-1000, n-801)
		span(n-700, n-601)

		up := &upstreamPages{t: t, network: "testnet", stream: stream(1), seconds: history(n-1000, n-100)}
		var refuse atomic.Bool
		refuse.Store(true)
		up.block = func(context.Context, int) error {
			if refuse.Load() {
				return errors.New("upstream: 503 Service Unavailable")
			}
			return nil
		}
		f := NewFiller(s, jobs, up.page, FillerOptions{PageLimit: 100, Retries: 2, Backoff: time.Millisecond, Now: fillTime,
			Logger: zaptest.NewLogger(t)})
		m, err := NewHoleMetrics(prometheus.NewRegistry())
		require.NoError(t, err)
		var h *HoleFiller
		f.o.OnDone = func(p FillProgress) { h.JobDone(p) }
		h = NewHoleFiller(s, f, 0, fillTime, zaptest.NewLogger(t), m)
		h.sweepEvery = 10 * time.Millisecond
		t.Cleanup(runFiller(t, f))

		id := "hole-testnet-" + string(stream(1)) + "-" + strconv.FormatUint(uint64(n-800), 10)
		runHoles(t, h)
		require.Eventually(t, func() bool { return testutil.ToFloat64(m.holes.WithLabelValues(HoleFailed)) >= 1 },
			30*time.Second, 5*time.Millisecond, "the hole's fill failed")
		refuse.Store(false)
		waitCovered(t, s, 1, n-1000, n-601)
		waitFill(t, f, id, FillDone)

		// A span recorded later, after a hole: found by a later sweep.
		span(n-500, n-401)
		waitCovered(t, s, 1, n-1000, n-401)
		assert.Positive(t, testutil.ToFloat64(m.sweeps.WithLabelValues("ok")))
	})
}

// The hole jobs that ended more than HoleJobKeep ago, and an operator's
// that ended more than OperatorJobKeep ago, are deleted by a sweep, from
// the job store and the Filler's view; the recent ones, an operator's of
// two days, and the ones queued or running however old are kept.
func TestHoleSweepDeletesOldHoleJobs(t *testing.T) {
	fillStores(t, func(t *testing.T, s Store, jobs JobStore) {
		ctx := context.Background()
		var clock atomic.Int64
		clock.Store(fillTime().Unix())
		now := func() time.Time { return time.Unix(clock.Load(), 0) }
		at := func(d time.Duration) time.Time { return fillTime().Add(d).UTC() }
		save := func(id string, hole bool, state string, updated time.Time) {
			require.NoError(t, jobs.SaveFill(ctx, FillProgress{
				FillJob: FillJob{ID: id, Network: "testnet", Stream: stream(1), From: 1, To: 2, Created: updated, Hole: hole},
				State:   state, Updated: updated}))
		}
		save("hole-old-done", true, FillDone, at(-25*time.Hour))
		save("hole-old-failed", true, FillFailed, at(-30*time.Hour))
		save("hole-recent-done", true, FillDone, at(-time.Hour))
		save("operator-old-done", false, FillDone, at(-48*time.Hour))
		save("operator-8d-done", false, FillDone, at(-8*24*time.Hour))
		save("operator-9d-failed", false, FillFailed, at(-9*24*time.Hour))
		noPages := func(context.Context, string, ID, uint32, int) ([]Report, error) {
			return nil, errors.New("not run in this test")
		}
		f := NewFiller(s, jobs, noPages, FillerOptions{Now: now})
		m, err := NewHoleMetrics(prometheus.NewRegistry())
		require.NoError(t, err)
		h := NewHoleFiller(s, f, 0, now, zaptest.NewLogger(t), m)
		t.Cleanup(runFiller(t, f))
		require.Eventually(t, func() bool { return len(f.Progress()) == 6 }, 30*time.Second, 5*time.Millisecond, "the Filler read the jobs")

		ids := func() []string {
			stored, err := jobs.Fills(ctx)
			require.NoError(t, err)
			var out []string
			for _, p := range stored {
				out = append(out, p.ID)
			}
			return out
		}
		seen := func() []string {
			var out []string
			for _, p := range f.Progress() {
				out = append(out, p.ID)
			}
			return out
		}
		runHoles(t, h)
		want := []string{"operator-old-done", "hole-recent-done"}
		require.Eventually(t, func() bool { return testutil.ToFloat64(m.sweeps.WithLabelValues("ok")) > 0 }, 30*time.Second,
			5*time.Millisecond, "a sweep")
		assert.Equal(t, want, ids(), "the hole jobs ended a day ago and an operator's ended a week ago are deleted from the store")
		assert.Equal(t, want, seen(), "and from the Filler's view")
		assert.Equal(t, float64(2), testutil.ToFloat64(m.pruned))
		assert.Equal(t, float64(2), testutil.ToFloat64(m.prunedO))

		// A job stored again, queued, after it ended is not deleted.
		save("hole-recent-done", true, FillQueued, at(-time.Hour))
		clock.Add(int64(2 * HoleJobKeep / time.Second))
		holes, operators, err := f.PruneEnded(ctx, now())
		require.NoError(t, err)
		assert.Zero(t, holes)
		assert.Zero(t, operators, "the operator's job ended four days ago is kept")
		assert.Equal(t, want, ids())
		clock.Add(int64(4 * 24 * time.Hour / time.Second))
		holes, operators, err = f.PruneEnded(ctx, now())
		require.NoError(t, err)
		assert.Equal(t, 1, operators, "the operator's job ended more than a week ago is deleted")
		assert.NotContains(t, ids(), "operator-old-done")

		// An operator's job queued or running is never deleted, however
		// old (a Filler not run, so that they stay as saved).
		save("operator-queued", false, FillQueued, at(-30*24*time.Hour))
		save("operator-running", false, FillRunning, at(-30*24*time.Hour))
		idle := NewFiller(s, jobs, noPages, FillerOptions{Now: now})
		holes, operators, err = idle.PruneEnded(ctx, now())
		require.NoError(t, err)
		assert.Zero(t, operators)
		assert.Subset(t, ids(), []string{"operator-queued", "operator-running"})
	})
}
