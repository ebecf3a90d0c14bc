package archive

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// BenchmarkWriterStreamClaims: one recording of the stream's claims, 1,000
// streams on Pebble each with a span to record (what a Writer does every
// CoverEvery at 1,000 streams carried), after the reports are written.
// ns/op is one recording of all 1,000 streams.
func BenchmarkWriterStreamClaims(b *testing.B) {
	const streams = 1000
	ctx := context.Background()
	p := openPebble(b, b.TempDir(), nil)
	defer p.Close()
	w := NewWriter(p, WriterOptions{Queue: 1 << 20, Batch: 1000, Interval: time.Hour, CoverEvery: time.Hour})
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
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		ts++
		written := w.Written()
		add(ts, ts-1) // one batch of 1,000, written at once
		for w.Written() < written+streams {
			time.Sleep(time.Millisecond)
		}
		b.StartTimer()
		w.recordClaims(ctx)
	}
}
