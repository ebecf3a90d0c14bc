package archive

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"streamgate/cache"
	"streamgate/don"
	"streamgate/upstreamsim"
)

// simReports returns streams × seconds reports of the simulator's testnet
// V3 streams: real signatures of its DON, prices moving second by second.
func simReports(b *testing.B, streams, seconds int) []Report {
	b.Helper()
	sim, err := upstreamsim.New(upstreamsim.Default())
	require.NoError(b, err)
	defer sim.Close()
	var ids []string
	for _, s := range sim.Streams(upstreamsim.Testnet) {
		if s.SchemaVersion == "V3" {
			ids = append(ids, s.FeedID)
		}
	}
	require.NotEmpty(b, ids)
	start := time.Now().Add(-time.Duration(seconds+60) * time.Second).Unix()
	out := make([]Report, 0, streams*seconds)
	for i := range streams {
		id := ids[i%len(ids)]
		for sec := range seconds {
			rec, ok := sim.Report(upstreamsim.Testnet, id, start+int64(sec))
			require.True(b, ok)
			r, err := FromRecord("testnet", don.Record{FeedID: rec.FeedID, ValidFromTimestamp: rec.ValidFromTimestamp,
				ObservationsTimestamp: rec.ObservationsTimestamp, FullReport: rec.FullReport}, nil)
			require.NoError(b, err)
			if i >= len(ids) { // more streams than the simulator has: another stream ID, same report
				sb, _ := streamBytes(r.Stream)
				sb[31] ^= byte(i / len(ids))
				sb[30] ^= byte(i / len(ids) >> 8)
				r.Stream = streamID(sb[:])
			}
			out = append(out, r)
		}
	}
	return out
}

var (
	benchOnce    sync.Once
	benchReports []Report
)

// benchSet is 100 streams × 200 s of simulated V3 reports (20,000).
func benchSet(b *testing.B) []Report {
	benchOnce.Do(func() { benchReports = simReports(b, 100, 200) })
	return benchReports
}

// BenchmarkPebbleBytesPerReport: the room a V3 report takes at rest in
// Pebble, after a flush and a full compaction.
func BenchmarkPebbleBytesPerReport(b *testing.B) {
	rs := benchSet(b)
	ctx := context.Background()
	for range b.N {
		dir := b.TempDir()
		p, err := OpenPebble(PebbleOptions{Dir: dir})
		require.NoError(b, err)
		for off := 0; off < len(rs); off += 1000 {
			_, err := p.Write(ctx, rs[off:off+1000])
			require.NoError(b, err)
		}
		require.NoError(b, p.compact(ctx))
		st, err := p.Stats(ctx)
		require.NoError(b, err)
		var sst int64
		files, _ := filepath.Glob(filepath.Join(dir, "*.sst"))
		for _, f := range files {
			if fi, err := os.Stat(f); err == nil {
				sst += fi.Size()
			}
		}
		raw := 0
		for _, r := range rs {
			raw += len(r.FullReport)
		}
		b.ReportMetric(float64(sst)/float64(len(rs)), "sst-bytes/report")
		b.ReportMetric(float64(st.BytesOnDisk)/float64(len(rs)), "disk-bytes/report")
		b.ReportMetric(float64(raw)/float64(len(rs)), "raw-bytes/report")
		require.NoError(b, p.Close())
	}
}

// filled opens a Pebble store holding benchSet, compacted.
func filled(b *testing.B) *Pebble {
	rs := benchSet(b)
	ctx := context.Background()
	p, err := OpenPebble(PebbleOptions{Dir: b.TempDir()})
	require.NoError(b, err)
	b.Cleanup(func() { p.Close() })
	for off := 0; off < len(rs); off += 1000 {
		_, err := p.Write(ctx, rs[off:off+1000])
		require.NoError(b, err)
	}
	require.NoError(b, p.compact(ctx))
	return p
}

// percentiles reports p50 and p99 of ds.
func percentiles(b *testing.B, ds []time.Duration) {
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(ds[len(ds)*99/100].Nanoseconds()), "p99-ns")
}

