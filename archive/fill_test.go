package archive

import (
	"context"
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/feedid"
)

// upstreamPages is a PageSource over a fixed history: the reports of one
// stream at the given seconds, answered as the upstream's page endpoint
// does. It counts the pages asked and where.
type upstreamPages struct {
	t       testing.TB
	network string
	stream  feedid.ID
	seconds []uint32 // ascending

	mu     sync.Mutex
	starts []uint32
	// block, when set, is called with the call's index before it answers;
	// an error it returns is the call's.
	block func(ctx context.Context, call int) error
}

func (u *upstreamPages) page(ctx context.Context, network string, stream feedid.ID, start uint32, limit int) ([]Report, error) {
	u.mu.Lock()
	call := len(u.starts)
	u.starts = append(u.starts, start)
	block := u.block
	u.mu.Unlock()
	if block != nil {
		if err := block(ctx, call); err != nil {
			return nil, err
		}
	}
	if network != u.network || stream != u.stream {
		return nil, nil
	}
	i := sort.Search(len(u.seconds), func(i int) bool { return u.seconds[i] >= start })
	var out []Report
	for ; i < len(u.seconds) && len(out) < limit; i++ {
		r := report(u.t, network, 1, u.seconds[i], byte(u.seconds[i]))
		out = append(out, r)
	}
	return out, nil
}

func (u *upstreamPages) calls() []uint32 {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]uint32(nil), u.starts...)
}

// history returns the seconds of [from, to] but those in missing.
func history(from, to uint32, missing ...uint32) []uint32 {
	skip := map[uint32]bool{}
	for _, m := range missing {
		skip[m] = true
	}
	var out []uint32
	for s := from; s <= to; s++ {
		if !skip[s] {
			out = append(out, s)
		}
	}
	return out
}

// fillTime is the clock of the fill tests: well after their spans.
func fillTime() time.Time { return time.Unix(1_800_000_000, 0) }

func waitFill(t *testing.T, f *Filler, id string, state string) FillProgress {
	t.Helper()
	var got FillProgress
	require.Eventually(t, func() bool {
		for _, p := range f.Progress() {
			if p.ID == id {
				got = p
				return p.State == state
			}
		}
		return false
	}, 30*time.Second, 5*time.Millisecond, "job %s never %s", id, state)
	return got
}

func runFiller(t *testing.T, f *Filler) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.Run(ctx) }()
	return func() { cancel(); <-done }
}

func openTestPebble(t *testing.T, dir string) *Pebble {
	t.Helper()
	p, err := OpenPebble(PebbleOptions{Dir: dir})
	require.NoError(t, err)
	return p
}

// fillStores runs body against both stores.
func fillStores(t *testing.T, body func(t *testing.T, s Store, jobs JobStore)) {
	t.Run("pebble", func(t *testing.T) {
		p := openTestPebble(t, t.TempDir())
		t.Cleanup(func() { p.Close() })
		body(t, p, p)
	})
	t.Run("postgres", func(t *testing.T) {
		p := openPG(t, newPG(t).database(t), nil)
		body(t, p, p)
	})
}

// TestFillFetchesEverySecondOnce: a job over a span with holes in the
// upstream's history (seconds that have no report) ends with every
// report of the span stored, the span covered, and each page asked once,
// each starting after the last report of the one before.
func TestFillFetchesEverySecondOnce(t *testing.T) {
	fillStores(t, func(t *testing.T, s Store, jobs JobStore) {
		const from, to = 1_700_000_000, 1_700_000_000 + 249
		up := &upstreamPages{t: t, network: "testnet", stream: stream(1), seconds: history(from-10, to+10, from+3, from+100, to)}
		f := NewFiller(s, jobs, up.page, FillerOptions{PageLimit: 100, Now: fillTime})
		stop := runFiller(t, f)
		defer stop()
		p, err := f.Submit(context.Background(), "testnet", stream(1), from, to)
		require.NoError(t, err)
		done := waitFill(t, f, p.ID, FillDone)
		assert.Equal(t, uint64(250), done.Covered)
		// 247 reports in the span and the one at to+1 after it: pages at from,
		// then after the 100th and the 200th report's seconds.
		assert.Equal(t, []uint32{from, from + 102, from + 202}, up.calls())
		page, err := s.Page(context.Background(), "testnet", stream(1), from, 1000)
		require.NoError(t, err)
		var got []uint32
		for _, r := range page {
			if r.ObservationsTimestamp <= to {
				got = append(got, r.ObservationsTimestamp)
			}
		}
		assert.Equal(t, history(from, to, from+3, from+100, to), got, "every report of the span, once")
		ok, err := Covered(context.Background(), s, "testnet", stream(1), from, to)
		require.NoError(t, err)
		assert.True(t, ok)
	})
}

