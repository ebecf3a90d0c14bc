package candles_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/archive"
	"streamgate/candles"
	"streamgate/don"
	"streamgate/feedid"
	"streamgate/upstreamsim"
)

func newSim(t testing.TB) *upstreamsim.Simulator {
	sim, err := upstreamsim.New(upstreamsim.Default())
	require.NoError(t, err)
	t.Cleanup(func() { sim.Close() })
	return sim
}

// write writes reports in batches of 500 and adds the coverage spans.
func write(t testing.TB, s archive.Store, reports []archive.Report, stream feedid.ID, spans ...archive.Span) {
	t.Helper()
	ctx := context.Background()
	for off := 0; off < len(reports); off += 500 {
		_, err := s.Write(ctx, reports[off:min(off+500, len(reports))])
		require.NoError(t, err)
	}
	for _, sp := range spans {
		require.NoError(t, s.AddCoverage(ctx, network, stream, sp))
	}
}

// hourAgo returns a UTC hour start two days before now.
func hourAgo() uint32 {
	t := uint32(time.Now().Add(-48 * time.Hour).Unix())
	return t - t%3600
}

// Bars over a recorded span are the OHLC computed from the raw reports of
// the span, at 1, 5 and 60 minutes, for streams of six schemas (the
// simulator's, reports at irregular seconds) and the real testnet reports,
// in each schema's default field and another; Pebble and PostgreSQL answer
// byte for byte alike.
func TestBarsAreTheReportsOHLC(t *testing.T) {
	sim := newSim(t)
	ids := simStreams(t, sim, "V3", "V5", "V8", "V11", "V13", "V14")
	base := hourAgo()
	const span = 2 * 3600
	rng := rand.New(rand.NewPCG(1, 2))
	byStream := map[feedid.ID][]archive.Report{}
	for _, id := range ids {
		for ts := int64(base) + int64(rng.IntN(5)); ts < int64(base)+span; ts += 1 + int64(rng.IntN(60)) {
			byStream[id] = append(byStream[id], simReport(t, sim, id, ts))
		}
	}
	real := realReports(t)
	for _, r := range real {
		byStream[r.Stream] = append(byStream[r.Stream], r)
	}
	fields := map[feedid.ID][]string{ids["V3"]: {"", "bid"}, ids["V11"]: {"", "ask"}, ids["V14"]: {"", "askPrice"}}
	answers := map[string][]byte{}
	for _, st := range stores(t) {
		t.Run(st.name, func(t *testing.T) {
			for id, reports := range byStream {
				var cover archive.Span
				if reports[0].ObservationsTimestamp >= base && reports[0].ObservationsTimestamp < base+span {
					cover = archive.Span{From: base, To: base + span - 1}
				} else { // the real reports: the hours around them
					lo, hi := reports[0].ObservationsTimestamp, reports[0].ObservationsTimestamp
					for _, r := range reports {
						lo, hi = min(lo, r.ObservationsTimestamp), max(hi, r.ObservationsTimestamp)
					}
					cover = archive.Span{From: lo - lo%3600, To: hi - hi%3600 + 3599}
				}
				write(t, st.s, reports, id, cover)
				b, _ := feedid.Bytes(string(id))
				schema := don.SchemaOf(b[:])
				fs := fields[id]
				if fs == nil {
					fs = []string{""}
				}
				for _, field := range fs {
					name := field
					if name == "" {
						name = candles.DefaultField(schema)
					}
					for _, res := range []string{"1", "5m", "60"} {
						rq := request(t, id, res, field, cover.From, cover.To)
						body, h := query(t, st.s, rq, time.Unix(int64(cover.To)+86400, 0))
						want := rawBars(t, reports, name, rq.Resolution.Seconds, cover.From, cover.To)
						require.NotEmpty(t, want)
						require.Equal(t, "ok", h.S, "%s %s %s: %s", schema, name, res, body)
						require.Empty(t, h.Missing, "%s %s %s", schema, name, res)
						require.NotNil(t, h.V)
						require.Empty(t, h.V)
						require.Len(t, h.T, len(want), "%s %s %s", schema, name, res)
						for i, w := range want {
							require.Equal(t, w.t, h.T[i])
							require.Equal(t, []string{dec(w.o), dec(w.h), dec(w.l), dec(w.c)}, []string{h.O[i], h.H[i], h.L[i], h.C[i]},
								"%s %s %s bar %d", schema, name, res, w.t)
						}
						key := fmt.Sprint(id, field, res)
						if prev, ok := answers[key]; ok {
							require.Equal(t, string(prev), string(body), "Pebble and PostgreSQL answer alike")
						}
						answers[key] = body
					}
				}
			}
		})
	}
}

