package archive

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// chainStarts records what a Writer's OnChain is told.
type chainStarts struct {
	mu  sync.Mutex
	got []uint32
}

func (c *chainStarts) onChain(_ string, _ ID, from uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, from)
}

func (c *chainStarts) snapshot() []uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]uint32(nil), c.got...)
}

// The stream's reports prove spans only between two reports the Writer
// stored one after the other, the second vouched to follow the first:
// never across a report it dropped (a store error), one it was never
// given, or one the hub did not vouch for. A span the store refused to
// record is recorded at the next recording. OnChain is told the first
// second of each chain once its first span is recorded.
func TestWriterStreamClaims(t *testing.T) {
	ctx := context.Background()
	p := openPebble(t, t.TempDir(), nil)
	defer p.Close()
	f := &failing{Store: p}
	var starts chainStarts
	w := NewWriter(f, WriterOptions{Batch: 1000, Interval: time.Hour, CoverEvery: time.Hour, Retries: -1, OnChain: starts.onChain})
	defer w.Close(ctx)
	add := func(ts, follows uint32) {
		t.Helper()
		require.True(t, w.AddFollowing(report(t, "testnet", 1, ts, 1), follows))
	}
	coverage := func() []Span {
		t.Helper()
		spans, err := p.Coverage(ctx, "testnet", stream(1), 0, 1000)
		require.NoError(t, err)
		return spans
	}

	add(100, 0) // the first: follows nothing
	require.NoError(t, w.Flush(ctx))
	assert.Empty(t, coverage(), "one report proves no span")
	for ts := uint32(101); ts <= 110; ts++ {
		add(ts, ts-1)
	}
	add(112, 111) // 111 was never given: a break
	add(113, 112)
	add(115, 0) // the hub vouched for nothing (114 unfilled): a break
	add(116, 115)
	require.NoError(t, w.Flush(ctx))
	assert.Equal(t, []Span{{100, 110}, {112, 113}, {115, 116}}, coverage())
	assert.Equal(t, []uint32{100, 112, 115}, starts.snapshot())

	// A batch the store fails is dropped: the next report follows one it
	// does not hold.
	f.fail.Store(true)
	add(117, 116)
	require.NoError(t, w.Flush(ctx))
	f.fail.Store(false)
	add(118, 117)
	add(119, 118)
	require.NoError(t, w.Flush(ctx))
	assert.Equal(t, []Span{{100, 110}, {112, 113}, {115, 116}, {118, 119}}, coverage(), "never across the dropped report")

	// The store fails the recording of a span (not the reports): it is
	// recorded at the next one, merged with the span it touches.
	add(120, 119)
	require.NoError(t, w.Flush(ctx))
	cf := &coverFailing{Store: p}
	cf.setFail(true)
	w2 := NewWriter(cf, WriterOptions{Batch: 1000, Interval: time.Hour, CoverEvery: time.Hour})
	defer w2.Close(ctx)
	require.True(t, w2.AddFollowing(report(t, "testnet", 1, 200, 1), 0))
	require.True(t, w2.AddFollowing(report(t, "testnet", 1, 201, 1), 200))
	require.NoError(t, w2.Flush(ctx))
	assert.Equal(t, []Span{{100, 110}, {112, 113}, {115, 116}, {118, 120}}, coverage(), "the span's recording failed")
	cf.setFail(false)
	require.True(t, w2.AddFollowing(report(t, "testnet", 1, 202, 1), 201))
	require.NoError(t, w2.Flush(ctx))
	assert.Equal(t, []Span{{100, 110}, {112, 113}, {115, 116}, {118, 120}, {200, 202}}, coverage(), "recorded at the next recording")
	assert.Equal(t, []uint32{100, 112, 115, 118}, starts.snapshot())
}

// coverFailing is a real store whose AddCoverage fails while fail is set.
type coverFailing struct {
	Store
	mu   sync.Mutex
	fail bool
}

func (c *coverFailing) setFail(v bool) {
	c.mu.Lock()
	c.fail = v
	c.mu.Unlock()
}

func (c *coverFailing) AddCoverage(ctx context.Context, network string, stream ID, span Span) error {
	c.mu.Lock()
	fail := c.fail
	c.mu.Unlock()
	if fail {
		return context.DeadlineExceeded
	}
	return c.Store.AddCoverage(ctx, network, stream, span)
}

