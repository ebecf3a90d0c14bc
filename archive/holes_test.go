package archive

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

// The hole before a stream's new chain is the seconds after its previous
// span, at most HoleMax back and never before the retention's cutoff
// (the rest counted left); none when the stream was never recorded, or
// when the new span touches the previous one; one job per hole.
func TestHoleFillerFindsTheHoleBeforeANewChain(t *testing.T) {
	ctx := context.Background()
	p := openPebble(t, t.TempDir(), nil)
	defer p.Close()
	noPages := func(context.Context, string, ID, uint32, int) ([]Report, error) {
		return nil, errors.New("not run in this test")
	}
	now := time.Unix(1_800_000_000, 0)
	f := NewFiller(p, p, noPages, FillerOptions{Now: func() time.Time { return now }})
	reg := prometheus.NewRegistry()
	m, err := NewHoleMetrics(reg)
	require.NoError(t, err)
	retention := 30 * 24 * time.Hour
	h := NewHoleFiller(p, f, retention, func() time.Time { return now }, nil, m)
	base := uint32(now.Unix()) - 3*24*3600
	max := uint32(HoleMax / time.Second)

	jobs := func() []FillJob {
		var out []FillJob
		for _, pr := range f.Progress() {
			out = append(out, pr.FillJob)
		}
		return out
	}
	span := func(s ID, from, to uint32) { require.NoError(t, p.AddCoverage(ctx, "testnet", s, Span{from, to})) }
	find := func(s ID, from uint32) {
		t.Helper()
		require.NoError(t, h.find(ctx, chainStart{"testnet", s, from}))
	}
	count := func(state string) (float64, float64) {
		return testutil.ToFloat64(m.holes.WithLabelValues(state)), testutil.ToFloat64(m.seconds.WithLabelValues(state))
	}

	// Carried for the first time: no hole.
	span(stream(1), base+200, base+210)
	find(stream(1), base+200)
	assert.Empty(t, jobs())

	// The new span touches the previous one: no hole.
	span(stream(1), base+211, base+220)
	find(stream(1), base+211)
	assert.Empty(t, jobs())

	// A stop of 79 seconds.
	span(stream(1), base+300, base+301)
	find(stream(1), base+300)
	require.Len(t, jobs(), 1)
	j := jobs()[0]
	assert.Equal(t, []uint32{base + 221, base + 299}, []uint32{j.From, j.To})
	assert.True(t, j.Hole)
	holes, secs := count(HoleFound)
	assert.Equal(t, []float64{1, 79}, []float64{holes, secs})

	// The same hole again (another replica's claims, a second look): one
	// job.
	find(stream(1), base+300)
	assert.Len(t, jobs(), 1)

	// A stop longer than HoleMax: its newest HoleMax filled, the rest
	// left.
	span(stream(2), base, base+10)
	from := base + 11 + max + 500
	span(stream(2), from, from+1)
	find(stream(2), from)
	require.Len(t, jobs(), 2)
	j = jobs()[1]
	assert.Equal(t, []uint32{from - max, from - 1}, []uint32{j.From, j.To})
	_, left := count(HoleLeft)
	assert.Equal(t, float64(500), left)

	// Never before the retention's cutoff.
	cutoff := uint32(now.Add(-retention).Unix())
	span(stream(3), cutoff-100, cutoff-50)
	span(stream(3), cutoff+60, cutoff+70)
	find(stream(3), cutoff+60)
	require.Len(t, jobs(), 3)
	j = jobs()[2]
	assert.Equal(t, []uint32{cutoff, cutoff + 59}, []uint32{j.From, j.To})
}

// A hole's job asks pages no longer than the hole, so that a full one
// proves it at once; a short page of seconds too recent to be settled
// proves nothing yet (the upstream may still publish one): the job waits,
// not failed, asking again, until a page proves the hole.
func TestFillHoleWaitsForAShortPageToSettle(t *testing.T) {
	p := openPebble(t, t.TempDir(), nil)
	defer p.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var clock atomic.Int64
	clock.Store(1_800_000_000)
	now := func() time.Time { return time.Unix(clock.Load(), 0) }
	var limits []int
	var mu sync.Mutex
	missing := uint32(0) // a second the upstream lacks
	pages := func(_ context.Context, network string, s ID, start uint32, limit int) ([]Report, error) {
		mu.Lock()
		limits = append(limits, limit)
		mu.Unlock()
		var out []Report
		for ts := start; len(out) < limit && int64(ts) <= clock.Load(); ts++ {
			if ts != missing {
				out = append(out, report(t, network, 1, ts, 1))
			}
		}
		return out, nil
	}
	var done []FillProgress
	f := NewFiller(p, p, pages, FillerOptions{Logger: zaptest.NewLogger(t), Now: now, Backoff: time.Millisecond, OnDone: func(fp FillProgress) {
		mu.Lock()
		done = append(done, fp)
		mu.Unlock()
	}})
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		f.Run(ctx)
	}()
	defer func() { cancel(); <-ran }() // before the store closes
	state := func(id string) FillProgress {
		for _, fp := range f.Progress() {
			if fp.ID == id {
				return fp
			}
		}
		return FillProgress{}
	}

	// A whole hole of 10 seconds, ended 3 s ago: one full page of 10.
	end := uint32(clock.Load()) - 3
	added, err := f.SubmitHole(ctx, "testnet", stream(1), end-9, end)
	require.NoError(t, err)
	require.True(t, added)
	id := "hole-testnet-" + string(stream(1)) + "-" + strconv.Itoa(int(end-9))
	require.Eventually(t, func() bool { return state(id).State == FillDone }, 10*time.Second, time.Millisecond)
	mu.Lock()
	assert.Equal(t, []int{10}, limits, "one page, as long as the hole")
	mu.Unlock()
	covered, err := Covered(ctx, p, "testnet", stream(1), end-9, end)
	require.NoError(t, err)
	assert.True(t, covered)

	// A hole up to the present that the upstream lacks a second of: its
	// page is short, and too recent to prove anything.
	clock.Add(20)
	end = uint32(clock.Load())
	mu.Lock()
	missing, limits = end-5, nil
	mu.Unlock()
	added, err = f.SubmitHole(ctx, "testnet", stream(1), end-9, end)
	require.NoError(t, err)
	require.True(t, added)
	id = "hole-testnet-" + string(stream(1)) + "-" + strconv.Itoa(int(end-9))
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(limits) >= 3
	}, 10*time.Second, time.Millisecond, "asked again while unsettled")
	assert.Equal(t, FillRunning, state(id).State, "waiting, not failed")
	covered, err = Covered(ctx, p, "testnet", stream(1), end-9, end)
	require.NoError(t, err)
	assert.False(t, covered, "nothing proved by a short page of recent seconds")

	clock.Add(int64(FillSettle / time.Second)) // settled
	require.Eventually(t, func() bool { return state(id).State == FillDone }, 10*time.Second, time.Millisecond)
	covered, err = Covered(ctx, p, "testnet", stream(1), end-9, end)
	require.NoError(t, err)
	assert.True(t, covered)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(done) == 2
	}, 10*time.Second, time.Millisecond, "OnDone told of both (after their state is saved)")
}
