package archive

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// gated is a real store whose writes wait at a gate the test opens: the
// Writer's goroutine held in a write while the test fills its queue.
type gated struct {
	Store
	entered chan struct{}
	open    chan struct{}
}

func (g *gated) Write(ctx context.Context, rs []Report) (WriteResult, error) {
	select {
	case g.entered <- struct{}{}:
	default:
	}
	<-g.open
	return g.Store.Write(ctx, rs)
}

// holes records what a Writer's OnDrop is told.
type holes struct {
	mu  sync.Mutex
	got []Report
	why map[string]int
}

func (h *holes) onDrop(network string, stream ID, ts uint32, reason string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.got = append(h.got, Report{Network: network, Stream: stream, ObservationsTimestamp: ts})
	if h.why == nil {
		h.why = map[string]int{}
	}
	h.why[reason]++
}

func (h *holes) snapshot() ([]Report, map[string]int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.got), maps(h.why)
}

func maps(m map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

func key(r Report) Report {
	return Report{Network: r.Network, Stream: r.Stream, ObservationsTimestamp: r.ObservationsTimestamp}
}

// A full queue drops the reports that do not fit, hands exactly those to
// OnDrop, logs once for the episode, and never makes Add wait.
func TestWriterOverflow(t *testing.T) {
	ctx := context.Background()
	m, err := NewMetrics(prometheus.NewRegistry())
	require.NoError(t, err)
	p := openPebble(t, t.TempDir(), m) // the store counts what it writes, the Writer what it drops and its lag
	defer p.Close()
	g := &gated{Store: p, entered: make(chan struct{}, 1), open: make(chan struct{})}
	core, logs := observer.New(zap.InfoLevel)
	var h holes
	w := NewWriter(g, WriterOptions{Queue: 4, Batch: 1, Interval: time.Hour, OnDrop: h.onDrop, Metrics: m, Logger: zap.New(core)})

	require.True(t, w.Add(report(t, "testnet", 1, 100, 1)))
	<-g.entered // the goroutine holds report 100 in a write
	var dropped []Report
	for ts := uint32(101); ts <= 110; ts++ {
		r := report(t, "testnet", 1, ts, 1)
		if ts <= 104 {
			require.True(t, w.Add(r), "queued: %d", ts)
		} else {
			require.False(t, w.Add(r), "dropped: %d", ts)
			dropped = append(dropped, key(r))
		}
	}
	got, why := h.snapshot()
	assert.Equal(t, dropped, got, "OnDrop is told exactly the dropped reports")
	assert.Equal(t, map[string]int{DropQueueFull: 6}, why)
	assert.Equal(t, 6.0, testutil.ToFloat64(m.dropped.WithLabelValues(DropQueueFull)))
	assert.Equal(t, 1, logs.FilterMessageSnippet("queue is full").Len(), "logged once per episode, not per report")

	close(g.open)
	require.NoError(t, w.Flush(ctx))
	require.True(t, w.Add(report(t, "testnet", 1, 111, 1)), "the queue takes reports again")
	require.NoError(t, w.Close(ctx))
	again := logs.FilterMessageSnippet("takes reports again").All()
	require.Len(t, again, 1)
	assert.Equal(t, int64(6), again[0].ContextMap()["dropped"])

	page, err := p.Page(ctx, "testnet", stream(1), 0, 100)
	require.NoError(t, err)
	var stored []uint32
	for _, r := range page {
		stored = append(stored, r.ObservationsTimestamp)
	}
	assert.Equal(t, []uint32{100, 101, 102, 103, 104, 111}, stored)
	assert.Equal(t, int64(6), w.Counts().Written)
	assert.Equal(t, 6.0, testutil.ToFloat64(m.written))
	assert.Equal(t, uint64(6), histCount(t, m.lag), "a lag observed per report written")

	require.False(t, w.Add(report(t, "testnet", 1, 112, 1)), "closed")
	_, why = h.snapshot()
	assert.Equal(t, 1, why[DropClosed])
	bad := report(t, "testnet", 1, 113, 1)
	bad.FullReport = nil
	w2 := NewWriter(p, WriterOptions{OnDrop: h.onDrop})
	require.False(t, w2.Add(bad), "a report no store takes is refused at once")
	require.NoError(t, w2.Close(ctx))
	_, why = h.snapshot()
	assert.Equal(t, 1, why[DropInvalid])
}

func histCount(t *testing.T, h prometheus.Histogram) uint64 {
	t.Helper()
	var pb = &dtoMetric{}
	require.NoError(t, h.Write(&pb.Metric))
	return pb.Metric.GetHistogram().GetSampleCount()
}

// A PostgreSQL server stopped while reports are written: the failed writes
// are counted by kind, the batches dropped as holes after their retries,
// and writing resumes once the server is back. Every report added is
// either stored or told to OnDrop.
func TestWriterPostgresDown(t *testing.T) {
	ctx := context.Background()
	pg, srv := ownPG(t) // stopped and restarted: a server of its own
	m, err := NewMetrics(prometheus.NewRegistry())
	require.NoError(t, err)
	store := openPG(t, pg.database(t), m)
	var h holes
	core, logs := observer.New(zap.InfoLevel)
	w := NewWriter(store, WriterOptions{Batch: 10, Interval: 10 * time.Millisecond, Retries: 2,
		Backoff: 10 * time.Millisecond, Timeout: 2 * time.Second, OnDrop: h.onDrop, Metrics: m, Logger: zap.New(core)})
	defer w.Close(ctx)

	ts := uint32(86400*20000 + 1)
	var added []Report
	add := func(n int) {
		for range n {
			r := report(t, "testnet", 1, ts, 1)
			ts++
			require.True(t, w.Add(r))
			added = append(added, key(r))
		}
	}
	add(20)
	require.NoError(t, w.Flush(ctx))
	require.Equal(t, int64(20), w.Counts().Written)

	srv.Stop()
	for w.Counts().Dropped < 30 { // batches fail, are retried, then dropped
		add(10)
		require.NoError(t, w.Flush(ctx))
	}
	assert.GreaterOrEqual(t, w.Counts().Errors, int64(9), "three tries per dropped batch")
	assert.Positive(t, testutil.ToFloat64(m.errors.WithLabelValues("write", "unavailable")), "counted as unavailable")
	assert.Equal(t, 1, logs.FilterMessageSnippet("the store fails writes").Len(), "logged once for the episode")
	_, why := h.snapshot()
	assert.Equal(t, int(w.Counts().Dropped), why[DropStoreError])

	srv.Restart()
	before := w.Counts().Written
	require.Eventually(t, func() bool {
		add(5)
		_ = w.Flush(ctx)
		return w.Counts().Written > before
	}, 60*time.Second, 50*time.Millisecond, "writing resumes once the server is back")
	add(5)
	require.NoError(t, w.Flush(ctx))
	assert.Equal(t, 1, logs.FilterMessageSnippet("takes reports again").Len())

	// Every report added is stored or a hole, never both, never neither.
	lost, _ := h.snapshot()
	lostSet := map[uint32]bool{}
	for _, r := range lost {
		lostSet[r.ObservationsTimestamp] = true
	}
	page, err := store.Page(ctx, "testnet", stream(1), 0, 100000)
	require.NoError(t, err)
	storedSet := map[uint32]bool{}
	for _, r := range page {
		storedSet[r.ObservationsTimestamp] = true
		assert.False(t, lostSet[r.ObservationsTimestamp], "stored and told lost: %d", r.ObservationsTimestamp)
	}
	for _, r := range added {
		assert.True(t, storedSet[r.ObservationsTimestamp] || lostSet[r.ObservationsTimestamp], "neither stored nor a hole: %d", r.ObservationsTimestamp)
	}
	assert.Equal(t, int64(len(page)), w.Counts().Written)
	assert.Equal(t, len(added), len(page)+len(lost))
}

type dtoMetric struct{ Metric dto.Metric }

// failing is a real store whose writes fail while fail is set.
type failing struct {
	Store
	fail atomic.Bool
}

func (f *failing) Write(ctx context.Context, rs []Report) (WriteResult, error) {
	if f.fail.Load() {
		return WriteResult{}, errors.New("write refused by the test")
	}
	return f.Store.Write(ctx, rs)
}

// The span of an answer is added to its stream's coverage once every one
// of its reports is stored, and never when they were dropped: coverage
// never claims a report the store does not hold.
func TestWriterAddCovered(t *testing.T) {
	ctx := context.Background()
	p := openPebble(t, t.TempDir(), nil)
	defer p.Close()
	f := &failing{Store: p}
	var h holes
	w := NewWriter(f, WriterOptions{Batch: 3, Interval: time.Hour, Retries: -1, OnDrop: h.onDrop})
	defer w.Close(ctx)

	page := func(from, to uint32) []Report {
		var rs []Report
		for ts := from; ts <= to; ts++ {
			rs = append(rs, report(t, "testnet", 1, ts, 1))
		}
		return rs
	}
	require.True(t, w.AddCovered(page(100, 109), "testnet", stream(1), Span{From: 100, To: 109}))
	require.NoError(t, w.Flush(ctx))
	spans, err := p.Coverage(ctx, "testnet", stream(1), 0, 1000)
	require.NoError(t, err)
	assert.Equal(t, []Span{{100, 109}}, spans, "stored, then covered (ten reports in batches of three)")
	assert.Equal(t, int64(10), w.Counts().Written)

	f.fail.Store(true)
	require.True(t, w.AddCovered(page(200, 204), "testnet", stream(1), Span{From: 200, To: 204}))
	require.NoError(t, w.Flush(ctx))
	spans, err = p.Coverage(ctx, "testnet", stream(1), 0, 1000)
	require.NoError(t, err)
	assert.Equal(t, []Span{{100, 109}}, spans, "dropped: not covered")
	lost, why := h.snapshot()
	assert.Len(t, lost, 5)
	assert.Equal(t, map[string]int{DropStoreError: 5}, why)
	assert.NotEmpty(t, w.Health())

	f.fail.Store(false)
	require.False(t, w.AddCovered(page(300, 301), "testnet", stream(2), Span{From: 300, To: 301}), "reports of another stream than the span's")
	require.True(t, w.AddCovered(page(110, 112), "testnet", stream(1), Span{From: 110, To: 112}))
	require.NoError(t, w.Flush(ctx))
	spans, err = p.Coverage(ctx, "testnet", stream(1), 0, 1000)
	require.NoError(t, err)
	assert.Equal(t, []Span{{100, 112}}, spans, "merged with the span it touches")
	assert.Empty(t, w.Health())
}
