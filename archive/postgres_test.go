package archive

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/internal/testing/pgtest"
)

func TestPostgresConformance(t *testing.T) {
	pg := newPG(t)
	conformance(t, func(t *testing.T) Store { return openPG(t, pg.database(t), nil) })
}

// partitionCount counts the reports table's partitions in the catalog.
func partitionCount(t *testing.T, p *Postgres) int {
	t.Helper()
	var n int
	require.NoError(t, p.pool.QueryRow(context.Background(),
		"SELECT count(*) FROM pg_inherits WHERE inhparent = 'archive_reports'::regclass").Scan(&n))
	return n
}

// Retention drops the partitions wholly before the cutoff (the catalog
// says so) and deletes the rest inside the oldest kept one.
func TestPostgresRetentionDropsPartitions(t *testing.T) {
	ctx := context.Background()
	p := openPG(t, newPG(t).database(t), nil)
	const day = 86400
	base := uint32(20000 * day)
	var batch []Report
	for d := uint32(0); d < 5; d++ {
		batch = append(batch, report(t, "testnet", 1, base+d*day+5, 1), report(t, "testnet", 1, base+d*day+day/2, 1))
	}
	_, err := p.Write(ctx, batch)
	require.NoError(t, err)
	assert.Equal(t, 5, partitionCount(t, p), "a partition per day written, made on demand")
	var names []string
	rows, err := p.pool.Query(ctx, "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'archive_reports'::regclass ORDER BY 1")
	require.NoError(t, err)
	names, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	assert.Equal(t, "archive_reports_20241004", names[0])

	d, err := p.DeleteBefore(ctx, base+3*day+10) // days 0-2 whole, day 3's first report
	require.NoError(t, err)
	assert.Equal(t, int64(7), d.Reports)
	assert.Equal(t, 2, partitionCount(t, p), "three partitions dropped")
	st, err := p.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(3), st.Reports)
	// A write into a dropped day makes its partition again.
	res, err := p.Write(ctx, []Report{report(t, "testnet", 1, base+7, 2)})
	require.NoError(t, err)
	assert.Equal(t, 1, res.Written)
	assert.Equal(t, 3, partitionCount(t, p))
}

// Another replica's retention drops a partition this one saw: the write
// into it makes it again.
func TestPostgresPartitionDroppedElsewhere(t *testing.T) {
	ctx := context.Background()
	u := newPG(t).database(t)
	a, b := openPG(t, u, nil), openPG(t, u, nil)
	_, err := a.Write(ctx, []Report{report(t, "testnet", 1, 86400*20000+5, 1)})
	require.NoError(t, err)
	_, err = b.DeleteBefore(ctx, 86400*20001)
	require.NoError(t, err)
	res, err := a.Write(ctx, []Report{report(t, "testnet", 1, 86400*20000+6, 1)})
	require.NoError(t, err)
	assert.Equal(t, 1, res.Written)
}

// Three replicas (three pools) open the same database at once (the schema
// is migrated once) and write the same reports concurrently: one row
// each, and the duplicates counted add up.
func TestPostgresThreeWriters(t *testing.T) {
	ctx := context.Background()
	u := newPG(t).database(t)
	stores := make([]*Postgres, 3)
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range stores {
		wg.Go(func() {
			stores[i], errs[i] = OpenPostgres(ctx, PostgresOptions{URL: u, Password: pgtest.Password})
		})
	}
	wg.Wait()
	for i, s := range stores {
		require.NoError(t, errs[i])
		t.Cleanup(func() { s.Close() })
	}
	var versions int
	require.NoError(t, stores[0].pool.QueryRow(ctx, "SELECT count(*) FROM schema_migrations").Scan(&versions))
	assert.Equal(t, len(migrations)-1, versions)

	const streams, seconds = 20, 30
	var all []Report
	for s := range streams {
		for sec := range seconds {
			all = append(all, report(t, "testnet", s, uint32(86400*20000+sec*7000), byte(s)))
		}
	}
	results := make([]WriteResult, 3)
	for i, s := range stores {
		wg.Go(func() {
			for off := 0; off < len(all); off += 50 { // batches of 50, as a Writer would
				r, err := s.Write(ctx, all[off:min(off+50, len(all))])
				if err != nil {
					errs[i] = err
					return
				}
				results[i].Written += r.Written
				results[i].Duplicates += r.Duplicates
			}
		})
	}
	wg.Wait()
	var written, dups int
	for i := range stores {
		require.NoError(t, errs[i])
		written += results[i].Written
		dups += results[i].Duplicates
	}
	assert.Equal(t, len(all), written, "each report stored once")
	assert.Equal(t, 2*len(all), dups)
	var rows, distinct int
	require.NoError(t, stores[1].pool.QueryRow(ctx,
		"SELECT count(*), count(DISTINCT (network, stream, observations_ts)) FROM archive_reports").Scan(&rows, &distinct))
	assert.Equal(t, len(all), rows)
	assert.Equal(t, len(all), distinct)
}