// The values are JSON numbers (the decimal's nearest float64) unless
// precise; rows carry [t,o,h,l,c,0].
func TestNumbersAndRows(t *testing.T) {
	sim := newSim(t)
	id := simStreams(t, sim, "V3")["V3"]
	base := hourAgo()
	var reports []archive.Report
	for ts := int64(base); ts < int64(base)+600; ts += 7 {
		reports = append(reports, simReport(t, sim, id, ts))
	}
	st := stores(t)[0]
	write(t, st.s, reports, id, archive.Span{From: base, To: base + 599})
	rq := request(t, id, "1m", "", base, base+599)
	res, err := candles.Query(context.Background(), st.s, network, rq, time.Unix(int64(base)+86400, 0))
	require.NoError(t, err)
	want := rawBars(t, reports, "price", 60, base, base+599)
	var h struct {
		S string    `json:"s"`
		T []uint32  `json:"t"`
		O []float64 `json:"o"`
		C []float64 `json:"c"`
	}
	require.NoError(t, json.Unmarshal(candles.AppendHistory(nil, &res, false), &h))
	require.Len(t, h.O, len(want))
	for i, w := range want {
		f, _ := strconv.ParseFloat(dec(w.o), 64)
		require.Equal(t, f, h.O[i])
		f, _ = strconv.ParseFloat(dec(w.c), 64)
		require.Equal(t, f, h.C[i])
	}
	var rows struct {
		S       string           `json:"s"`
		Candles [][6]json.Number `json:"candles"`
	}
	require.NoError(t, json.Unmarshal(candles.AppendRows(nil, &res, true), &rows))
	require.Equal(t, "ok", rows.S)
	require.Len(t, rows.Candles, len(want))
	for i, w := range want {
		require.Equal(t, fmt.Sprint(w.t), rows.Candles[i][0].String())
		require.Equal(t, "0", rows.Candles[i][5].String())
	}
	var precise struct {
		Candles [][]any `json:"candles"`
	}
	require.NoError(t, json.Unmarshal(candles.AppendRows(nil, &res, true), &precise))
	require.Equal(t, dec(want[0].h), precise.Candles[0][2])
}

// A span the archive does not cover holds no bar, whatever reports it
// has: its bars are left out and the answer names their spans.
func TestHoleSaysSo(t *testing.T) {
	sim := newSim(t)
	id := simStreams(t, sim, "V3")["V3"]
	base := hourAgo()
	var reports []archive.Report
	for ts := int64(base); ts < int64(base)+1200; ts += 3 {
		reports = append(reports, simReport(t, sim, id, ts))
	}
	now := time.Unix(int64(base)+86400, 0)
	for _, st := range stores(t) {
		t.Run(st.name, func(t *testing.T) {
			// Every report is stored; the coverage misses [base+300, base+449].
			write(t, st.s, reports, id, archive.Span{From: base, To: base + 299}, archive.Span{From: base + 450, To: base + 1199})
			_, h := query(t, st.s, request(t, id, "1", "", base, base+1199), now)
			require.Equal(t, "ok", h.S)
			require.Len(t, h.Missing, 1)
			assert.Equal(t, base+300, h.Missing[0].From)
			assert.Equal(t, base+479, h.Missing[0].To, "the bars of 5, 6 and 7 minutes")
			want := rawBars(t, reports, "price", 60, base, base+1199)
			require.Len(t, h.T, len(want)-3)
			for _, tt := range h.T {
				assert.False(t, tt >= base+300 && tt < base+480, "no bar in the hole: %d", tt)
			}
			_, h = query(t, st.s, request(t, id, "5", "", base, base+1199), now)
			require.Equal(t, []uint32{base, base + 600, base + 900}, h.T)
			require.Len(t, h.Missing, 1)
			assert.Equal(t, base+300, h.Missing[0].From)
			assert.Equal(t, base+599, h.Missing[0].To)
			// An hour bar whose hour is not covered whole: none, and said.
			_, h = query(t, st.s, request(t, id, "60", "", base, base), now)
			require.Equal(t, "no_data", h.S)
			require.Len(t, h.Missing, 1)
			assert.Equal(t, base, h.Missing[0].From)
			assert.Equal(t, base+3599, h.Missing[0].To)
		})
	}
}