// BenchmarkPebbleGet: a report at a timestamp from Pebble, rendered as its
// record; BenchmarkCacheGet is the baseline, the memory cache's lookup of
// a stored answer.
func BenchmarkPebbleGet(b *testing.B) {
	rs := benchSet(b)
	p := filled(b)
	ctx := context.Background()
	ds := make([]time.Duration, 0, b.N)
	var buf []byte
	b.ResetTimer()
	for i := range b.N {
		r := &rs[(i*7919)%len(rs)]
		t0 := time.Now()
		got, ok, err := p.Get(ctx, r.Network, r.Stream, r.ObservationsTimestamp)
		if err != nil || !ok {
			b.Fatal(ok, err)
		}
		buf = got.AppendJSON(buf[:0])
		ds = append(ds, time.Since(t0))
	}
	b.StopTimer()
	percentiles(b, ds)
}

func BenchmarkCacheGet(b *testing.B) {
	rs := benchSet(b)
	c, err := cache.New(cache.Config{MaxBytes: 256 << 20})
	require.NoError(b, err)
	defer c.Close()
	keys := make([]string, len(rs))
	for i := range rs {
		keys[i] = fmt.Sprintf("report:%s:%s:%d", rs[i].Network, rs[i].Stream, rs[i].ObservationsTimestamp)
		c.Set(keys[i], &cache.Entry{Body: rs[i].JSON(), Status: 200, Stored: time.Now()})
	}
	c.Wait()
	ds := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		e, st := c.Get(keys[(i*7919)%len(keys)])
		if e == nil || st != cache.Fresh {
			b.Fatal("miss")
		}
		ds = append(ds, time.Since(t0))
	}
	b.StopTimer()
	percentiles(b, ds)
}

// BenchmarkPebblePage100: a page of 100 reports from Pebble.
func BenchmarkPebblePage100(b *testing.B) {
	rs := benchSet(b)
	p := filled(b)
	ctx := context.Background()
	b.ResetTimer()
	for i := range b.N {
		r := &rs[(i*200)%len(rs)] // a stream's first second
		page, err := p.Page(ctx, r.Network, r.Stream, r.ObservationsTimestamp, 100)
		if err != nil || len(page) != 100 {
			b.Fatal(len(page), err)
		}
	}
}

// pgBench starts a server and opens a store on a fresh database.
func pgBench(b *testing.B) (*pgServer, string) {
	pg, _ := ownPG(b)
	return pg, pg.database(b)
}

// BenchmarkPostgresPage100: a page of 100 reports from PostgreSQL.
func BenchmarkPostgresPage100(b *testing.B) {
	rs := benchSet(b)
	_, u := pgBench(b)
	p := openPG(b, u, nil)
	ctx := context.Background()
	for off := 0; off < len(rs); off += 1000 {
		_, err := p.Write(ctx, rs[off:off+1000])
		require.NoError(b, err)
	}
	_, err := p.pool.Exec(ctx, "ANALYZE archive_reports")
	require.NoError(b, err)
	b.ResetTimer()
	for i := range b.N {
		r := &rs[(i*200)%len(rs)]
		page, err := p.Page(ctx, r.Network, r.Stream, r.ObservationsTimestamp, 100)
		if err != nil || len(page) != 100 {
			b.Fatal(len(page), err)
		}
	}
}

// BenchmarkPostgresInsert3: three replicas (three pools) each write the
// same 20,000 reports in batches of 1,000: one row each; the rate is the
// reports offered per second (written and duplicates).
func BenchmarkPostgresInsert3(b *testing.B) {
	rs := benchSet(b)
	pg, _ := pgBench(b)
	ctx := context.Background()
	for range b.N {
		b.StopTimer()
		u := pg.database(b)
		stores := []*Postgres{openPG(b, u, nil), openPG(b, u, nil), openPG(b, u, nil)}
		b.StartTimer()
		t0 := time.Now()
		var wg sync.WaitGroup
		var written sync.Map
		for i, s := range stores {
			wg.Go(func() {
				n := 0
				for off := 0; off < len(rs); off += 1000 {
					res, err := s.Write(ctx, rs[off:off+1000])
					if err != nil {
						b.Error(err)
						return
					}
					n += res.Written
				}
				written.Store(i, n)
			})
		}
		wg.Wait()
		el := time.Since(t0)
		total := 0
		written.Range(func(_, v any) bool { total += v.(int); return true })
		if total != len(rs) {
			b.Fatalf("%d rows written of %d", total, len(rs))
		}
		b.ReportMetric(float64(3*len(rs))/el.Seconds(), "offered/s")
		b.ReportMetric(float64(len(rs))/el.Seconds(), "rows/s")
	}
}

