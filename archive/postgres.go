package archive

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"streamgate/feedid"
)

// PostgresOptions are the PostgreSQL store's settings.
type PostgresOptions struct {
	// URL is postgres://user@host:port/database?…, without a password:
	// one in it is refused (it would show wherever the URL does).
	URL string
	// Password is the user's password (the configuration's password or
	// password_file); never in an error or a log line.
	Password string
	// MaxConns bounds the pool; 0: 8.
	MaxConns int32
	Metrics  *Metrics // nil: none
}

// partitionSeconds is the span of one partition of the reports table: a
// UTC day of observationsTimestamp.
const partitionSeconds = 86400

// migrations are the schema's versions, applied in order, each in its own
// transaction, at most once (schema_migrations).
var migrations = []string{
	1: `
CREATE TABLE archive_reports (
	network         text   NOT NULL,
	stream          bytea  NOT NULL,
	observations_ts bigint NOT NULL,
	valid_from_ts   bigint NOT NULL,
	full_report     bytea  NOT NULL,
	PRIMARY KEY (network, stream, observations_ts)
) PARTITION BY RANGE (observations_ts);
CREATE TABLE archive_coverage (
	network text   NOT NULL,
	stream  bytea  NOT NULL,
	from_ts bigint NOT NULL,
	to_ts   bigint NOT NULL,
	PRIMARY KEY (network, stream, from_ts)
);`,
	2: `
CREATE TABLE archive_fill_jobs (
	id      text        PRIMARY KEY,
	created timestamptz NOT NULL,
	job     jsonb       NOT NULL
);`,
}

// Advisory lock keys (pg_advisory_lock's bigint): the schema's migration,
// and the partitions' creation and removal.
const (
	lockMigrate   = 0x73676172636d6967 // "sgarcmig"
	lockPartition = 0x7367617263707274 // "sgarcprt"
)

// Postgres is the Store in PostgreSQL, shared by the replicas: one reports
// table partitioned by day of observations_ts, keyed by (network, stream,
// observations_ts), and a coverage table. Like Pebble, it is one store
// behind Store, RollupReader and JobStore, hence more than 20 methods.
type Postgres struct {
	pool    *pgxpool.Pool
	metrics *Metrics

	mu    sync.Mutex
	parts map[int64]bool // days whose partition this process made or saw
}

var _ Store = (*Postgres)(nil)

// OpenPostgres connects to o.URL with o.Password and creates or migrates
// the schema (under an advisory lock, so that replicas starting at once
// migrate it once).
func OpenPostgres(ctx context.Context, o PostgresOptions) (*Postgres, error) {
	u, err := url.Parse(o.URL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || u.Host == "" {
		return nil, errors.New("archive: the PostgreSQL URL is not postgres://user@host:port/database")
	}
	if _, has := u.User.Password(); has || u.Query().Has("password") {
		return nil, errors.New("archive: the PostgreSQL URL carries a password: give it apart (password or password_file), not in the URL")
	}
	cfg, err := pgxpool.ParseConfig(o.URL)
	if err != nil {
		return nil, fmt.Errorf("archive: the PostgreSQL URL: %w", err)
	}
	cfg.ConnConfig.Password = o.Password
	cfg.MaxConns = o.MaxConns
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 8
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("archive: postgres: %w", redact(err, o.Password))
	}
	p := &Postgres{pool: pool, metrics: o.Metrics, parts: map[int64]bool{}}
	if err := p.migrate(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("archive: postgres: migrate the schema: %w", redact(err, o.Password))
	}
	return p, nil
}

// redact keeps a password out of an error's text, whatever the driver
// put in it.
func redact(err error, password string) error {
	if err == nil || password == "" || !strings.Contains(err.Error(), password) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), password, "[password]"))
}

