package archive

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
)

var _ JobStore = (*Postgres)(nil)

// SaveFill stores p (JobStore).
func (p *Postgres) SaveFill(ctx context.Context, fp FillProgress) error {
	b, err := json.Marshal(fp)
	if err != nil {
		return err
	}
	_, err = p.pool.Exec(ctx, `INSERT INTO archive_fill_jobs (id, created, job) VALUES ($1, $2, $3)
ON CONFLICT (id) DO UPDATE SET job = EXCLUDED.job`, fp.ID, fp.Created, b)
	if err != nil {
		return fmt.Errorf("archive: fill job %s: %w", fp.ID, err)
	}
	return nil
}

// Fills returns the stored jobs, oldest first (JobStore).
func (p *Postgres) Fills(ctx context.Context) ([]FillProgress, error) {
	rows, err := p.pool.Query(ctx, "SELECT job FROM archive_fill_jobs ORDER BY created, id")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []FillProgress
	for rows.Next() {
		var b []byte
		if err := rows.Scan(&b); err != nil {
			return nil, err
		}
		var fp FillProgress
		if err := json.Unmarshal(b, &fp); err != nil {
			return nil, fmt.Errorf("archive: a fill job: %w", err)
		}
		out = append(out, fp)
	}
	return out, rows.Err()
}

// DeleteFill deletes the job id if it ended (JobStore): a replica that
// stored it again meanwhile, queued, keeps it.
func (p *Postgres) DeleteFill(ctx context.Context, id string) error {
	if _, err := p.pool.Exec(ctx, `DELETE FROM archive_fill_jobs WHERE id = $1 AND job->>'state' IN ($2, $3)`,
		id, FillDone, FillFailed); err != nil {
		return fmt.Errorf("archive: fill job %s: %w", id, err)
	}
	return nil
}

// ClaimFill takes the job's advisory lock on a connection of its own, held
// until release: the replicas sharing the database run a job once at a
// time (JobStore). A replica that dies loses its connection and so the
// lock.
func (p *Postgres) ClaimFill(ctx context.Context, id string) (func(), bool, error) {
	conn, err := p.pool.Acquire(ctx)
	if err != nil {
		return nil, false, err
	}
	key := fillLock(id)
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", key).Scan(&ok); err != nil {
		conn.Release()
		return nil, false, err
	}
	if !ok {
		conn.Release()
		return nil, false, nil
	}
	return func() {
		_, _ = conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", key)
		conn.Release()
	}, true, nil
}

// fillLock is the advisory lock key of a fill job.
func fillLock(id string) int64 {
	h := fnv.New64a()
	h.Write([]byte("fill\x00"))
	h.Write([]byte(id))
	return int64(h.Sum64())
}
