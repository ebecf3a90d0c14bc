package archive

import (
	"context"
	"fmt"
	"math/big"

	"github.com/jackc/pgx/v5"

	"streamgate/don"
	"streamgate/feedid"
)

// The rollups' table in PostgreSQL: a row per (network, stream, level,
// field, bucket), the same for every replica. Replicas writing at once
// merge into a row (INSERT … ON CONFLICT DO UPDATE: the earlier first,
// the later last, the extremes), each adding only the reports its own
// insert stored, so a report is counted once whichever replica stored it.
const rollupMigration = `
CREATE TABLE archive_rollups (
	network   text     NOT NULL,
	stream    bytea    NOT NULL,
	level     integer  NOT NULL,
	field     text     NOT NULL,
	bucket    bigint   NOT NULL,
	reports   bigint   NOT NULL,
	undecoded bigint   NOT NULL,
	first_ts  bigint   NOT NULL,
	last_ts   bigint   NOT NULL,
	open      numeric,
	high      numeric,
	low       numeric,
	close     numeric,
	PRIMARY KEY (network, stream, level, field, bucket)
);`

func init() { migrations = append(migrations, rollupMigration) }

// undecodedField is the field of the row that holds the count of a
// bucket's reports that did not decode, when none did.
const undecodedField = ""

const upsertRollups = `INSERT INTO archive_rollups AS r
	(network, stream, level, field, bucket, reports, undecoded, first_ts, last_ts, open, high, low, close)
SELECT * FROM unnest($1::text[], $2::bytea[], $3::integer[], $4::text[], $5::bigint[], $6::bigint[], $7::bigint[],
	$8::bigint[], $9::bigint[], $10::numeric[], $11::numeric[], $12::numeric[], $13::numeric[])
ON CONFLICT (network, stream, level, field, bucket) DO UPDATE SET
	open      = CASE WHEN r.reports = 0 OR (EXCLUDED.reports > 0 AND EXCLUDED.first_ts < r.first_ts) THEN EXCLUDED.open ELSE r.open END,
	close     = CASE WHEN r.reports = 0 OR (EXCLUDED.reports > 0 AND EXCLUDED.last_ts > r.last_ts) THEN EXCLUDED.close ELSE r.close END,
	first_ts  = CASE WHEN r.reports = 0 THEN EXCLUDED.first_ts WHEN EXCLUDED.reports = 0 THEN r.first_ts ELSE least(r.first_ts, EXCLUDED.first_ts) END,
	last_ts   = CASE WHEN r.reports = 0 THEN EXCLUDED.last_ts WHEN EXCLUDED.reports = 0 THEN r.last_ts ELSE greatest(r.last_ts, EXCLUDED.last_ts) END,
	high      = greatest(r.high, EXCLUDED.high),
	low       = least(r.low, EXCLUDED.low),
	reports   = r.reports + EXCLUDED.reports,
	undecoded = r.undecoded + EXCLUDED.undecoded`

// rollupRows are the columns of upsertRollups.
type rollupRows struct {
	nets                                     []string
	streams                                  [][]byte
	levels                                   []int32
	fields                                   []string
	buckets, reports, undecoded, first, last []int64
	open, high, low, close                   []*string
}

func numeric(v *big.Int) *string {
	if v == nil {
		return nil
	}
	s := v.String()
	return &s
}

// add adds a's rows: one per scaled field of the stream's schema, or one
// of undecodedField when no report of the bucket decoded.
func (rr *rollupRows) add(k rollupKey, a *agg) {
	names := ScaledFields(don.SchemaOf(k.stream[:]))
	if a.n == 0 || len(names) != len(a.o) {
		names = []string{undecodedField}
	}
	for i, name := range names {
		b := a.bar(k.start, i)
		rr.nets = append(rr.nets, k.network)
		rr.streams = append(rr.streams, append([]byte(nil), k.stream[:]...))
		rr.levels = append(rr.levels, int32(RollupLevels[k.level]))
		rr.fields = append(rr.fields, name)
		rr.buckets = append(rr.buckets, int64(k.start))
		rr.reports = append(rr.reports, int64(b.Reports))
		rr.undecoded = append(rr.undecoded, int64(b.Undecoded))
		rr.first = append(rr.first, int64(b.First))
		rr.last = append(rr.last, int64(b.Last))
		rr.open = append(rr.open, numeric(b.Open))
		rr.high = append(rr.high, numeric(b.High))
		rr.low = append(rr.low, numeric(b.Low))
		rr.close = append(rr.close, numeric(b.Close))
	}
}

func (rr *rollupRows) exec(ctx context.Context, tx pgx.Tx) error {
	if len(rr.nets) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, upsertRollups, rr.nets, rr.streams, rr.levels, rr.fields, rr.buckets, rr.reports, rr.undecoded,
		rr.first, rr.last, rr.open, rr.high, rr.low, rr.close)
	return err
}

// insertWithRollups inserts the reports (the columns of insertReports)
// and, in the same transaction, merges the rollups of the ones it stored
// (RETURNING names them). It returns how many it stored.
func (p *Postgres) insertWithRollups(ctx context.Context, reports []Report, vals [][]*big.Int,
	nets []string, streams [][]byte, obs, valid []int64, full [][]byte) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		n = 0
		rows, err := tx.Query(ctx, insertReports+" RETURNING network, stream, observations_ts", nets, streams, obs, valid, full)
		if err != nil {
			return err
		}
		type key struct {
			network string
			stream  string
			ts      int64
		}
		inserted := map[key]bool{}
		for rows.Next() {
			var k key
			var sb []byte
			if err := rows.Scan(&k.network, &sb, &k.ts); err != nil {
				rows.Close()
				return err
			}
			k.stream = string(sb)
			inserted[k] = true
		}
		if err := rows.Err(); err != nil {
			return err
		}
		n = int64(len(inserted))
		var idx []int
		for i := range reports {
			k := key{nets[i], string(streams[i]), obs[i]}
			if inserted[k] {
				idx = append(idx, i)
				delete(inserted, k) // the first of a call's repeats is the one stored
			}
		}
		m := aggregate(reports, vals, idx)
		var rr rollupRows
		for _, k := range sortedKeys(m) {
			rr.add(k, m[k])
		}
		return rr.exec(ctx, tx)
	})
	return n, err
}

