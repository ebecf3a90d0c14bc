package proxy

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/archive"
	"streamgate/feedid"
)

// TestArchiveHoldsAnswersWhileOpening: while the store is being opened,
// the reports the REST answers bring are held, at most openingMax,
// and written once it opens, in one go; what is beyond the bound is
// counted as the Writer's drops are; once open, nothing is held any
// more (the caller writes at once).
func TestArchiveHoldsAnswersWhileOpening(t *testing.T) {
	a := &Archive{}
	stream := feedid.ID(fmt.Sprintf("0x%064x", 7))
	rep := func(ts uint32) archive.Report {
		return archive.Report{Network: "testnet", Stream: stream, ValidFromTimestamp: ts - 1, ObservationsTimestamp: ts, FullReport: []byte{1, 2, 3, byte(ts)}}
	}
	assert.False(t, a.hold(heldWrite{reports: []archive.Report{rep(1)}}), "not opening: nothing to hold for")

	a.Waiting("postgres: connection refused")
	const base = 1_000_000
	for i := range openingMax {
		require.True(t, a.hold(heldWrite{reports: []archive.Report{rep(base + uint32(i))}}))
	}
	require.True(t, a.hold(heldWrite{reports: []archive.Report{rep(base + openingMax), rep(base + openingMax + 1)}}),
		"beyond the bound: not held, counted")

	p, err := archive.OpenPebble(archive.PebbleOptions{Dir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	w := archive.NewWriter(p, archive.WriterOptions{})
	t.Cleanup(func() { w.Close(context.Background()) })
	a.Open(p, w)
	assert.False(t, a.hold(heldWrite{reports: []archive.Report{rep(2)}}), "open: the caller writes itself")
	require.NoError(t, w.Flush(context.Background()))

	got := 0
	for start := uint32(base); ; {
		rs, err := p.Page(context.Background(), "testnet", stream, start, 1000)
		require.NoError(t, err)
		for _, r := range rs {
			assert.Equal(t, rep(r.ObservationsTimestamp).FullReport, r.FullReport)
		}
		got += len(rs)
		if len(rs) < 1000 {
			break
		}
		start = rs[len(rs)-1].ObservationsTimestamp + 1
	}
	assert.Equal(t, openingMax, got, "every report held, written once the store opened; none beyond the bound")
	assert.Equal(t, int64(2), w.Counts().Dropped, "the two beyond the bound, counted")
}