// Reopening keeps everything; the schema is not migrated twice.
func TestPostgresReopen(t *testing.T) {
	ctx := context.Background()
	u := newPG(t).database(t)
	p := openPG(t, u, nil)
	_, err := p.Write(ctx, []Report{report(t, "testnet", 1, 100, 1)})
	require.NoError(t, err)
	require.NoError(t, p.Close())
	p = openPG(t, u, nil)
	r, ok, err := p.Get(ctx, "testnet", stream(1), 100)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, report(t, "testnet", 1, 100, 1), r)
}

// A password in the URL is refused; a wrong one given apart fails without
// showing it.
func TestPostgresPassword(t *testing.T) {
	ctx := context.Background()
	u := newPG(t).database(t)
	withPW := strings.Replace(u, "postgres@", "postgres:"+pgtest.Password+"@", 1)
	_, err := OpenPostgres(ctx, PostgresOptions{URL: withPW})
	require.Error(t, err)
	assert.NotContains(t, err.Error(), pgtest.Password)
	assert.Contains(t, err.Error(), "carries a password")
	_, err = OpenPostgres(ctx, PostgresOptions{URL: u + "&password=" + pgtest.Password})
	require.Error(t, err)
	assert.NotContains(t, err.Error(), pgtest.Password)

	const wrong = "not-the-Secret-42"
	_, err = OpenPostgres(ctx, PostgresOptions{URL: u, Password: wrong})
	require.Error(t, err)
	assert.NotContains(t, err.Error(), wrong)
	assert.Equal(t, "auth", ErrorKind(err), fmt.Sprint(err))
}

// Stats counts the bytes of every table the archive keeps in its
// database, as Pebble's count every file of its directory: the reports'
// partitions, the coverage, the rollups, the fill jobs and the schema's
// versions. The test's database holds nothing else, so the catalog's sum
// over all its tables is what Stats must say.
func TestPostgresStatsCountEveryTable(t *testing.T) {
	ctx := context.Background()
	p := openPG(t, newPG(t).database(t), nil)
	const day = 86400
	base := uint32(20000 * day)
	var batch []Report
	for i := range 3 {
		for s := uint32(0); s < 120; s++ {
			batch = append(batch, report(t, "testnet", i, base+s, 1))
		}
	}
	_, err := p.Write(ctx, batch)
	require.NoError(t, err)
	require.NoError(t, p.AddCoverage(ctx, "testnet", stream(0), Span{From: base, To: base + 119}))
	require.NoError(t, p.SaveFill(ctx, FillProgress{FillJob: FillJob{ID: "a", Network: "testnet", Stream: stream(1), From: base, To: base + 119}, State: FillDone}))

	var rollups, all int64
	require.NoError(t, p.pool.QueryRow(ctx, "SELECT count(*) FROM archive_rollups").Scan(&rollups))
	require.Positive(t, rollups, "the reports' rollups are written with them")
	require.NoError(t, p.pool.QueryRow(ctx, `SELECT sum(pg_total_relation_size(c.oid))::bigint FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relkind = 'r'`).Scan(&all))
	st, err := p.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(len(batch)), st.Reports)
	assert.Equal(t, int64(1), st.Spans)
	assert.Equal(t, all, st.BytesOnDisk, "every table of the archive, the rollups' included")
}

// TestPostgresCoverageBatchesThreeWriters: three stores on one database
// (three replicas) record rounds of 200 streams' spans at once, each in
// its own order of the streams, their spans overlapping and touching the
// others': no round fails (the streams' locks are taken in one order, so
// no deadlock), and each stream holds one span, the union of all.
func TestPostgresCoverageBatchesThreeWriters(t *testing.T) {
	ctx := context.Background()
	u := newPG(t).database(t)
	const streams, rounds, writers = 200, 15, 3
	stores := make([]*Postgres, writers)
	for i := range stores {
		stores[i] = openPG(t, u, nil)
	}
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for w, s := range stores {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for r := range rounds {
				spans := make([]StreamSpan, 0, streams)
				for _, i := range rng.Perm(streams) {
					// Writer w's span of round r: 10 seconds from r*10+w*4,
					// overlapping or touching its neighbours'.
					from := uint32(r*10 + w*4)
					spans = append(spans, StreamSpan{Network: "testnet", Stream: stream(i + 1), Span: Span{from, from + 9}})
				}
				if err := s.AddCoverages(ctx, spans); err != nil {
					errs[w] = fmt.Errorf("round %d: %w", r, err)
					return
				}
			}
		})
	}
	wg.Wait()
	for w := range errs {
		require.NoError(t, errs[w], "writer %d", w)
	}
	want := []Span{{0, uint32((rounds-1)*10 + (writers-1)*4 + 9)}}
	for i := range streams {
		got, err := stores[0].Coverage(ctx, "testnet", stream(i+1), 0, 4294967295)
		require.NoError(t, err)
		require.Equal(t, want, got, "stream %d", i+1)
	}
	var rows int
	require.NoError(t, stores[1].pool.QueryRow(ctx, "SELECT count(*) FROM archive_coverage").Scan(&rows))
	assert.Equal(t, streams, rows, "one row a stream")
}