// TestFillSkipsWhatIsCovered: a span the archive covers already (the
// stream recorded it, or another job fetched it) is never asked again.
func TestFillSkipsWhatIsCovered(t *testing.T) {
	fillStores(t, func(t *testing.T, s Store, jobs JobStore) {
		const from, to = 1_700_000_000, 1_700_000_000 + 299
		ctx := context.Background()
		require.NoError(t, s.AddCoverage(ctx, "testnet", stream(1), Span{From: from + 50, To: from + 199}))
		up := &upstreamPages{t: t, network: "testnet", stream: stream(1), seconds: history(from, to+5)}
		f := NewFiller(s, jobs, up.page, FillerOptions{PageLimit: 100, Now: fillTime})
		stop := runFiller(t, f)
		defer stop()
		p, err := f.Submit(ctx, "testnet", stream(1), from, to)
		require.NoError(t, err)
		waitFill(t, f, p.ID, FillDone)
		// [from, from+49] in one page (its 100 reports also cover the
		// seconds after), then [from+200, to].
		assert.Equal(t, []uint32{from, from + 200}, up.calls())
	})
}

// TestFillResumesAfterARestart: a filler stopped in the middle of a job
// (the process ends) leaves it unfinished in the store; a new filler on
// the same store goes on from the coverage, without asking again for a
// page already answered.
func TestFillResumesAfterARestart(t *testing.T) {
	fillStores(t, func(t *testing.T, s Store, jobs JobStore) {
		const from, to = 1_700_000_000, 1_700_000_000 + 499
		ctx := context.Background()
		up := &upstreamPages{t: t, network: "testnet", stream: stream(1), seconds: history(from, to+5)}
		third := make(chan struct{})
		up.block = func(ctx context.Context, call int) error {
			if call == 2 { // the third page: the process stops while it is asked
				close(third)
				<-ctx.Done()
				return ctx.Err()
			}
			return nil
		}
		f := NewFiller(s, jobs, up.page, FillerOptions{PageLimit: 100, Now: fillTime})
		stop := runFiller(t, f)
		p, err := f.Submit(ctx, "testnet", stream(1), from, to)
		require.NoError(t, err)
		<-third
		stop()
		stored, err := jobs.Fills(ctx)
		require.NoError(t, err)
		require.Len(t, stored, 1)
		assert.Equal(t, FillRunning, stored[0].State, "a stopped job stays unfinished in the store")

		up.mu.Lock()
		up.block = nil
		up.mu.Unlock()
		again := NewFiller(s, jobs, up.page, FillerOptions{PageLimit: 100, Now: fillTime})
		stop = runFiller(t, again)
		defer stop()
		done := waitFill(t, again, p.ID, FillDone)
		assert.Equal(t, uint64(500), done.Covered)
		assert.Equal(t, []uint32{from, from + 100, from + 200, from + 200, from + 300, from + 400}, up.calls(),
			"the page in flight at the stop is asked again, no other")
	})
}