// migrate applies the migrations not applied yet, in order.
func (p *Postgres) migrate(ctx context.Context) error {
	conn, err := p.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(lockMigrate)); err != nil {
		return err
	}
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", int64(lockMigrate))
	}()
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    integer     PRIMARY KEY,
	applied_at timestamptz NOT NULL DEFAULT now()
)`); err != nil {
		return err
	}
	var have int
	if err := conn.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM schema_migrations").Scan(&have); err != nil {
		return err
	}
	if have >= len(migrations)-1 {
		return nil // a newer binary may have migrated further: its schema keeps ours
	}
	for v := have + 1; v < len(migrations); v++ {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, migrations[v]); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version) VALUES ($1)", v)
			return err
		})
		if err != nil {
			return fmt.Errorf("migration %d: %w", v, err)
		}
	}
	return nil
}

// partitionName is the name of day's partition: archive_reports_YYYYMMDD.
func partitionName(day int64) string {
	return "archive_reports_" + time.Unix(day*partitionSeconds, 0).UTC().Format("20060102")
}

// ensurePartitions makes the partitions of the days of reports that this
// process has not seen made, one replica at a time (an advisory lock:
// CREATE TABLE IF NOT EXISTS alone races in the catalog).
func (p *Postgres) ensurePartitions(ctx context.Context, reports []Report) error {
	var need []int64
	p.mu.Lock()
	for i := range reports {
		d := int64(reports[i].ObservationsTimestamp) / partitionSeconds
		if !p.parts[d] {
			p.parts[d] = true // cleared below on failure
			need = append(need, d)
		}
	}
	p.mu.Unlock()
	if len(need) == 0 {
		return nil
	}
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(lockPartition)); err != nil {
			return err
		}
		for _, d := range need {
			q := fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s PARTITION OF archive_reports FOR VALUES FROM (%d) TO (%d)",
				partitionName(d), d*partitionSeconds, (d+1)*partitionSeconds)
			if _, err := tx.Exec(ctx, q); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		p.forgetPartitions()
	}
	return err
}

// forgetPartitions forgets the partitions seen: the next write asks again
// (another replica's retention may have dropped one).
func (p *Postgres) forgetPartitions() {
	p.mu.Lock()
	clear(p.parts)
	p.mu.Unlock()
}

const insertReports = `INSERT INTO archive_reports (network, stream, observations_ts, valid_from_ts, full_report)
SELECT * FROM unnest($1::text[], $2::bytea[], $3::bigint[], $4::bigint[], $5::bytea[])
ON CONFLICT DO NOTHING`

// Write implements Store: one INSERT … ON CONFLICT DO NOTHING of the
// whole batch, so replicas writing the same reports make one row each;
// the rows it did not insert are the duplicates.
func (p *Postgres) Write(ctx context.Context, reports []Report) (WriteResult, error) {
	if err := checkAll(reports); err != nil {
		return WriteResult{}, err
	}
	if len(reports) == 0 {
		return WriteResult{}, nil
	}
	n := len(reports)
	nets, streams, obs, valid, full := make([]string, n), make([][]byte, n), make([]int64, n), make([]int64, n), make([][]byte, n)
	for i := range reports {
		r := &reports[i]
		sb, _ := streamBytes(r.Stream)
		nets[i], streams[i], full[i] = r.Network, sb[:], r.FullReport
		obs[i], valid[i] = int64(r.ObservationsTimestamp), int64(r.ValidFromTimestamp)
	}
	var written int64
	vals := rollupValues(reports) // the rollups of the rows stored go in the same transaction
	err := p.ensurePartitions(ctx, reports)
	if err == nil {
		written, err = p.insertWithRollups(ctx, reports, vals, nets, streams, obs, valid, full)
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23514" { // no partition for a row: dropped by another replica's retention
			p.forgetPartitions()
			if err = p.ensurePartitions(ctx, reports); err == nil {
				written, err = p.insertWithRollups(ctx, reports, vals, nets, streams, obs, valid, full)
			}
		}
	}
	if err != nil {
		p.forgetPartitions()
		p.metrics.failed("write", err)
		return WriteResult{}, fmt.Errorf("archive: postgres: write %d reports: %w", n, err)
	}
	res := WriteResult{Written: int(written)}
	res.Duplicates = n - res.Written
	p.metrics.wrote(res)
	return res, nil
}

const selectReport = `SELECT stream, observations_ts, valid_from_ts, full_report FROM archive_reports `

func scanReports(rows pgx.Rows, network string) ([]Report, error) {
	var out []Report
	for rows.Next() {
		var stream, full []byte
		var obs, valid int64
		if err := rows.Scan(&stream, &obs, &valid, &full); err != nil {
			return nil, err
		}
		out = append(out, Report{Network: network, Stream: streamID(stream),
			ObservationsTimestamp: uint32(obs), ValidFromTimestamp: uint32(valid), FullReport: full})
	}
	return out, rows.Err()
}

// Get implements Store.
func (p *Postgres) Get(ctx context.Context, network string, stream feedid.ID, ts uint32) (Report, bool, error) {
	out, err := p.query(ctx, network, stream, selectReport+"WHERE network = $1 AND stream = $2 AND observations_ts = $3", int64(ts))
	p.metrics.read(1, len(out), err)
	if err != nil || len(out) == 0 {
		return Report{}, false, err
	}
	return out[0], true, nil
}

// Page implements Store.
func (p *Postgres) Page(ctx context.Context, network string, stream feedid.ID, start uint32, limit int) ([]Report, error) {
	if limit <= 0 {
		_, err := checkQuery(network, stream)
		return nil, err
	}
	out, err := p.query(ctx, network, stream,
		selectReport+"WHERE network = $1 AND stream = $2 AND observations_ts >= $3 ORDER BY observations_ts LIMIT $4", int64(start), limit)
	p.metrics.read(len(out), len(out), err)
	return out, err
}

func (p *Postgres) query(ctx context.Context, network string, stream feedid.ID, q string, args ...any) ([]Report, error) {
	sb, err := checkQuery(network, stream)
	if err != nil {
		return nil, err
	}
	rows, err := p.pool.Query(ctx, q, append([]any{network, sb[:]}, args...)...)
	if err != nil {
		p.metrics.failed("read", err)
		return nil, fmt.Errorf("archive: postgres: %w", err)
	}
	out, err := scanReports(rows, network)
	if err != nil {
		p.metrics.failed("read", err)
		return nil, fmt.Errorf("archive: postgres: %w", err)
	}
	return out, nil
}

// At implements Store.
func (p *Postgres) At(ctx context.Context, network string, streams []feedid.ID, ts uint32) ([]Report, error) {
	keys := make([][]byte, len(streams))
	for i, s := range streams {
		sb, err := checkQuery(network, s)
		if err != nil {
			return nil, err
		}
		keys[i] = sb[:]
	}
	rows, err := p.pool.Query(ctx, selectReport+"WHERE network = $1 AND stream = ANY($2) AND observations_ts = $3", network, keys, int64(ts))
	var found []Report
	if err == nil {
		found, err = scanReports(rows, network)
	}
	if err != nil {
		p.metrics.failed("read", err)
		p.metrics.read(len(streams), 0, err)
		return nil, fmt.Errorf("archive: postgres: %w", err)
	}
	by := make(map[feedid.ID]Report, len(found))
	for _, r := range found {
		by[r.Stream] = r
	}
	var out []Report
	for _, s := range streams {
		if r, ok := by[s]; ok {
			out = append(out, r)
		}
	}
	p.metrics.read(len(streams), len(out), nil)
	return out, nil
}

// streamLock is the advisory lock key of a (network, stream)'s coverage.
func streamLock(network string, sb [32]byte) int64 {
	h := fnv.New64a()
	h.Write([]byte(network))
	h.Write([]byte{0})
	h.Write(sb[:])
	return int64(h.Sum64())
}

// AddCoverage implements Store: under the stream's advisory lock, the
// spans it touches are replaced by their union with span.
func (p *Postgres) AddCoverage(ctx context.Context, network string, stream feedid.ID, span Span) error {
	sb, err := checkQuery(network, stream)
	if err != nil {
		return err
	}
	if span.From > span.To {
		return ErrBadSpan
	}
	err = pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", streamLock(network, sb)); err != nil {
			return err
		}
		var lo, hi *int64
		err := tx.QueryRow(ctx, `WITH gone AS (
	DELETE FROM archive_coverage
	WHERE network = $1 AND stream = $2 AND to_ts >= $3::bigint - 1 AND from_ts <= $4::bigint + 1
	RETURNING from_ts, to_ts)
