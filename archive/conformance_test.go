package archive

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/feedid"
)

// conformance runs the behaviour every Store shares against the stores
// open makes, each fresh and empty.
func conformance(t *testing.T, open func(t *testing.T) Store) {
	ctx := context.Background()
	const net = "testnet"

	t.Run("IdempotentWrites", func(t *testing.T) {
		s := open(t)
		batch := []Report{report(t, net, 1, 1000, 1), report(t, net, 1, 1001, 1), report(t, net, 1, 1000, 2)}
		res, err := s.Write(ctx, batch)
		require.NoError(t, err)
		assert.Equal(t, WriteResult{Written: 2, Duplicates: 1}, res, "a key repeated in one batch is a duplicate")
		res, err = s.Write(ctx, batch)
		require.NoError(t, err)
		assert.Equal(t, WriteResult{Written: 0, Duplicates: 3}, res, "a batch written again is all duplicates")
		res, err = s.Write(ctx, []Report{report(t, net, 1, 1001, 3), report(t, net, 1, 1002, 3)})
		require.NoError(t, err)
		assert.Equal(t, WriteResult{Written: 1, Duplicates: 1}, res)
		st, err := s.Stats(ctx)
		require.NoError(t, err)
		assert.Equal(t, int64(3), st.Reports)
		assert.Positive(t, st.BytesOnDisk)
		res, err = s.Write(ctx, nil)
		require.NoError(t, err)
		assert.Equal(t, WriteResult{}, res)
	})

	t.Run("FirstStoredWins", func(t *testing.T) {
		s := open(t)
		_, err := s.Write(ctx, []Report{report(t, net, 1, 1000, 1)})
		require.NoError(t, err)
		_, err = s.Write(ctx, []Report{report(t, net, 1, 1000, 2)})
		require.NoError(t, err)
		r, ok, err := s.Get(ctx, net, stream(1), 1000)
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, report(t, net, 1, 1000, 1), r, "the first stored is kept, byte for byte")
	})

	t.Run("InvalidRefused", func(t *testing.T) {
		s := open(t)
		bad := report(t, net, 1, 1000, 1)
		bad.Stream = "0xAB"
		_, err := s.Write(ctx, []Report{report(t, net, 2, 1000, 1), bad})
		require.Error(t, err)
		_, ok, err := s.Get(ctx, net, stream(2), 1000)
		require.NoError(t, err)
		assert.False(t, ok, "a batch with a bad report writes nothing")
		noNet := report(t, "", 1, 1000, 1)
		_, err = s.Write(ctx, []Report{noNet})
		require.Error(t, err)
		_, _, err = s.Get(ctx, net, "0xzz", 1)
		require.Error(t, err)
	})

	t.Run("GetHitMiss", func(t *testing.T) {
		s := open(t)
		want := report(t, net, 7, 5000, 9)
		_, err := s.Write(ctx, []Report{want})
		require.NoError(t, err)
		got, ok, err := s.Get(ctx, net, stream(7), 5000)
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, want, got)
		assert.Equal(t, string(want.JSON()), string(got.JSON()))
		for _, miss := range []struct {
			i  int
			ts uint32
		}{{7, 4999}, {7, 5001}, {8, 5000}} {
			_, ok, err = s.Get(ctx, net, stream(miss.i), miss.ts)
			require.NoError(t, err)
			assert.False(t, ok, "%+v", miss)
		}
	})

	t.Run("Page", func(t *testing.T) {
		s := open(t)
		var batch []Report
		for ts := uint32(100); ts < 200; ts += 2 { // even seconds only
			batch = append(batch, report(t, net, 1, ts, 1))
		}
		batch = append(batch, report(t, net, 0, 150, 1), report(t, net, 2, 150, 1), report(t, "mainnet", 1, 150, 1))
		_, err := s.Write(ctx, batch)
		require.NoError(t, err)
		page, err := s.Page(ctx, net, stream(1), 150, 10)
		require.NoError(t, err)
		require.Len(t, page, 10)
		for i, r := range page {
			assert.Equal(t, uint32(150+2*i), r.ObservationsTimestamp, "ascending, start inclusive")
			assert.Equal(t, stream(1), r.Stream)
		}
		next := page[len(page)-1].ObservationsTimestamp + 1
		page2, err := s.Page(ctx, net, stream(1), next, 1000)
		require.NoError(t, err)
		require.Len(t, page2, 15, "the rest, up to 198")
		assert.Equal(t, uint32(170), page2[0].ObservationsTimestamp)
		assert.Equal(t, uint32(198), page2[14].ObservationsTimestamp)
		page, err = s.Page(ctx, net, stream(1), 151, 1)
		require.NoError(t, err)
		require.Len(t, page, 1)
		assert.Equal(t, uint32(152), page[0].ObservationsTimestamp)
		page, err = s.Page(ctx, net, stream(1), 199, 10)
		require.NoError(t, err)
		assert.Empty(t, page)
		page, err = s.Page(ctx, net, stream(3), 0, 10)
		require.NoError(t, err)
		assert.Empty(t, page)
		page, err = s.Page(ctx, net, stream(1), 0, 0)
		require.NoError(t, err)
		assert.Empty(t, page)
	})

	t.Run("PageEdges", func(t *testing.T) {
		s := open(t)
		_, err := s.Write(ctx, []Report{report(t, net, 1, 4294967295, 1), report(t, net, 1, 1, 1), report(t, net, 2, 0+1, 1)})
		require.NoError(t, err)
		page, err := s.Page(ctx, net, stream(1), 0, 10)
		require.NoError(t, err)
		require.Len(t, page, 2)
		assert.Equal(t, uint32(4294967295), page[1].ObservationsTimestamp, "the last second of uint32")
	})

	t.Run("BulkAt", func(t *testing.T) {
		s := open(t)
		_, err := s.Write(ctx, []Report{report(t, net, 1, 100, 1), report(t, net, 2, 100, 2), report(t, net, 3, 101, 3), report(t, "mainnet", 4, 100, 4)})
		require.NoError(t, err)
		got, err := s.At(ctx, net, []ID{stream(3), stream(2), stream(4), stream(1)}, 100)
		require.NoError(t, err)
		assert.Equal(t, []Report{report(t, net, 2, 100, 2), report(t, net, 1, 100, 1)}, got, "the stored ones, in the order asked")
		got, err = s.At(ctx, net, nil, 100)
		require.NoError(t, err)
		assert.Empty(t, got)
	})

	t.Run("NetworksApart", func(t *testing.T) {
		s := open(t)
		_, err := s.Write(ctx, []Report{report(t, "testnet", 1, 100, 1), report(t, "mainnet", 1, 100, 2)})
		require.NoError(t, err)
		r, ok, err := s.Get(ctx, "mainnet", stream(1), 100)
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, byte(2), r.FullReport[len(r.FullReport)-1])
		assert.Equal(t, "mainnet", r.Network)
		_, ok, err = s.Get(ctx, "main", stream(1), 100)
		require.NoError(t, err)
		assert.False(t, ok, "a network whose name is a prefix of another's is another network")
		require.NoError(t, s.AddCoverage(ctx, "testnet", stream(1), Span{1, 10}))
		spans, err := s.Coverage(ctx, "mainnet", stream(1), 0, 100)
		require.NoError(t, err)
		assert.Empty(t, spans)
	})

	t.Run("CoverageBatchMergesAsOneByOne", func(t *testing.T) {
		// Every store records a round of spans in one call (the Writer's
		// recording of the stream's claims): the coverage it leaves is
		// the one AddCoverage leaves, span after span, whatever spans a
		// stream held before and however a call's spans of one stream
		// overlap, touch or nest.
		batched, single := open(t), open(t)
		b, ok := batched.(CoverageBatcher)
		require.True(t, ok, "%T records a round of spans in one call", batched)
		rng := rand.New(rand.NewPCG(1, 2))
		const streams = 5
		for round := range 40 {
			var spans []StreamSpan
			for range rng.IntN(12) {
				from := uint32(rng.IntN(400))
				spans = append(spans, StreamSpan{Network: []string{net, "mainnet"}[rng.IntN(2)], Stream: stream(1 + rng.IntN(streams)),
					Span: Span{from, from + uint32(rng.IntN(25))}})
			}
			require.NoError(t, b.AddCoverages(ctx, spans), "round %d", round)
			for _, sp := range spans {
				require.NoError(t, single.AddCoverage(ctx, sp.Network, sp.Stream, sp.Span))
			}
			for _, n := range []string{net, "mainnet"} {
				for i := 1; i <= streams; i++ {
					want, err := single.Coverage(ctx, n, stream(i), 0, 4294967295)
					require.NoError(t, err)
					got, err := batched.Coverage(ctx, n, stream(i), 0, 4294967295)
					require.NoError(t, err)
					require.Equal(t, want, got, "round %d, %s stream %d, after %v", round, n, i, spans)
				}
			}
		}
		require.NoError(t, b.AddCoverages(ctx, nil))
		assert.ErrorIs(t, b.AddCoverages(ctx, []StreamSpan{{Network: net, Stream: stream(1), Span: Span{4000, 4001}}, {Network: net, Stream: stream(2), Span: Span{5, 4}}}), ErrBadSpan, "none recorded")
		sp, err := batched.Coverage(ctx, net, stream(1), 4000, 4000)
		require.NoError(t, err)
		assert.Empty(t, sp)
	})

	t.Run("CoverageMerge", func(t *testing.T) {
		s := open(t)
		add := func(a, b uint32) {
			t.Helper()
			require.NoError(t, s.AddCoverage(ctx, net, stream(1), Span{a, b}))
		}
		spans := func(a, b uint32) []Span {
			t.Helper()
			sp, err := s.Coverage(ctx, net, stream(1), a, b)
			require.NoError(t, err)
			return sp
		}
		add(100, 200)
		add(300, 400)
		assert.Equal(t, []Span{{100, 200}, {300, 400}}, spans(0, 1000), "disjoint")
		add(150, 250)
		assert.Equal(t, []Span{{100, 250}, {300, 400}}, spans(0, 1000), "overlap")
		add(251, 260)
		assert.Equal(t, []Span{{100, 260}, {300, 400}}, spans(0, 1000), "adjacent after")
		add(290, 299)
		assert.Equal(t, []Span{{100, 260}, {290, 400}}, spans(0, 1000), "adjacent before")
		add(320, 330)
		assert.Equal(t, []Span{{100, 260}, {290, 400}}, spans(0, 1000), "contained")
		add(50, 500)
		assert.Equal(t, []Span{{50, 500}}, spans(0, 1000), "containing")
		add(502, 502)
		assert.Equal(t, []Span{{50, 500}, {502, 502}}, spans(0, 1000), "a gap of one second stays")
		add(501, 501)
		assert.Equal(t, []Span{{50, 502}}, spans(0, 1000), "filled")
		add(1000, 2000)
		assert.Equal(t, []Span{{1000, 2000}}, spans(1500, 1600), "intersecting: whole spans")
		assert.Equal(t, []Span{{50, 502}, {1000, 2000}}, spans(502, 1000), "the edges are inclusive")
		assert.Empty(t, spans(503, 999))
		add(0, 0)
		add(4294967295, 4294967295)
		assert.Equal(t, []Span{{0, 0}, {50, 502}, {1000, 2000}, {4294967295, 4294967295}}, spans(0, 4294967295))
		assert.ErrorIs(t, s.AddCoverage(ctx, net, stream(1), Span{5, 4}), ErrBadSpan)

		covered := func(a, b uint32) bool {
			t.Helper()
			ok, err := Covered(ctx, s, net, stream(1), a, b)
			require.NoError(t, err)
			return ok
		}
		assert.True(t, covered(50, 502))
		assert.True(t, covered(100, 100))
		assert.True(t, covered(1000, 2000))
		assert.False(t, covered(49, 100))
		assert.False(t, covered(500, 1000), "a hole between")
		assert.False(t, covered(2000, 2001))
		ok, err := Covered(ctx, s, net, stream(2), 100, 100)
		require.NoError(t, err)
		assert.False(t, ok, "another stream")
		st, err := s.Stats(ctx)
		require.NoError(t, err)
		assert.Equal(t, int64(4), st.Spans)
	})

	t.Run("Retention", func(t *testing.T) {
		s := open(t)
		const day = 86400
		base := uint32(20000 * day) // 2024-10-04
		var batch []Report
		for d := uint32(0); d < 4; d++ {
			for _, off := range []uint32{10, day / 2, day - 1} {
				batch = append(batch, report(t, net, 1, base+d*day+off, 1), report(t, "mainnet", 2, base+d*day+off, 1))
			}
		}
		_, err := s.Write(ctx, batch)
		require.NoError(t, err)
		require.NoError(t, s.AddCoverage(ctx, net, stream(1), Span{base, base + day - 1}))
		require.NoError(t, s.AddCoverage(ctx, net, stream(1), Span{base + day + 100, base + 3*day}))
		require.NoError(t, s.AddCoverage(ctx, "mainnet", stream(2), Span{base + 3*day + 10, base + 4*day}))
		cutoff := base + 2*day + day/2 // inside day 2
		d, err := s.DeleteBefore(ctx, cutoff)
		require.NoError(t, err)
		assert.Equal(t, int64(2*(3+3+1)), d.Reports, "days 0 and 1 whole, and day 2's first report, of both networks")
		assert.Equal(t, int64(2), d.Spans, "one span gone, one cut")
		for _, n := range []string{net, "mainnet"} {
			i := 1
			if n == "mainnet" {
				i = 2
			}
			page, err := s.Page(ctx, n, stream(i), 0, 100)
			require.NoError(t, err)
			require.Len(t, page, 5, n)
			assert.Equal(t, cutoff, page[0].ObservationsTimestamp, "the report at the cutoff is kept")
			_, ok, err := s.Get(ctx, n, stream(i), cutoff-day/2+10)
			require.NoError(t, err)
			assert.False(t, ok)
		}
		spans, err := s.Coverage(ctx, net, stream(1), 0, 4294967295)
		require.NoError(t, err)
		assert.Equal(t, []Span{{cutoff, base + 3*day}}, spans)
		spans, err = s.Coverage(ctx, "mainnet", stream(2), 0, 4294967295)
		require.NoError(t, err)
		assert.Equal(t, []Span{{base + 3*day + 10, base + 4*day}}, spans)
		st, err := s.Stats(ctx)
		require.NoError(t, err)
		assert.Equal(t, int64(10), st.Reports)
		assert.Equal(t, int64(2), st.Spans)
		d, err = s.DeleteBefore(ctx, cutoff)
		require.NoError(t, err)
		assert.Equal(t, Deleted{}, d, "a second pass finds nothing")
		// Writing again into a day whose partition or run was removed.
		res, err := s.Write(ctx, []Report{report(t, net, 1, base+5, 1)})
		require.NoError(t, err)
		assert.Equal(t, 1, res.Written)
	})

	t.Run("Streams", func(t *testing.T) {
		s := open(t)
		got, err := s.Streams(ctx, net)
		require.NoError(t, err)
		assert.Empty(t, got, "an empty store has no stream")
		_, err = s.Write(ctx, []Report{report(t, net, 3, 2000, 1), report(t, net, 1, 1005, 1), report(t, net, 1, 1000, 1),
			report(t, net, 1, 1003, 1), report(t, "mainnet", 4, 1000, 1)})
		require.NoError(t, err)
		require.NoError(t, s.AddCoverage(ctx, net, stream(1), Span{1000, 1009}))
		require.NoError(t, s.AddCoverage(ctx, net, stream(1), Span{1020, 1029}))
		require.NoError(t, s.AddCoverage(ctx, net, stream(2), Span{500, 599}))
		require.NoError(t, s.AddCoverage(ctx, "mainnet", stream(5), Span{1, 1}))
		got, err = s.Streams(ctx, net)
		require.NoError(t, err)
		assert.Equal(t, []StreamInfo{
			{Stream: stream(1), Reports: true, First: 1000, Last: 1005, Spans: 2, Covered: 20},
			{Stream: stream(2), Spans: 1, Covered: 100}, // coverage without a report
			{Stream: stream(3), Reports: true, First: 2000, Last: 2000},
		}, got, "every stream of the network, by ID, none of another network's")
		got, err = s.Streams(ctx, "mainnet")
		require.NoError(t, err)
		assert.Equal(t, []StreamInfo{
			{Stream: stream(4), Reports: true, First: 1000, Last: 1000},
			{Stream: stream(5), Spans: 1, Covered: 1},
		}, got)
		_, err = s.Streams(ctx, "Not A Network")
		require.Error(t, err)
	})
}

// ID is feedid.ID, shorter in the tables above.
type ID = feedid.ID
