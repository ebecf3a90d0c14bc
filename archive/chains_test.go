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
