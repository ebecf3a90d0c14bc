package candles_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/archive"
	"streamgate/candles"
	"streamgate/feedid"
)

// simPages is a page source of the simulator's reports (one a second, at
// most 100 a page, as the upstream), counting its calls; fail makes it
// refuse.
func simPages(t *testing.T, reportAt func(ts int64) archive.Report, calls *atomic.Int64, fail *atomic.Bool) archive.PageSource {
	return func(_ context.Context, _ string, _ feedid.ID, start uint32, limit int) ([]archive.Report, error) {
		calls.Add(1)
		if fail.Load() {
			return nil, errors.New("the upstream refused the page")
		}
		var out []archive.Report
		for ts := int64(start); ts < int64(start)+int64(min(limit, 100)); ts++ {
			out = append(out, reportAt(ts))
		}
		return out, nil
	}
}

// The seconds of a request's bars the archive does not cover are filled
// from the page source before the bars are built, on both stores: at most
// the bound of pages a request, the rest missing and filled by the next
// request; a span filled once costs no page again; a page that fails ends
// the fill and leaves its bars missing, not the request failed. The bars
// are the OHLC of the upstream's reports.
func TestQueryFilledOnBothStores(t *testing.T) {
	sim := newSim(t)
	id := simStreams(t, sim, "V3")["V3"]
	base := hourAgo()
	now := time.Unix(int64(base)+86400, 0)
	var all []archive.Report
	for ts := int64(base); ts < int64(base)+1200; ts++ {
		all = append(all, simReport(t, sim, id, ts))
	}
	for _, st := range stores(t) {
		t.Run(st.name, func(t *testing.T) {
			ctx := context.Background()
			// The archive holds [base, base+299] and [base+900, base+1199].
			write(t, st.s, all[:300], id, archive.Span{From: base, To: base + 299})
			write(t, st.s, all[900:], id, archive.Span{From: base + 900, To: base + 1199})
			var calls atomic.Int64
			var fail atomic.Bool
			fill := candles.Fill{Pages: simPages(t, func(ts int64) archive.Report { return all[ts-int64(base)] }, &calls, &fail),
				MaxPages: 4, PageLimit: 100, Wait: 10 * time.Minute} // the pages the bound, never the time
			rq := request(t, id, "1", "", base, base+1199)

			// Fail first: nothing filled, the hole's bars missing.
			fail.Store(true)
			res, done, err := candles.QueryFilled(ctx, st.s, network, rq, now, fill)
			require.NoError(t, err, "a failed page does not fail the request")
			require.Error(t, done.Err)
			assert.Equal(t, int64(1), calls.Load())
			assert.Equal(t, []archive.Span{{From: base + 300, To: base + 899}}, res.Missing)
			fail.Store(false)

			// Four pages of the six the hole takes.
			calls.Store(0)
			res, done, err = candles.QueryFilled(ctx, st.s, network, rq, now, fill)
			require.NoError(t, err)
			assert.ErrorIs(t, done.Err, candles.ErrFillBound)
			assert.Equal(t, 4, done.Pages)
			assert.Equal(t, int64(4), calls.Load(), "at most the bound of pages a request")
			assert.Equal(t, []archive.Span{{From: base + 660, To: base + 899}}, res.Missing,
				"filled to base+699: the bars from 11 minutes on are missing")
			assertBars(t, rawBars(t, all, "price", 60, base, base+659), res.Bars[:11])

			// The next request fills the rest; then none is fetched.
			calls.Store(0)
			res, done, err = candles.QueryFilled(ctx, st.s, network, rq, now, fill)
			require.NoError(t, err)
			require.NoError(t, done.Err)
			assert.Equal(t, int64(2), calls.Load())
			assert.Empty(t, res.Missing)
			assertBars(t, rawBars(t, all, "price", 60, base, base+1199), res.Bars)
			res, done, err = candles.QueryFilled(ctx, st.s, network, rq, now, fill)
			require.NoError(t, err)
			assert.Equal(t, int64(2), calls.Load(), "a filled span costs no page")
			assert.Zero(t, done.Pages)
			assertBars(t, rawBars(t, all, "price", 60, base, base+1199), res.Bars)
		})
	}
}

// The last archive.FillSettle seconds are never fetched: a request up to
// now fills what lies a minute before it (whole pages), and the bar in
// progress keeps its rule (covered up to LiveLag before now, by the live
// stream, or missing).
func TestQueryFilledSettles(t *testing.T) {
	sim := newSim(t)
	id := simStreams(t, sim, "V3")["V3"]
	base := hourAgo()
	now := time.Unix(int64(base)+600+30, 0) // 30 s into the bar of base+600
	st := stores(t)[0]
	var calls atomic.Int64
	var fail atomic.Bool
	fill := candles.Fill{Pages: simPages(t, func(ts int64) archive.Report { return simReport(t, sim, id, ts) }, &calls, &fail),
		Wait: 10 * time.Minute}
	ctx := context.Background()
	res, done, err := candles.QueryFilled(ctx, st.s, network, request(t, id, "1", "", base, base+600), now, fill)
	require.NoError(t, err)
	require.NoError(t, done.Err)
	assert.Equal(t, int64(6), calls.Load(), "pages up to base+570, a minute before now")
	assert.Len(t, res.Bars, 10)
	assert.Equal(t, []archive.Span{{From: base + 600, To: base + 630}}, res.Missing, "the bar in progress")
	res, done, err = candles.QueryFilled(ctx, st.s, network, request(t, id, "1", "", base+600, base+600), now, fill)
	require.NoError(t, err)
	assert.Zero(t, done.Pages)
	assert.Equal(t, int64(6), calls.Load(), "nothing fetched within the last minute")
	assert.Empty(t, res.Bars)
	assert.Equal(t, []archive.Span{{From: base + 600, To: base + 630}}, res.Missing)
}

// assertBars checks bars against the OHLC computed from the reports.
func assertBars(t *testing.T, want []ohlc, got []candles.Bar) {
	t.Helper()
	require.Len(t, got, len(want))
	for i, w := range want {
		g := got[i]
		assert.True(t, w.t == g.Time && w.o.Cmp(g.Open) == 0 && w.h.Cmp(g.High) == 0 && w.l.Cmp(g.Low) == 0 && w.c.Cmp(g.Close) == 0,
			"bar %d: want %d %s %s %s %s, got %d %s %s %s %s", i, w.t, dec(w.o), dec(w.h), dec(w.l), dec(w.c), g.Time, dec(g.Open), dec(g.High), dec(g.Low), dec(g.Close))
	}
}