// The bar in progress holds the reports up to now and moves as they
// arrive; it is left out when the coverage lags now by more than LiveLag.
func TestLiveBarMoves(t *testing.T) {
	sim := newSim(t)
	id := simStreams(t, sim, "V3")["V3"]
	base := hourAgo()
	var reports []archive.Report
	for ts := int64(base); ts <= int64(base)+145; ts++ {
		reports = append(reports, simReport(t, sim, id, ts))
	}
	for _, st := range stores(t) {
		t.Run(st.name, func(t *testing.T) {
			write(t, st.s, reports, id, archive.Span{From: base, To: base + 145})
			now := time.Unix(int64(base)+150, 0)
			_, h := query(t, st.s, request(t, id, "1", "", base, base+3599), now)
			require.Equal(t, []uint32{base, base + 60, base + 120}, h.T, "no bar after now's")
			want := rawBars(t, reports, "price", 60, base, base+3599)
			require.Equal(t, dec(want[2].c), h.C[2], "the live bar closes at the last report")
			more := []archive.Report{}
			for ts := int64(base) + 146; ts <= int64(base)+165; ts++ {
				more = append(more, simReport(t, sim, id, ts))
			}
			write(t, st.s, more, id, archive.Span{From: base + 146, To: base + 165})
			now = time.Unix(int64(base)+170, 0)
			_, h = query(t, st.s, request(t, id, "1", "", base, base+3599), now)
			want = rawBars(t, append(reports, more...), "price", 60, base, base+3599)
			require.Equal(t, []uint32{base, base + 60, base + 120}, h.T)
			require.Equal(t, []string{dec(want[2].o), dec(want[2].h), dec(want[2].l), dec(want[2].c)},
				[]string{h.O[2], h.H[2], h.L[2], h.C[2]}, "the live bar moved")
			// The coverage stops at +165: at +200 the bar of +120 lacks its
			// last 14 s, the live one of +180 (covered up to now less
			// LiveLag) all of them.
			now = time.Unix(int64(base)+200, 0)
			_, h = query(t, st.s, request(t, id, "1", "", base, base+3599), now)
			require.Equal(t, []uint32{base, base + 60}, h.T)
			require.Len(t, h.Missing, 1)
			assert.Equal(t, base+120, h.Missing[0].From)
			assert.Equal(t, base+200, h.Missing[0].To, "up to now")
		})
	}
}