SELECT min(from_ts), max(to_ts) FROM gone`, network, sb[:], int64(span.From), int64(span.To)).Scan(&lo, &hi)
		if err != nil {
			return err
		}
		from, to := int64(span.From), int64(span.To)
		if lo != nil {
			from, to = min(from, *lo), max(to, *hi)
		}
		_, err = tx.Exec(ctx, "INSERT INTO archive_coverage (network, stream, from_ts, to_ts) VALUES ($1, $2, $3, $4)",
			network, sb[:], from, to)
		return err
	})
	if err != nil {
		p.metrics.failed("coverage", err)
		return fmt.Errorf("archive: postgres: %w", err)
	}
	return nil
}

// AddCoverages implements CoverageBatcher: the whole round in one
// transaction of five statements, whatever its number of streams. Every
// stream's advisory lock (AddCoverage's) is taken first, in the order of
// their keys, so that replicas recording the same streams at once wait
// for each other and never deadlock; then the spans that touch the new
// ones are read, merged with them as AddCoverage merges each in turn (a
// later span of a stream with an earlier one of the same call), deleted,
// and their unions inserted.
func (p *Postgres) AddCoverages(ctx context.Context, spans []StreamSpan) error {
	type key struct {
		network string
		stream  [32]byte
	}
	news := make(map[key][]Span, len(spans))
	var keys []key
	for _, s := range spans {
		sb, err := checkQuery(s.Network, s.Stream)
		if err != nil {
			return err
		}
		if s.Span.From > s.Span.To {
			return ErrBadSpan
		}
		k := key{s.Network, sb}
		if _, ok := news[k]; !ok {
			keys = append(keys, k)
		}
		news[k] = append(news[k], s.Span)
	}
	if len(spans) == 0 {
		return nil
	}
	locks := make([]int64, 0, len(keys))
	for _, k := range keys {
		locks = append(locks, streamLock(k.network, k.stream))
	}
	slices.Sort(locks)
	locks = slices.Compact(locks)
	n := len(spans)
	nets, streams, froms, tos := make([]string, 0, n), make([][]byte, 0, n), make([]int64, 0, n), make([]int64, 0, n)
	for _, k := range keys {
		for _, sp := range news[k] {
			nets, streams = append(nets, k.network), append(streams, k.stream[:])
			froms, tos = append(froms, int64(sp.From)), append(tos, int64(sp.To))
		}
	}
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		// unnest gives the keys in the array's order, ascending.
		if _, err := tx.Exec(ctx, "SELECT count(pg_advisory_xact_lock(k)) FROM unnest($1::bigint[]) AS k", locks); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT DISTINCT c.network, c.stream, c.from_ts, c.to_ts FROM archive_coverage c
JOIN unnest($1::text[], $2::bytea[], $3::bigint[], $4::bigint[]) AS s(network, stream, from_ts, to_ts)
ON c.network = s.network AND c.stream = s.stream AND c.to_ts >= s.from_ts - 1 AND c.from_ts <= s.to_ts + 1`,
			nets, streams, froms, tos)
		if err != nil {
			return err
		}
		old := make(map[key][]Span)
		var dnets []string
		var dstreams [][]byte
		var dfroms []int64
		for rows.Next() {
			var network string
			var sb []byte
			var a, b int64
			if err := rows.Scan(&network, &sb, &a, &b); err != nil {
				rows.Close()
				return err
			}
			k := key{network: network}
			copy(k.stream[:], sb)
			old[k] = append(old[k], Span{uint32(a), uint32(b)})
			dnets, dstreams, dfroms = append(dnets, network), append(dstreams, sb), append(dfroms, a)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		nets, streams, froms, tos = nets[:0], streams[:0], froms[:0], tos[:0]
		for _, k := range keys {
			for _, sp := range mergeTouching(append(old[k], news[k]...)) {
				nets, streams = append(nets, k.network), append(streams, k.stream[:])
				froms, tos = append(froms, int64(sp.From)), append(tos, int64(sp.To))
			}
		}
		if len(dnets) > 0 {
			if _, err := tx.Exec(ctx, `DELETE FROM archive_coverage c
USING unnest($1::text[], $2::bytea[], $3::bigint[]) AS d(network, stream, from_ts)
WHERE c.network = d.network AND c.stream = d.stream AND c.from_ts = d.from_ts`, dnets, dstreams, dfroms); err != nil {
				return err
			}
		}
		_, err = tx.Exec(ctx, `INSERT INTO archive_coverage (network, stream, from_ts, to_ts)
SELECT * FROM unnest($1::text[], $2::bytea[], $3::bigint[], $4::bigint[])`, nets, streams, froms, tos)
		return err
	})
	if err != nil {
		p.metrics.failed("coverage", err)
		return fmt.Errorf("archive: postgres: %w", err)
	}
	return nil
}

