package candles_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"math/big"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"streamgate/archive"
	"streamgate/candles"
	"streamgate/don"
	"streamgate/feedid"
)

// The synthetic archive of the benchmarks: one V3 stream, a report every
// second for 30 days (2,592,000), written through Store.Write in batches
// (so its rollups are the ones the writes make), and covered whole.
var benchDays = uint32(30)

var bench struct {
	once   sync.Once
	store  *archive.Pebble
	dir    string
	stream feedid.ID
	start  uint32 // the first second, a UTC day
	err    error
	built  time.Duration
}

// benchArchive builds the synthetic archive once per process: a real
// simulator report as the template, its blob's times and prices set
// second by second (a random walk), the envelope left as it is (the
// rollups decode reports; they do not verify them).
func benchArchive(b *testing.B) (*archive.Pebble, feedid.ID, uint32) {
	b.Helper()
	bench.once.Do(func() {
		if d, err := strconv.Atoi(os.Getenv("CANDLES_BENCH_DAYS")); err == nil && d >= 2 {
			benchDays = uint32(d)
		}
		began := time.Now()
		sim := newSim(b)
		id := simStreams(b, sim, "V3")["V3"]
		now := uint32(time.Now().Unix())
		bench.start = now - now%86400 - (benchDays+1)*86400
		tmpl := simReport(b, sim, id, int64(bench.start))
		env, err := don.DecodeEnvelope(tmpl.FullReport)
		require.NoError(b, err)
		off := bytes.Index(tmpl.FullReport, env.ReportBlob)
		require.Positive(b, off)
		if bench.dir, bench.err = os.MkdirTemp("", "candles-bench-"); bench.err != nil {
			return
		}
		if bench.store, bench.err = archive.OpenPebble(archive.PebbleOptions{Dir: bench.dir}); bench.err != nil {
			return
		}
		bench.stream = id
		total := int(benchDays) * 86400
		const batch = 5000
		rng := rand.New(rand.NewPCG(7, 11))
		price := new(big.Int).Mul(big.NewInt(3000), new(big.Int).Exp(big.NewInt(10), big.NewInt(18), nil))
		step := new(big.Int).Exp(big.NewInt(10), big.NewInt(16), nil)
		word := func(full []byte, i int, v *big.Int) {
			w := full[off+32*i : off+32*i+32]
			clear(w)
			v.FillBytes(w)
		}
		batches := make(chan []archive.Report, 2)
		var wg sync.WaitGroup
		errs := make(chan error, 2)
		for range 2 { // two writers: a write's decoding runs out of the store's lock
			wg.Add(1)
			go func() {
				defer wg.Done()
				for rs := range batches {
					if _, err := bench.store.Write(context.Background(), rs); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		for first := 0; first < total; first += batch {
			rs := make([]archive.Report, 0, batch)
			for s := first; s < min(first+batch, total); s++ {
				ts := bench.start + uint32(s)
				full := bytes.Clone(tmpl.FullReport)
				binary.BigEndian.PutUint32(full[off+32+28:], ts-1)
				binary.BigEndian.PutUint32(full[off+64+28:], ts)
				price.Add(price, new(big.Int).Mul(step, big.NewInt(int64(rng.IntN(201)-100))))
				word(full, 6, price)
				word(full, 7, new(big.Int).Sub(price, step))
				word(full, 8, new(big.Int).Add(price, step))
				rs = append(rs, archive.Report{Network: network, Stream: id, ValidFromTimestamp: ts - 1, ObservationsTimestamp: ts, FullReport: full})
			}
			batches <- rs
		}
		close(batches)
		wg.Wait()
		close(errs)
		if bench.err = <-errs; bench.err != nil {
			return
		}
		bench.err = bench.store.AddCoverage(context.Background(), network, id, archive.Span{From: bench.start, To: bench.start + uint32(total) - 1})
		bench.built = time.Since(began)
	})
	require.NoError(b, bench.err)
	return bench.store, bench.stream, bench.start
}

// rawQuery computes the bars of rq from the raw reports: the coverage,
// every report of the span read (Page) and decoded by the decoded view's
// decoder, as a server without rollups would.
func rawQuery(ctx context.Context, s *archive.Pebble, rq candles.Request) (candles.Result, error) {
	var res candles.Result
	size := rq.Resolution.Seconds
	first := (rq.From + size - 1) / size * size
	last := rq.To / size * size
	end := last + size - 1
	spans, err := s.Coverage(ctx, network, rq.Stream, first, end)
	if err != nil || len(spans) != 1 || spans[0].From > first || spans[0].To < end {
		return res, err // the benchmark's span is covered whole
	}
	for start := first; start <= end; {
		page, err := s.Page(ctx, network, rq.Stream, start, 10000)
		if err != nil {
			return res, err
		}
		for _, r := range page {
			if r.ObservationsTimestamp > end {
				return res, nil
			}
			env, err := don.DecodeEnvelope(r.FullReport)
			if err != nil {
				return res, err
			}
			_, fields, err := don.DecodeBlob(env.ReportBlob)
			if err != nil {
				return res, err
			}
			var v *big.Int
			for _, f := range fields {
				if f.Name == rq.Field {
					v = f.Value.(*big.Int)
				}
			}
			open := r.ObservationsTimestamp - r.ObservationsTimestamp%size
			if n := len(res.Bars); n == 0 || res.Bars[n-1].Time != open {
				res.Bars = append(res.Bars, candles.Bar{Time: open, Open: v, High: v, Low: v, Close: v, Reports: 1})
				continue
			}
			b := &res.Bars[len(res.Bars)-1]
			b.Close = v
			b.Reports++
			if v.Cmp(b.High) > 0 {
				b.High = v
			}
			if v.Cmp(b.Low) < 0 {
				b.Low = v
			}
		}
		if len(page) < 10000 {
			break
		}
		start = page[len(page)-1].ObservationsTimestamp + 1
	}
	return res, nil
}

// BenchmarkHistory: a day of 1-minute bars and 30 days of 1-hour bars of
// the synthetic archive (30 days × 1 report/s, Pebble), from the rollups
// (candles.Query) and computed from the raw reports (rawQuery), p50 and
// p99 of a fixed number of requests per way (the raw way's are minutes
// long): run it with -benchtime 1x. Each way's bars are checked equal to
// the other's.
func BenchmarkHistory(b *testing.B) {
	store, id, start := benchArchive(b)
	b.Logf("synthetic archive: %d reports written and covered in %s", int(benchDays)*86400, bench.built.Round(time.Second))
	end := start + benchDays*86400 - 1 // CANDLES_BENCH_DAYS (2 or more) makes a smaller archive, to try the benchmark out
	now := time.Now()
	cases := []struct {
		name     string
		res      string
		from, to uint32
	}{
		{"day-1m", "1", end - 86399, end},
		{"30d-1h", "60", start, end},
	}
	ctx := context.Background()
	type way struct {
		name    string
		samples int
		run     func() (candles.Result, error)
	}
	// Both rollup cases first, then the raw ones (minutes long).
	var runs []struct {
		name string
		want candles.Result
		way  way
	}
	for _, raw := range []bool{false, true} {
		for _, c := range cases {
			rq := request(b, id, c.res, "", c.from, c.to)
			want, err := candles.Query(ctx, store, network, rq, now)
			require.NoError(b, err)
			require.Empty(b, want.Missing)
			w := way{"rollups", 500, func() (candles.Result, error) { return candles.Query(ctx, store, network, rq, now) }}
			if raw {
				w = way{"raw", 3, func() (candles.Result, error) { return rawQuery(ctx, store, rq) }}
				if c.res == "60" {
					w.samples = 1 // 2.6 million reports decoded: minutes
				}
			}
			runs = append(runs, struct {
				name string
				want candles.Result
				way  way
			}{c.name + "/" + w.name, want, w})
		}
	}
	for _, r := range runs {
		want, way := r.want, r.way
		b.Run(r.name, func(b *testing.B) {
			got, err := way.run()
			require.NoError(b, err)
			require.Equal(b, len(want.Bars), len(got.Bars))
			for i := range got.Bars {
				w, g := want.Bars[i], got.Bars[i]
				require.True(b, w.Time == g.Time && w.Open.Cmp(g.Open) == 0 && w.High.Cmp(g.High) == 0 &&
					w.Low.Cmp(g.Low) == 0 && w.Close.Cmp(g.Close) == 0 && w.Reports == g.Reports, "bar %d", w.Time)
			}
			lat := make([]time.Duration, 0, b.N*way.samples)
			b.ResetTimer()
			for range b.N * way.samples {
				t0 := time.Now()
				if _, err := way.run(); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[(len(lat)*99)/100].Microseconds())/1000, "p99-ms")
			b.ReportMetric(float64(len(got.Bars)), "bars")
			b.ReportMetric(float64(len(lat)), "requests")
		})
	}
}