// TestFillFailsAfterItsRetries: an upstream that keeps failing ends the
// job as failed with the error, after the retries, and the runner goes on
// with the next job.
func TestFillFailsAfterItsRetries(t *testing.T) {
	p := openTestPebble(t, t.TempDir())
	defer p.Close()
	const from, to = 1_700_000_000, 1_700_000_000 + 9
	up := &upstreamPages{t: t, network: "testnet", stream: stream(1), seconds: history(from, to+5)}
	var failing atomic.Bool
	failing.Store(true)
	up.block = func(ctx context.Context, call int) error {
		if failing.Load() {
			return errors.New("upstream: 503 Service Unavailable")
		}
		return nil
	}
	f := NewFiller(p, p, up.page, FillerOptions{PageLimit: 100, Retries: 3, Backoff: time.Millisecond, Now: fillTime})
	stop := runFiller(t, f)
	defer stop()
	job, err := f.Submit(context.Background(), "testnet", stream(1), from, to)
	require.NoError(t, err)
	failed := waitFill(t, f, job.ID, FillFailed)
	assert.Contains(t, failed.Error, "503")
	assert.Len(t, up.calls(), 3)
	failing.Store(false)
	next, err := f.Submit(context.Background(), "testnet", stream(1), from, to)
	require.NoError(t, err)
	waitFill(t, f, next.ID, FillDone)
}

// TestFillSubmitBounds: a span after the present is cut to FillSettle
// before it; one that ends before it starts is refused, as is a stream
// that is not one.
func TestFillSubmitBounds(t *testing.T) {
	p := openTestPebble(t, t.TempDir())
	defer p.Close()
	f := NewFiller(p, p, nil, FillerOptions{Now: fillTime})
	now := uint32(fillTime().Unix())
	got, err := f.Submit(context.Background(), "testnet", stream(1), now-600, now+600)
	require.NoError(t, err)
	assert.Equal(t, now-uint32(FillSettle/time.Second), got.To)
	_, err = f.Submit(context.Background(), "testnet", stream(1), now, now+600)
	assert.ErrorIs(t, err, ErrFillSpan)
	_, err = f.Submit(context.Background(), "testnet", feedid.ID("0xABC"), now-600, now-100)
	assert.ErrorIs(t, err, ErrFillSpan)
	_, err = f.Submit(context.Background(), "Test Net", stream(1), now-600, now-100)
	assert.ErrorIs(t, err, ErrFillSpan)
}

// TestFillClaimIsExclusive: on PostgreSQL two replicas cannot run one job
// at once; the claim ends with its release (or its connection).
func TestFillClaimIsExclusive(t *testing.T) {
	u := newPG(t).database(t)
	a, b := openPG(t, u, nil), openPG(t, u, nil)
	ctx := context.Background()
	release, ok, err := a.ClaimFill(ctx, "job-1")
	require.NoError(t, err)
	require.True(t, ok)
	_, ok, err = b.ClaimFill(ctx, "job-1")
	require.NoError(t, err)
	assert.False(t, ok, "a job another replica runs is not claimed")
	releaseOther, ok, err := b.ClaimFill(ctx, "job-2")
	require.NoError(t, err)
	assert.True(t, ok, "another job is")
	releaseOther()
	release()
	release, ok, err = b.ClaimFill(ctx, "job-1")
	require.NoError(t, err)
	assert.True(t, ok, "released, it is claimed again")
	release()
}

func TestHoles(t *testing.T) {
	for _, c := range []struct {
		spans    []Span
		from, to uint32
		want     []Span
	}{
		{nil, 10, 20, []Span{{10, 20}}},
		{[]Span{{0, 100}}, 10, 20, nil},
		{[]Span{{5, 12}, {15, 15}, {19, 30}}, 10, 20, []Span{{13, 14}, {16, 18}}},
		{[]Span{{11, 19}}, 10, 20, []Span{{10, 10}, {20, 20}}},
		{[]Span{{10, 10}}, 10, 10, nil},
		{[]Span{{0, 4294967295}}, 0, 4294967295, nil},
		{nil, 4294967295, 4294967295, []Span{{4294967295, 4294967295}}},
		{[]Span{{0, 4294967294}}, 0, 4294967295, []Span{{4294967295, 4294967295}}},
	} {
		assert.Equal(t, c.want, Holes(c.spans, c.from, c.to), "%v in [%d, %d]", c.spans, c.from, c.to)
	}
}
