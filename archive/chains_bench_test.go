package archive

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// BenchmarkWriterStreamClaims: one recording of the stream's claims, 1,000
// streams each with a span to record (what a Writer does every CoverEvery
// at 1,000 streams carried), after the reports are written. ns/op is one
// recording of all 1,000 streams. On Pebble and PostgreSQL, each a
// CoverageBatcher (one write a round), and on PostgreSQL as before it was
// one (postgres-one-by-one: the store's AddCoverages hidden, so the Writer
// records an AddCoverage a stream).
func BenchmarkWriterStreamClaims(b *testing.B) {
	b.Run("pebble", func(b *testing.B) {
		p := openPebble(b, b.TempDir(), nil)
		defer p.Close()
		benchStreamClaims(b, p)
	})
	b.Run("postgres", func(b *testing.B) {
		benchStreamClaims(b, openPG(b, newPG(b).database(b), nil))
	})
	b.Run("postgres-one-by-one", func(b *testing.B) {
		benchStreamClaims(b, struct{ Store }{openPG(b, newPG(b).database(b), nil)})
	})
}

func benchStreamClaims(b *testing.B, store Store) {
	const streams = 1000
	ctx := context.Background()
	w := NewWriter(store, WriterOptions{Queue: 1 << 20, Batch: 1000, Interval: time.Hour, CoverEvery: time.Hour, Timeout: time.Minute})
	defer w.Close(ctx)
	full := realFull(b)
	ts := uint32(time.Now().Unix()) - 100000
	add := func(sec uint32, follows uint32) {
		for i := range streams {
			r := Report{Network: "testnet", Stream: stream(i + 1), ValidFromTimestamp: sec - 1, ObservationsTimestamp: sec, FullReport: full}
			require.True(b, w.AddFollowing(r, follows))
		}
	}
	add(ts, 0)
	require.NoError(b, w.Flush(ctx))
	w.recordClaims(ctx) // every stream's first span recorded
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		ts++
		written := w.Counts().Written
		add(ts, ts-1) // one batch of 1,000, written at once
		for w.Counts().Written < written+streams {
			time.Sleep(time.Millisecond)
		}
		b.StartTimer()
		w.recordClaims(ctx)
	}
	b.StopTimer()
	if n := w.errs.Load(); n != 0 {
		b.Fatalf("%d recordings failed", n)
	}
	spans, err := store.Coverage(ctx, "testnet", stream(1), 0, 4294967295)
	require.NoError(b, err)
	require.Equal(b, []Span{{ts - uint32(b.N), ts}}, spans, "one span, every second")
}