// coverCounting is the real Pebble store counting the coverage calls the
// Writer makes, and failing AddCoverages while fail is set.
type coverCounting struct {
	*Pebble
	mu          sync.Mutex
	single      int // AddCoverage calls
	batches     []int
	fail        bool
	failedBatch int
}

func (c *coverCounting) AddCoverage(ctx context.Context, network string, stream ID, span Span) error {
	c.mu.Lock()
	c.single++
	c.mu.Unlock()
	return c.Pebble.AddCoverage(ctx, network, stream, span)
}

func (c *coverCounting) AddCoverages(ctx context.Context, spans []StreamSpan) error {
	c.mu.Lock()
	fail := c.fail
	if fail {
		c.failedBatch++
	} else {
		c.batches = append(c.batches, len(spans))
	}
	c.mu.Unlock()
	if fail {
		return context.DeadlineExceeded
	}
	return c.Pebble.AddCoverages(ctx, spans)
}

func (c *coverCounting) counts() (single int, batches []int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.single, append([]int(nil), c.batches...)
}

// A recording of the stream's claims on Pebble is one synced batch for
// every stream, not an AddCoverage per stream: the spans of one stream in
// one round (a break between them) recorded in order, merged with what
// the store holds and with each other; OnChain told each chain's first
// second once its span is recorded. A batch the store fails records
// nothing, and the whole round is recorded at the next.
func TestWriterRecordsARoundInOneBatch(t *testing.T) {
	ctx := context.Background()
	p := openPebble(t, t.TempDir(), nil)
	defer p.Close()
	c := &coverCounting{Pebble: p}
	var starts chainStarts
	w := NewWriter(c, WriterOptions{Batch: 1000, Interval: time.Hour, CoverEvery: time.Hour, OnChain: starts.onChain})
	defer w.Close(ctx)
	add := func(i int, ts, follows uint32) {
		t.Helper()
		require.True(t, w.AddFollowing(report(t, "testnet", i, ts, 1), follows))
	}
	coverage := func(i int) []Span {
		t.Helper()
		spans, err := p.Coverage(ctx, "testnet", stream(i), 0, 1000)
		require.NoError(t, err)
		return spans
	}
	require.NoError(t, p.AddCoverage(ctx, "testnet", stream(3), Span{90, 99})) // held before

	for i := 1; i <= 3; i++ {
		add(i, 100, 0)
		for ts := uint32(101); ts <= 105; ts++ {
			add(i, ts, ts-1)
		}
	}
	add(2, 108, 0) // a break: stream 2's second span of the round
	add(2, 109, 108)
	require.NoError(t, w.Flush(ctx))
	single, batches := c.counts()
	assert.Zero(t, single, "no AddCoverage per stream")
	assert.Equal(t, []int{4}, batches, "one batch of the round's four spans")
	assert.Equal(t, []Span{{100, 105}}, coverage(1))
	assert.Equal(t, []Span{{100, 105}, {108, 109}}, coverage(2))
	assert.Equal(t, []Span{{90, 105}}, coverage(3), "merged with the span held")
	got := starts.snapshot()
	assert.ElementsMatch(t, []uint32{100, 100, 100, 108}, got)

	// The next round extends the chains: one batch again.
	add(1, 106, 105)
	add(3, 106, 105)
	add(2, 110, 109)
	require.NoError(t, w.Flush(ctx))
	_, batches = c.counts()
	assert.Equal(t, []int{4, 3}, batches)
	assert.Equal(t, []Span{{100, 106}}, coverage(1))
	assert.Equal(t, []Span{{100, 105}, {108, 110}}, coverage(2))

	// A failed batch records nothing; the next round records it all.
	c.mu.Lock()
	c.fail = true
	c.mu.Unlock()
	add(1, 107, 106)
	add(1, 120, 0)
	add(1, 121, 120)
	require.NoError(t, w.Flush(ctx))
	assert.Equal(t, []Span{{100, 106}}, coverage(1), "nothing recorded")
	assert.Len(t, starts.snapshot(), 4, "no chain told before its span is recorded")
	c.mu.Lock()
	c.fail = false
	c.mu.Unlock()
	require.NoError(t, w.Flush(ctx))
	assert.Equal(t, []Span{{100, 107}, {120, 121}}, coverage(1))
	assert.Equal(t, uint32(120), starts.snapshot()[4])
	single, batches = c.counts()
	assert.Zero(t, single)
	assert.Equal(t, []int{4, 3, 2}, batches)
}
