package archive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"github.com/cockroachdb/pebble/v2"
)

// The Pebble store keeps fill jobs in a key space of their own:
//
//	j id → FillProgress as JSON
const spaceFills = 'j'

var _ JobStore = (*Pebble)(nil)

func fillKey(id string) []byte { return append([]byte{spaceFills}, id...) }

// SaveFill stores p (JobStore).
func (p *Pebble) SaveFill(_ context.Context, fp FillProgress) error {
	b, err := json.Marshal(fp)
	if err != nil {
		return err
	}
	p.jobsMu.Lock()
	defer p.jobsMu.Unlock()
	if err := p.db.Set(fillKey(fp.ID), b, pebble.Sync); err != nil {
		return fmt.Errorf("archive: fill job %s: %w", fp.ID, err)
	}
	return nil
}

// DeleteFill deletes the job id if it ended (JobStore).
func (p *Pebble) DeleteFill(_ context.Context, id string) error {
	p.jobsMu.Lock()
	defer p.jobsMu.Unlock()
	v, closer, err := p.db.Get(fillKey(id))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("archive: fill job %s: %w", id, err)
	}
	var fp FillProgress
	err = json.Unmarshal(v, &fp)
	_ = closer.Close()
	if err == nil && fp.State != FillDone && fp.State != FillFailed {
		return nil // stored again meanwhile
	}
	if err := p.db.Delete(fillKey(id), pebble.Sync); err != nil {
		return fmt.Errorf("archive: fill job %s: %w", id, err)
	}
	return nil
}

// Fills returns the stored jobs, oldest first (JobStore).
func (p *Pebble) Fills(_ context.Context) ([]FillProgress, error) {
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: []byte{spaceFills}, UpperBound: []byte{spaceFills + 1}})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []FillProgress
	for it.First(); it.Valid(); it.Next() {
		var fp FillProgress
		if err := json.Unmarshal(it.Value(), &fp); err != nil {
			return nil, fmt.Errorf("archive: fill job %q: %w", it.Key()[1:], err)
		}
		out = append(out, fp)
	}
	if err := it.Error(); err != nil {
		return nil, err
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out, nil
}

// ClaimFill always succeeds: one process owns a Pebble directory, and its
// Filler runs one job at a time (JobStore).
func (p *Pebble) ClaimFill(context.Context, string) (func(), bool, error) {
	return func() {}, true, nil
}
