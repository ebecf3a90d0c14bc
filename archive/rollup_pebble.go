package archive

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"streamgate/feedid"
)

// The rollups' key space in Pebble:
//
//	k network 0x00 stream(32) level(1) start(4, big-endian) → rollup (encodeAgg)
//
// level the index in RollupLevels: the buckets of a (network, stream,
// level) are one run in time order, bars one seek and a forward scan.
const spaceRollups = 'k'

// rollupPrefix is the prefix of the keys of a (network, stream, level).
func rollupPrefix(network string, sb [32]byte, level uint8) []byte {
	return append(runKey(nil, spaceRollups, network, sb), level)
}

// putRollups merges the rollups m (of reports this batch stores) into
// the stored ones, in b. The caller holds p.mu.
func (p *Pebble) putRollups(b *pebble.Batch, m map[rollupKey]*agg) error {
	if rollupsOff {
		return nil
	}
	for _, k := range sortedKeys(m) {
		key := tsKey(rollupPrefix(k.network, k.stream, k.level), k.start)
		a := m[k]
		v, closer, err := p.db.Get(key)
		switch {
		case err == nil:
			old, derr := decodeAgg(v)
			closer.Close()
			if derr != nil {
				return derr
			}
			old.merge(a)
			a = old
		case !errors.Is(err, pebble.ErrNotFound):
			return fmt.Errorf("archive: pebble: %w", err)
		}
		if err := b.Set(key, encodeAgg(a), nil); err != nil {
			return fmt.Errorf("archive: pebble: %w", err)
		}
	}
	return nil
}

// Rollups implements RollupReader.
func (p *Pebble) Rollups(_ context.Context, network string, stream feedid.ID, level uint32, field string, from, to uint32) ([]Bar, error) {
	sb, err := checkQuery(network, stream)
	if err != nil {
		return nil, err
	}
	li, ok := levelIndex(level)
	if !ok {
		return nil, fmt.Errorf("archive: %d s is not a rollup level", level)
	}
	fi, err := fieldIndex(sb, field)
	if err != nil || from > to {
		return nil, err
	}
	prefix := rollupPrefix(network, sb, uint8(li))
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: tsKey(prefix, from), UpperBound: append(tsKey(prefix, to), 0)})
	if err != nil {
		p.metrics.failed("read", err)
		return nil, fmt.Errorf("archive: pebble: %w", err)
	}
	var out []Bar
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		v, err := it.ValueAndErr()
		if err != nil {
			break
		}
		bar, err := decodeBar(binary.BigEndian.Uint32(k[len(k)-4:]), v, fi)
		if err != nil {
			_ = it.Close()
			return nil, err
		}
		out = append(out, bar)
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		p.metrics.failed("read", err)
		return nil, fmt.Errorf("archive: pebble: %w", err)
	}
	return out, nil
}

// RollupBefore implements RollupReader.
func (p *Pebble) RollupBefore(_ context.Context, network string, stream feedid.ID, ts uint32) (uint32, bool, error) {
	sb, err := checkQuery(network, stream)
	if err != nil {
		return 0, false, err
	}
	prefix := rollupPrefix(network, sb, 0)
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: tsKey(prefix, ts)})
	if err != nil {
		return 0, false, fmt.Errorf("archive: pebble: %w", err)
	}
	var start uint32
	found := it.Last()
	if found {
		k := it.Key()
		start = binary.BigEndian.Uint32(k[len(k)-4:])
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return 0, false, fmt.Errorf("archive: pebble: %w", err)
	}
	return start, found, nil
}

// dayBounds widens [from, to] to whole UTC days: every bucket of every
// level that meets it lies inside.
func dayBounds(from, to uint32) (uint32, uint32) {
	day := RollupLevels[len(RollupLevels)-1]
	lo := from - from%day
	hi := uint64(to-to%day) + uint64(day) - 1
	return lo, uint32(min(hi, uint64(^uint32(0))))
}

// RebuildRollups implements RollupStore: the rollups of the widened span
// are deleted and made again from its reports, in one batch.
func (p *Pebble) RebuildRollups(_ context.Context, network string, stream feedid.ID, from, to uint32) error {
	sb, err := checkQuery(network, stream)
	if err != nil {
		return err
	}
	if from > to {
		return ErrBadSpan
	}
	lo, hi := dayBounds(from, to)
	p.mu.Lock()
	defer p.mu.Unlock()
	b := p.db.NewBatch()
	defer b.Close()
	for li := range RollupLevels {
		prefix := rollupPrefix(network, sb, uint8(li))
		_ = b.DeleteRange(tsKey(prefix, lo), append(tsKey(prefix, hi), 0), nil)
	}
	prefix := runKey(nil, spaceReports, network, sb)
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: tsKey(prefix, lo), UpperBound: append(tsKey(prefix, hi), 0)})
	if err != nil {
		return fmt.Errorf("archive: pebble: %w", err)
	}
	m := map[rollupKey]*agg{}
	var batch []Report
	flush := func() {
		vals := rollupValues(batch)
		idx := make([]int, len(batch))
		for i := range idx {
			idx[i] = i
		}
		for k, a := range aggregate(batch, vals, idx) {
			if old := m[k]; old != nil {
				old.merge(a)
			} else {
				m[k] = a
			}
		}
		batch = batch[:0]
	}
	for ok := it.First(); ok; ok = it.Next() {
		r, err := decodeReport(network, it.Key(), it.Value())
		if err != nil {
			_ = it.Close()
			return err
		}
		batch = append(batch, r)
		if len(batch) == 1000 {
			flush()
		}
	}
	flush()
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return fmt.Errorf("archive: pebble: %w", err)
	}
	for _, k := range sortedKeys(m) {
		_ = b.Set(tsKey(rollupPrefix(k.network, k.stream, k.level), k.start), encodeAgg(m[k]), nil)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("archive: pebble: %w", err)
	}
	return nil
}

// deleteRollupsBefore deletes, in b, every rollup whose bucket starts
// before cutoff: one range deletion per (network, stream, level). The
// caller holds p.mu.
func (p *Pebble) deleteRollupsBefore(b *pebble.Batch, cutoff uint32) error {
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: []byte{spaceRollups}, UpperBound: []byte{spaceRollups + 1}})
	if err != nil {
		return fmt.Errorf("archive: pebble: %w", err)
	}
	for ok := it.First(); ok; {
		k := it.Key()
		if len(k) < 4 {
			ok = it.Next()
			continue
		}
		prefix := bytes.Clone(k[:len(k)-4])
		if binary.BigEndian.Uint32(k[len(k)-4:]) < cutoff {
			_ = b.DeleteRange(tsKey(prefix, 0), tsKey(prefix, cutoff), nil)
		}
		ok = it.SeekGE(runEnd(prefix))
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return fmt.Errorf("archive: pebble: %w", err)
	}
	return nil
}