// BenchmarkWriterPebble: reports through a Writer into Pebble as fast as
// Add takes them (the queue sized to hold them all): the rate the store
// sustains, and what one Add costs the caller.
func BenchmarkWriterPebble(b *testing.B) { writerFast(b) }

// BenchmarkWriterRollups: BenchmarkWriterPebble and BenchmarkWriterPaced
// with the rollups (every stored report decoded for its scaled fields,
// its minute, five minutes, hour and day merged in the same batch) and
// without (rollupsOff: the reports alone), one after the other in the
// same run.
func BenchmarkWriterRollups(b *testing.B) {
	for _, c := range []struct {
		name string
		off  bool
	}{{"rollups", false}, {"none", true}} {
		b.Run("fast/"+c.name, func(b *testing.B) {
			rollupsOff = c.off
			defer func() { rollupsOff = false }()
			writerFast(b)
		})
	}
	for _, c := range []struct {
		name string
		off  bool
	}{{"rollups", false}, {"none", true}} {
		b.Run("paced/"+c.name, func(b *testing.B) {
			rollupsOff = c.off
			defer func() { rollupsOff = false }()
			writerPaced(b)
		})
	}
}

func writerFast(b *testing.B) {
	rs := benchSet(b)
	p, err := OpenPebble(PebbleOptions{Dir: b.TempDir()})
	require.NoError(b, err)
	defer p.Close()
	w := NewWriter(p, WriterOptions{Queue: b.N})
	ctx := context.Background()
	b.ResetTimer()
	cpu0 := cpuTime()
	t0 := time.Now()
	for i := range b.N {
		r := rs[i%len(rs)]
		r.ObservationsTimestamp += uint32(i / len(rs) * 1000)
		if !w.Add(r) {
			b.Fatal("dropped")
		}
	}
	add := time.Since(t0)
	require.NoError(b, w.Flush(ctx))
	el := time.Since(t0)
	cpu := cpuTime() - cpu0
	b.StopTimer()
	require.NoError(b, w.Close(ctx))
	b.ReportMetric(float64(b.N)/el.Seconds(), "reports/s")
	b.ReportMetric(float64(add.Nanoseconds())/float64(b.N), "add-ns")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/report")
}

// cpuTime is the CPU time (user and system) this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkWriterPaced: 1,000 streams × 1 report a second through a Writer
// into Pebble for 10 seconds of real time: the Add that waited longest,
// drops, the write lag (Add to commit) as its histogram has it (the
// bucket that holds the 99th percentile), and the CPU the process spent
// per second. Run it with -benchtime=1x.
func BenchmarkWriterPaced(b *testing.B) { writerPaced(b) }

func writerPaced(b *testing.B) {
	rs := simReports(b, 1000, 1)
	for range b.N {
		m, err := NewMetrics(prometheus.NewRegistry())
		require.NoError(b, err)
		p, err := OpenPebble(PebbleOptions{Dir: b.TempDir(), Metrics: m})
		require.NoError(b, err)
		w := NewWriter(p, WriterOptions{Metrics: m})
		var slowest time.Duration
		tick := time.NewTicker(time.Second)
		cpu0, t0 := cpuTime(), time.Now()
		for sec := range 10 {
			for i := range rs {
				r := rs[i]
				r.ObservationsTimestamp += uint32(sec)
				t0 := time.Now()
				if !w.Add(r) {
					b.Fatal("dropped")
				}
				slowest = max(slowest, time.Since(t0))
			}
			<-tick.C
		}
		tick.Stop()
		require.NoError(b, w.Close(context.Background()))
		cpu, el := cpuTime()-cpu0, time.Since(t0)
		require.NoError(b, p.Close())
		var pb dto.Metric
		require.NoError(b, m.lag.Write(&pb))
		h := pb.GetHistogram()
		for _, bk := range h.GetBucket() {
			if float64(bk.GetCumulativeCount()) >= 0.99*float64(h.GetSampleCount()) {
				b.ReportMetric(bk.GetUpperBound()*1000, "lag-p99-le-ms")
				break
			}
		}
		b.ReportMetric(h.GetSampleSum()/float64(h.GetSampleCount())*1000, "lag-mean-ms")
		b.ReportMetric(float64(slowest.Microseconds()), "slowest-add-µs")
		b.ReportMetric(float64(w.Counts().Dropped), "dropped")
		b.ReportMetric(float64(w.Counts().Written), "written")
		b.ReportMetric(float64(cpu.Milliseconds())/el.Seconds(), "cpu-ms/s")
	}
}