// A span without reports is no_data, with the open time of the latest
// bar before it.
func TestNoDataNextTime(t *testing.T) {
	sim := newSim(t)
	id := simStreams(t, sim, "V3")["V3"]
	base := hourAgo()
	reports := []archive.Report{simReport(t, sim, id, int64(base)+65), simReport(t, sim, id, int64(base)+70)}
	now := time.Unix(int64(base)+86400, 0)
	for _, st := range stores(t) {
		t.Run(st.name, func(t *testing.T) {
			write(t, st.s, reports, id, archive.Span{From: base, To: base + 7200})
			body, h := query(t, st.s, request(t, id, "5", "", base+3600, base+7200), now)
			require.Equal(t, "no_data", h.S, "%s", body)
			require.NotNil(t, h.NextTime)
			assert.Equal(t, base, *h.NextTime, "the 5-minute bar holding +65")
			body, h = query(t, st.s, request(t, id, "5", "", base-7200, base-3600), now)
			require.Equal(t, `{"s":"no_data","missing":[{"from":`+fmt.Sprint(base-7200)+`,"to":`+fmt.Sprint(base-3600+299)+`}]}`+"\n", string(body))
			require.Nil(t, h.NextTime)
		})
	}
}

// Retention takes the rollups of the buckets before the cutoff (their
// bars are not covered any more); a rebuild from the reports gives the
// rollups the writes made; a report written twice, or by two replicas at
// once, counts once.
func TestRollupsFollowRetentionAndRebuild(t *testing.T) {
	sim := newSim(t)
	id := simStreams(t, sim, "V8")["V8"]
	base := hourAgo() - 86400
	var reports []archive.Report
	for ts := int64(base); ts < int64(base)+2*86400; ts += 293 {
		reports = append(reports, simReport(t, sim, id, ts))
	}
	ctx := context.Background()
	now := time.Unix(int64(base)+3*86400, 0)
	for _, st := range stores(t) {
		t.Run(st.name, func(t *testing.T) {
			write(t, st.s, reports, id, archive.Span{From: base, To: base + 2*86400 - 1})
			res, err := st.s.Write(ctx, reports[:100])
			require.NoError(t, err)
			require.Equal(t, 100, res.Duplicates)
			levels := map[uint32][]archive.Bar{}
			for _, l := range archive.RollupLevels {
				levels[l], err = st.s.Rollups(ctx, network, id, l, "midPrice", 0, ^uint32(0))
				require.NoError(t, err)
				var n uint32
				for _, b := range levels[l] {
					n += b.Reports
				}
				require.Equal(t, uint32(len(reports)), n, "level %d counts each report once", l)
			}
			require.NoError(t, st.s.RebuildRollups(ctx, network, id, base, base+2*86400))
			for _, l := range archive.RollupLevels {
				again, err := st.s.Rollups(ctx, network, id, l, "midPrice", 0, ^uint32(0))
				require.NoError(t, err)
				require.Equal(t, levels[l], again, "level %d rebuilt alike", l)
			}
			cutoff := base + 86400 + 1800
			_, err = st.s.DeleteBefore(ctx, cutoff)
			require.NoError(t, err)
			for _, l := range archive.RollupLevels {
				left, err := st.s.Rollups(ctx, network, id, l, "midPrice", 0, ^uint32(0))
				require.NoError(t, err)
				for _, b := range left {
					require.GreaterOrEqual(t, b.Start, cutoff, "level %d", l)
				}
			}
			_, h := query(t, st.s, request(t, id, "60", "", base+86400, base+2*86400-1), now)
			want := rawBars(t, reports, "midPrice", 3600, base+86400+3600, base+2*86400-1)
			require.Equal(t, len(want), len(h.T))
			require.Len(t, h.Missing, 1, "the hour across the cutoff")
			assert.Equal(t, base+86400, h.Missing[0].From)
		})
	}
}