// mergeTouching returns the unions of the spans that overlap or touch
// (one ends the second before the other starts), ascending: what
// AddCoverage makes of the spans it replaces and a new one, whichever
// order the new ones come in.
func mergeTouching(spans []Span) []Span {
	slices.SortFunc(spans, func(a, b Span) int { return cmp.Compare(a.From, b.From) })
	var out []Span
	for _, sp := range spans {
		if last := len(out) - 1; last >= 0 && int64(sp.From) <= int64(out[last].To)+1 {
			out[last].To = max(out[last].To, sp.To)
			continue
		}
		out = append(out, sp)
	}
	return out
}

// Coverage implements Store.
func (p *Postgres) Coverage(ctx context.Context, network string, stream feedid.ID, from, to uint32) ([]Span, error) {
	sb, err := checkQuery(network, stream)
	if err != nil {
		return nil, err
	}
	if from > to {
		return nil, ErrBadSpan
	}
	rows, err := p.pool.Query(ctx, `SELECT from_ts, to_ts FROM archive_coverage
WHERE network = $1 AND stream = $2 AND to_ts >= $3 AND from_ts <= $4 ORDER BY from_ts`, network, sb[:], int64(from), int64(to))
	if err != nil {
		p.metrics.failed("coverage", err)
		return nil, fmt.Errorf("archive: postgres: %w", err)
	}
	var out []Span
	for rows.Next() {
		var a, b int64
		if err := rows.Scan(&a, &b); err != nil {
			rows.Close()
			return nil, fmt.Errorf("archive: postgres: %w", err)
		}
		out = append(out, Span{uint32(a), uint32(b)})
	}
	if err := rows.Err(); err != nil {
		p.metrics.failed("coverage", err)
		return nil, fmt.Errorf("archive: postgres: %w", err)
	}
	return out, nil
}