// Rollups implements RollupReader.
func (p *Postgres) Rollups(ctx context.Context, network string, stream feedid.ID, level uint32, field string, from, to uint32) ([]Bar, error) {
	sb, err := checkQuery(network, stream)
	if err != nil {
		return nil, err
	}
	if _, ok := levelIndex(level); !ok {
		return nil, fmt.Errorf("archive: %d s is not a rollup level", level)
	}
	if _, err := fieldIndex(sb, field); err != nil || from > to {
		return nil, err
	}
	// A bucket none of whose reports decoded has only the undecoded row.
	rows, err := p.pool.Query(ctx, `SELECT bucket, reports, undecoded, first_ts, last_ts,
	open::text, high::text, low::text, close::text
FROM archive_rollups WHERE network = $1 AND stream = $2 AND level = $3 AND field = ANY($4) AND bucket BETWEEN $5 AND $6
ORDER BY bucket, field DESC`, network, sb[:], int32(level), []string{field, undecodedField}, int64(from), int64(to))
	if err != nil {
		p.metrics.failed("read", err)
		return nil, fmt.Errorf("archive: postgres: %w", err)
	}
	defer rows.Close()
	var out []Bar
	for rows.Next() {
		var bucket, n, und, first, last int64
		var o, h, l, c *string
		if err := rows.Scan(&bucket, &n, &und, &first, &last, &o, &h, &l, &c); err != nil {
			return nil, fmt.Errorf("archive: postgres: %w", err)
		}
		if len(out) > 0 && out[len(out)-1].Start == uint32(bucket) {
			out[len(out)-1].Undecoded += uint32(und) // the field's row came first
			continue
		}
		b := Bar{Start: uint32(bucket), Reports: uint32(n), Undecoded: uint32(und), First: uint32(first), Last: uint32(last)}
		if n > 0 {
			if b.Open, err = parseNumeric(o); err == nil {
				if b.High, err = parseNumeric(h); err == nil {
					if b.Low, err = parseNumeric(l); err == nil {
						b.Close, err = parseNumeric(c)
					}
				}
			}
			if err != nil {
				return nil, err
			}
		}
		out = append(out, b)
	}
	if err := rows.Err(); err != nil {
		p.metrics.failed("read", err)
		return nil, fmt.Errorf("archive: postgres: %w", err)
	}
	return out, nil
}

func parseNumeric(s *string) (*big.Int, error) {
	if s == nil {
		return nil, fmt.Errorf("archive: postgres: a rollup without a value")
	}
	v, ok := new(big.Int).SetString(*s, 10)
	if !ok {
		return nil, fmt.Errorf("archive: postgres: a rollup's value %q is not an integer", *s)
	}
	return v, nil
}

// RollupBefore implements RollupReader.
func (p *Postgres) RollupBefore(ctx context.Context, network string, stream feedid.ID, ts uint32) (uint32, bool, error) {
	sb, err := checkQuery(network, stream)
	if err != nil {
		return 0, false, err
	}
	var start *int64
	err = p.pool.QueryRow(ctx, `SELECT max(bucket) FROM archive_rollups
WHERE network = $1 AND stream = $2 AND level = $3 AND bucket < $4`, network, sb[:], int32(RollupLevels[0]), int64(ts)).Scan(&start)
	if err != nil {
		return 0, false, fmt.Errorf("archive: postgres: %w", err)
	}
	if start == nil {
		return 0, false, nil
	}
	return uint32(*start), true, nil
}

// RebuildRollups implements RollupStore: in one transaction under the
// stream's advisory lock, the widened span's rollups are deleted and made
// again from its reports.
func (p *Postgres) RebuildRollups(ctx context.Context, network string, stream feedid.ID, from, to uint32) error {
	sb, err := checkQuery(network, stream)
	if err != nil {
		return err
	}
	if from > to {
		return ErrBadSpan
	}
	lo, hi := dayBounds(from, to)
	err = pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", streamLock(network, sb)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM archive_rollups WHERE network = $1 AND stream = $2 AND bucket BETWEEN $3 AND $4`,
			network, sb[:], int64(lo), int64(hi)); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, selectReport+"WHERE network = $1 AND stream = $2 AND observations_ts BETWEEN $3 AND $4",
			network, sb[:], int64(lo), int64(hi))
		if err != nil {
			return err
		}
		reports, err := scanReports(rows, network)
		if err != nil {
			return err
		}
		idx := make([]int, len(reports))
		for i := range idx {
			idx[i] = i
		}
		m := aggregate(reports, rollupValues(reports), idx)
		var rr rollupRows
		for _, k := range sortedKeys(m) {
			rr.add(k, m[k])
		}
		return rr.exec(ctx, tx)
	})
	if err != nil {
		return fmt.Errorf("archive: postgres: rebuild rollups: %w", err)
	}
	return nil
}

// deleteRollupsBefore deletes, in tx, every rollup whose bucket starts
// before cutoff.
func deleteRollupsBefore(ctx context.Context, tx pgx.Tx, cutoff uint32) error {
	_, err := tx.Exec(ctx, "DELETE FROM archive_rollups WHERE bucket < $1", int64(cutoff))
	return err
}