// Two replicas writing the same reports at once into PostgreSQL: each
// report is in the rollups once.
func TestReplicasWriteRollupsOnce(t *testing.T) {
	sim := newSim(t)
	id := simStreams(t, sim, "V3")["V3"]
	base := hourAgo()
	var reports []archive.Report
	for ts := int64(base); ts < int64(base)+1800; ts += 2 {
		reports = append(reports, simReport(t, sim, id, ts))
	}
	u := newDatabase(t)
	replicas := []*archive.Postgres{openPGAt(t, u), openPGAt(t, u)}
	ctx := context.Background()
	errs := make(chan error, 2)
	for i, p := range replicas {
		go func() {
			// Each writes every report, in batches that overlap the other's
			// differently: the same rows race in both orders.
			size := 100 + 37*i
			for off := 0; off < len(reports); off += size {
				if _, err := p.Write(ctx, reports[off:min(off+size, len(reports))]); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)
	require.NoError(t, replicas[0].AddCoverage(ctx, network, id, archive.Span{From: base, To: base + 1799}))
	for _, l := range archive.RollupLevels {
		rows, err := replicas[1].Rollups(ctx, network, id, l, "price", 0, ^uint32(0))
		require.NoError(t, err)
		var n uint32
		for _, b := range rows {
			n += b.Reports
		}
		require.Equal(t, uint32(len(reports)), n, "level %d", l)
	}
	for _, res := range []string{"1", "5"} {
		rq := request(t, id, res, "", base, base+1799)
		_, h := query(t, replicas[1], rq, time.Unix(int64(base)+86400, 0))
		want := rawBars(t, reports, "price", rq.Resolution.Seconds, base, base+1799)
		require.Len(t, h.T, len(want))
		for i, w := range want {
			require.Equal(t, []string{dec(w.o), dec(w.h), dec(w.l), dec(w.c)}, []string{h.O[i], h.H[i], h.L[i], h.C[i]})
		}
	}
}

// Parameters are refused with a text that says what is expected.
func TestParseRequestRefuses(t *testing.T) {
	v3, _ := feedid.Parse("0x00037da06d56d083fe599397a4769a042d63aa73dc4ef57709d31e9971a5b439")
	v15, _ := feedid.Parse("0x000f7da06d56d083fe599397a4769a042d63aa73dc4ef57709d31e9971a5b439")
	for _, c := range []struct {
		stream  feedid.ID
		q, want string
	}{
		{v3, "from=1&to=2", "missing query parameter resolution"},
		{v3, "resolution=2&from=1&to=2", `invalid resolution "2"`},
		{v3, "resolution=1W&from=1&to=2", `invalid resolution "1W"`},
		{v3, "resolution=1&to=2", "missing query parameter from"},
		{v3, "resolution=1&from=1", "missing query parameter to"},
		{v3, "resolution=1&from=-1&to=2", "invalid from"},
		{v3, "resolution=1&from=1.5&to=2", "invalid from"},
		{v3, "resolution=1&from=1&to=4294967296", "invalid to"},
		{v3, "resolution=1&from=3&to=2", "from (3) is after to (2)"},
		{v3, "resolution=1&from=1&to=2&field=midPrice", `invalid field "midPrice": the fields of schema V3 are nativeFee, linkFee, price, bid, ask`},
		{v3, "resolution=1&from=1&to=2&field=observationsTimestamp", `invalid field "observationsTimestamp"`},
		{v3, "resolution=1&from=1&to=2&precise=yes", `invalid precise "yes"`},
		{v15, "resolution=1&from=1&to=2", "schema V15"},
	} {
		q, err := parseQuery(c.q)
		require.NoError(t, err)
		_, err = candles.ParseRequest(c.stream, q)
		require.Error(t, err, c.q)
		assert.Contains(t, err.Error(), c.want, c.q)
	}
	rq := request(t, v3, "1", "", 0, 2000000000)
	err := rq.CheckSpan(2000000000)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "at most 5000")
	rq = request(t, v3, "1D", "", 1700000000, 1700000000+4999*86400)
	require.NoError(t, rq.CheckSpan(1700000000+4999*86400), "5000 bars")
	for name, sec := range map[string]uint32{"1": 60, "5": 300, "15": 900, "30": 1800, "60": 3600, "240": 14400, "1D": 86400,
		"1m": 60, "5m": 300, "15m": 900, "30m": 1800, "1h": 3600, "4h": 14400, "1d": 86400} {
		r, err := candles.ParseResolution(name)
		require.NoError(t, err)
		assert.Equal(t, sec, r.Seconds, name)
	}
}