// CoveredStreams implements StreamLister: the coverage table holds a row
// a span, not a report.
func (p *Postgres) CoveredStreams(ctx context.Context, since uint32) ([]StreamRef, error) {
	rows, err := p.pool.Query(ctx, `SELECT DISTINCT network COLLATE "C", stream FROM archive_coverage
WHERE to_ts >= $1 ORDER BY 1, 2`, int64(since))
	if err != nil {
		p.metrics.failed("coverage", err)
		return nil, fmt.Errorf("archive: postgres: %w", err)
	}
	var out []StreamRef
	for rows.Next() {
		var network string
		var sb []byte
		if err := rows.Scan(&network, &sb); err != nil {
			rows.Close()
			return nil, fmt.Errorf("archive: postgres: %w", err)
		}
		out = append(out, StreamRef{Network: network, Stream: streamID(sb)})
	}
	if err := rows.Err(); err != nil {
		p.metrics.failed("coverage", err)
		return nil, fmt.Errorf("archive: postgres: %w", err)
	}
	return out, nil
}

// partitions returns the days of the reports table's partitions, as the
// catalog has them.
func (p *Postgres) partitions(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}) (map[int64]string, error) {
	rows, err := q.Query(ctx, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'archive_reports'::regclass`)
	if err != nil {
		return nil, err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	out := map[int64]string{}
	for _, n := range names {
		t, err := time.Parse("20060102", strings.TrimPrefix(n, "archive_reports_"))
		if err != nil {
			continue // not one of ours
		}
		out[t.Unix()/partitionSeconds] = n
	}
	return out, nil
}

// DeleteBefore implements Store: the partitions wholly before cutoff are
// dropped (their rows counted first), the rest of the reports before it
// (in the partition of cutoff's day) deleted; one replica at a time.
func (p *Postgres) DeleteBefore(ctx context.Context, cutoff uint32) (Deleted, error) {
	var d Deleted
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(lockPartition)); err != nil {
			return err
		}
		parts, err := p.partitions(ctx, tx)
		if err != nil {
			return err
		}
		for day, name := range parts {
			if (day+1)*partitionSeconds > int64(cutoff) {
				continue
			}
			var n int64
			if err := tx.QueryRow(ctx, "SELECT count(*) FROM "+name).Scan(&n); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, "DROP TABLE "+name); err != nil {
				return err
			}
			d.Reports += n
		}
		tag, err := tx.Exec(ctx, "DELETE FROM archive_reports WHERE observations_ts < $1", int64(cutoff))
		if err != nil {
			return err
		}
		d.Reports += tag.RowsAffected()
		if err := deleteRollupsBefore(ctx, tx, cutoff); err != nil {
			return err
		}
		tag, err = tx.Exec(ctx, "DELETE FROM archive_coverage WHERE to_ts < $1", int64(cutoff))
		if err != nil {
			return err
		}
		d.Spans += tag.RowsAffected()
		tag, err = tx.Exec(ctx, "UPDATE archive_coverage SET from_ts = $1 WHERE from_ts < $1", int64(cutoff))
		if err != nil {
			return err
		}
		d.Spans += tag.RowsAffected()
		return nil
	})
	p.forgetPartitions()
	if err != nil {
		p.metrics.failed("retention", err)
		return Deleted{}, fmt.Errorf("archive: postgres: retention: %w", err)
	}
	p.metrics.deleted(d)
	return d, nil
}

// Stats implements Store: the count of reports is exact (a count of the
// primary key), the bytes those of every table the archive keeps (the
// reports' partitions, the coverage, the rollups, the fill jobs and the
// schema's versions) with their indexes and TOAST, as Pebble's are
// every file of its directory.
func (p *Postgres) Stats(ctx context.Context) (Stats, error) {
	var s Stats
	err := p.pool.QueryRow(ctx, `SELECT
	(SELECT count(*) FROM archive_reports),
	(SELECT count(*) FROM archive_coverage),
	(SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c
	 WHERE c.oid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'archive_reports'::regclass)
	    OR c.oid IN ('archive_coverage'::regclass, 'archive_rollups'::regclass,
	                 'archive_fill_jobs'::regclass, 'schema_migrations'::regclass))`).Scan(&s.Reports, &s.Spans, &s.BytesOnDisk)
	if err != nil {
		p.metrics.failed("stats", err)
		return Stats{}, fmt.Errorf("archive: postgres: %w", err)
	}
	p.metrics.stats(s)
	return s, nil
}

// Close implements Store.
func (p *Postgres) Close() error {
	p.pool.Close()
	return nil
}

// Streams implements Store: the streams of network's coverage and, one
// index probe a stream (a loose scan of the reports' primary key), of its
// reports; each stream's oldest and newest report and its coverage.
func (p *Postgres) Streams(ctx context.Context, network string) ([]StreamInfo, error) {
	if !validNetwork(network) {
		return nil, fmt.Errorf("archive: network %q is not a network name", network)
	}
	rows, err := p.pool.Query(ctx, `WITH RECURSIVE r(stream) AS (
	(SELECT stream FROM archive_reports WHERE network = $1 ORDER BY stream LIMIT 1)
	UNION ALL
	SELECT (SELECT a.stream FROM archive_reports a WHERE a.network = $1 AND a.stream > r.stream ORDER BY a.stream LIMIT 1)
	FROM r WHERE r.stream IS NOT NULL
), s(stream) AS (
	SELECT stream FROM r WHERE stream IS NOT NULL
	UNION
	SELECT DISTINCT stream FROM archive_coverage WHERE network = $1
)
SELECT s.stream,
	(SELECT min(observations_ts) FROM archive_reports a WHERE a.network = $1 AND a.stream = s.stream),
	(SELECT max(observations_ts) FROM archive_reports a WHERE a.network = $1 AND a.stream = s.stream),
	(SELECT count(*) FROM archive_coverage c WHERE c.network = $1 AND c.stream = s.stream),
	(SELECT coalesce(sum(c.to_ts - c.from_ts + 1), 0)::bigint FROM archive_coverage c WHERE c.network = $1 AND c.stream = s.stream)
FROM s ORDER BY s.stream`, network)
	if err != nil {
		p.metrics.failed("read", err)
		return nil, fmt.Errorf("archive: postgres: %w", err)
	}
	var out []StreamInfo
	for rows.Next() {
		var sb []byte
		var first, last *int64
		var si StreamInfo
		var covered int64
		if err := rows.Scan(&sb, &first, &last, &si.Spans, &covered); err != nil {
			rows.Close()
			return nil, fmt.Errorf("archive: postgres: %w", err)
		}
		si.Stream, si.Covered = streamID(sb), uint64(covered)
		if first != nil && last != nil {
			si.Reports, si.First, si.Last = true, uint32(*first), uint32(*last)
		}
		out = append(out, si)
	}
	if err := rows.Err(); err != nil {
		p.metrics.failed("read", err)
		return nil, fmt.Errorf("archive: postgres: %w", err)
	}
	return out, nil
}
