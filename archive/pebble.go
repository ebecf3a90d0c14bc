package archive

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap"

	"streamgate/feedid"
)

// The key spaces of the Pebble store, each a first byte:
//
//	r network 0x00 stream(32) obsTs(4, big-endian) → validFromTs(4) fullReport
//	c network 0x00 stream(32) from(4, big-endian)  → to(4)
//	n network                                      → reports held (8)
//
// A network's name has no 0x00 (a-z, 0-9, '-'), so the keys of a
// (network, stream) are one contiguous run in time order: a report at a
// second is one point lookup, a page one seek and a forward iteration,
// retention one range deletion per run.
const (
	spaceReports  = 'r'
	spaceCoverage = 'c'
	spaceCounts   = 'n'
)

// PebbleOptions are the Pebble store's settings.
type PebbleOptions struct {
	Dir     string      // the store's directory, made if missing; one process at a time
	Metrics *Metrics    // nil: none
	Logger  *zap.Logger // Pebble's own messages, at debug level (errors at error level); nil: none
	// CacheSize is Pebble's block cache in bytes; 0: 32 MiB.
	CacheSize int64
}

// Pebble is the Store in a local Pebble directory. Writes and coverage
// changes are serialised in the process (which owns the directory), so a
// duplicate's check and a span's merge see what the previous call left.
// Its methods are above 20 because it is one store behind three
// interfaces of the archive: Store (the reports and their coverage),
// RollupReader (the candles' rollups, written with the reports) and
// JobStore (the fills), each in its own file.
type Pebble struct {
	db      *pebble.DB
	lock    *pebble.Lock
	dir     string
	metrics *Metrics

	mu     sync.Mutex // writes, coverage changes, retention
	jobsMu sync.Mutex // a fill job's save and its deletion
}

var _ Store = (*Pebble)(nil)

// ErrInUse is wrapped by OpenPebble's error when another process (or
// another open in this one) holds the directory.
var ErrInUse = errors.New("in use by another streamgate process")

// OpenPebble opens (making it if missing) the store in o.Dir, compressed
// (zstd in the lower levels, where nearly every report ends up). A second
// open of a directory that is open, in another process or this one, is
// refused with ErrInUse, naming the directory.
func OpenPebble(o PebbleOptions) (*Pebble, error) {
	if o.Dir == "" {
		return nil, errors.New("archive: no directory for the Pebble store")
	}
	if err := os.MkdirAll(o.Dir, 0o750); err != nil {
		return nil, fmt.Errorf("archive: directory %s: %w", o.Dir, err)
	}
	lock, err := pebble.LockDirectory(o.Dir, vfs.Default)
	if err != nil {
		return nil, fmt.Errorf("archive: archive directory %s is %w (its lock: %v)", o.Dir, ErrInUse, err)
	}
	opts := &pebble.Options{
		Lock:               lock,
		FormatMajorVersion: pebble.FormatNewest,
		Logger:             pebbleLogger{log: o.Logger},
		CacheSize:          o.CacheSize,
	}
	if opts.CacheSize == 0 {
		opts.CacheSize = 32 << 20
	}
	opts.EnsureDefaults()
	opts.ApplyCompressionSettings(func() pebble.DBCompressionSettings { return pebble.DBCompressionGood })
	db, err := pebble.Open(o.Dir, opts)
	if err != nil {
		_ = lock.Close()
		return nil, fmt.Errorf("archive: open the Pebble store in %s: %w", o.Dir, err)
	}
	return &Pebble{db: db, lock: lock, dir: o.Dir, metrics: o.Metrics}, nil
}

// runKey is the prefix of a (network, stream)'s keys in space.
func runKey(dst []byte, space byte, network string, stream [32]byte) []byte {
	dst = append(dst, space)
	dst = append(dst, network...)
	dst = append(dst, 0)
	return append(dst, stream[:]...)
}

func tsKey(prefix []byte, ts uint32) []byte {
	return binary.BigEndian.AppendUint32(prefix[:len(prefix):len(prefix)], ts)
}

// runEnd is the first key after every key of the run prefix.
func runEnd(prefix []byte) []byte {
	return append(binary.BigEndian.AppendUint32(prefix[:len(prefix):len(prefix)], ^uint32(0)), 0)
}

func countKey(network string) []byte { return append([]byte{spaceCounts}, network...) }

// Write implements Store.
func (p *Pebble) Write(_ context.Context, reports []Report) (WriteResult, error) {
	var res WriteResult
	if err := checkAll(reports); err != nil {
		return res, err
	}
	vals := rollupValues(reports) // decoded out of the lock
	var stored []int
	p.mu.Lock()
	defer p.mu.Unlock()
	b := p.db.NewBatch()
	defer b.Close()
	seen := make(map[string]struct{}, len(reports))
	added := map[string]int64{}
	for i := range reports {
		r := &reports[i]
		sb, _ := streamBytes(r.Stream)
		key := tsKey(runKey(nil, spaceReports, r.Network, sb), r.ObservationsTimestamp)
		if _, dup := seen[string(key)]; dup {
			res.Duplicates++
			continue
		}
		seen[string(key)] = struct{}{}
		_, closer, err := p.db.Get(key)
		if err == nil {
			closer.Close()
			res.Duplicates++
			continue
		}
		if !errors.Is(err, pebble.ErrNotFound) {
			p.metrics.failed("write", err)
			return WriteResult{}, fmt.Errorf("archive: pebble: %w", err)
		}
		val := make([]byte, 4, 4+len(r.FullReport))
		binary.BigEndian.PutUint32(val, r.ValidFromTimestamp)
		val = append(val, r.FullReport...)
		_ = b.Set(key, val, nil)
		added[r.Network]++
		res.Written++
		stored = append(stored, i)
	}
	if res.Written > 0 {
		if err := p.putRollups(b, aggregate(reports, vals, stored)); err != nil {
			p.metrics.failed("write", err)
			return WriteResult{}, err
		}
		for n, k := range added {
			if err := p.addCount(b, n, k); err != nil {
				return WriteResult{}, err
			}
		}
		if err := b.Commit(pebble.Sync); err != nil {
			p.metrics.failed("write", err)
			return WriteResult{}, fmt.Errorf("archive: pebble: %w", err)
		}
	}
	p.metrics.wrote(res)
	return res, nil
}

// addCount adds k to network's count of reports in b.
func (p *Pebble) addCount(b *pebble.Batch, network string, k int64) error {
	n, err := p.count(network)
	if err != nil {
		return err
	}
	return b.Set(countKey(network), binary.BigEndian.AppendUint64(nil, uint64(n+k)), nil)
}

func (p *Pebble) count(network string) (int64, error) {
	v, closer, err := p.db.Get(countKey(network))
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("archive: pebble: %w", err)
	}
	defer closer.Close()
	return int64(binary.BigEndian.Uint64(v)), nil
}

// decode rebuilds the report stored at key (a report key) with value v.
func decodeReport(network string, key, v []byte) (Report, error) {
	if len(v) < 5 || len(key) < 36 {
		return Report{}, fmt.Errorf("archive: pebble: a stored report of %d bytes is damaged", len(v))
	}
	n := len(key)
	return Report{
		Network:               network,
		Stream:                streamID(key[n-36 : n-4]),
		ObservationsTimestamp: binary.BigEndian.Uint32(key[n-4:]),
		ValidFromTimestamp:    binary.BigEndian.Uint32(v[:4]),
		FullReport:            append([]byte(nil), v[4:]...),
	}, nil
}

// Get implements Store.
func (p *Pebble) Get(_ context.Context, network string, stream feedid.ID, ts uint32) (Report, bool, error) {
	r, ok, err := p.get(network, stream, ts)
	hit := 0
	if ok {
		hit = 1
	}
	p.metrics.read(1, hit, err)
	return r, ok, err
}

func (p *Pebble) get(network string, stream feedid.ID, ts uint32) (Report, bool, error) {
	sb, err := checkQuery(network, stream)
	if err != nil {
		return Report{}, false, err
	}
	key := tsKey(runKey(nil, spaceReports, network, sb), ts)
	v, closer, err := p.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return Report{}, false, nil
	}
	if err != nil {
		p.metrics.failed("read", err)
		return Report{}, false, fmt.Errorf("archive: pebble: %w", err)
	}
	defer closer.Close()
	r, err := decodeReport(network, key, v)
	return r, err == nil, err
}

// Page implements Store.
func (p *Pebble) Page(_ context.Context, network string, stream feedid.ID, start uint32, limit int) ([]Report, error) {
	out, err := p.page(network, stream, start, limit)
	p.metrics.read(len(out), len(out), err)
	return out, err
}

func (p *Pebble) page(network string, stream feedid.ID, start uint32, limit int) ([]Report, error) {
	sb, err := checkQuery(network, stream)
	if err != nil || limit <= 0 {
		return nil, err
	}
	prefix := runKey(nil, spaceReports, network, sb)
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: tsKey(prefix, start), UpperBound: runEnd(prefix)})
	if err != nil {
		p.metrics.failed("read", err)
		return nil, fmt.Errorf("archive: pebble: %w", err)
	}
	var out []Report
	for ok := it.First(); ok && len(out) < limit; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			break
		}
		r, err := decodeReport(network, it.Key(), v)
		if err != nil {
			_ = it.Close()
			return nil, err
		}
		out = append(out, r)
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		p.metrics.failed("read", err)
		return nil, fmt.Errorf("archive: pebble: %w", err)
	}
	return out, nil
}

// At implements Store.
func (p *Pebble) At(_ context.Context, network string, streams []feedid.ID, ts uint32) ([]Report, error) {
	var out []Report
	for _, s := range streams {
		r, ok, err := p.get(network, s, ts)
		if err != nil {
			p.metrics.read(len(streams), 0, err)
			return nil, err
		}
		if ok {
			out = append(out, r)
		}
	}
	p.metrics.read(len(streams), len(out), nil)
	return out, nil
}

// AddCoverage implements Store.
func (p *Pebble) AddCoverage(ctx context.Context, network string, stream feedid.ID, span Span) error {
	return p.AddCoverages(ctx, []StreamSpan{{Network: network, Stream: stream, Span: span}})
}

// AddCoverages implements CoverageBatcher: every span merged in one
// indexed batch (a later span of a stream merges with an earlier one of
// the same call, read through the batch), committed with one sync.
func (p *Pebble) AddCoverages(_ context.Context, spans []StreamSpan) error {
	prefixes := make([][]byte, len(spans))
	for i, s := range spans {
		sb, err := checkQuery(s.Network, s.Stream)
		if err != nil {
			return err
		}
		if s.Span.From > s.Span.To {
			return ErrBadSpan
		}
		prefixes[i] = runKey(nil, spaceCoverage, s.Network, sb)
	}
	if len(spans) == 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	b := p.db.NewIndexedBatch()
	defer b.Close()
	for i, s := range spans {
		prefix := prefixes[i]
		old, err := p.spansIn(b, prefix, s.Span.From, s.Span.To, true)
		if err != nil {
			return err
		}
		merged := s.Span
		for _, o := range old {
			merged.From, merged.To = min(merged.From, o.From), max(merged.To, o.To)
			_ = b.Delete(tsKey(prefix, o.From), nil)
		}
		_ = b.Set(tsKey(prefix, merged.From), binary.BigEndian.AppendUint32(nil, merged.To), nil)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		p.metrics.failed("coverage", err)
		return fmt.Errorf("archive: pebble: %w", err)
	}
	return nil
}

// CoveredStreams implements StreamLister: one pass over the coverage's
// keys (a span each, not a report).
func (p *Pebble) CoveredStreams(_ context.Context, since uint32) ([]StreamRef, error) {
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: []byte{spaceCoverage}, UpperBound: []byte{spaceCoverage + 1}})
	if err != nil {
		p.metrics.failed("coverage", err)
		return nil, fmt.Errorf("archive: pebble: %w", err)
	}
	var out []StreamRef
	var last []byte // the run prefix of the last stream listed
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if len(k) < 1+1+32+4 || k[len(k)-37] != 0 || binary.BigEndian.Uint32(it.Value()) < since {
			continue
		}
		prefix := k[:len(k)-4]
		if last != nil && bytes.Equal(prefix, last) {
			continue
		}
		last = append(last[:0], prefix...)
		out = append(out, StreamRef{Network: string(k[1 : len(k)-37]), Stream: streamID(k[len(k)-36 : len(k)-4])})
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		p.metrics.failed("coverage", err)
		return nil, fmt.Errorf("archive: pebble: %w", err)
	}
	return out, nil
}

// Coverage implements Store.
func (p *Pebble) Coverage(_ context.Context, network string, stream feedid.ID, from, to uint32) ([]Span, error) {
	sb, err := checkQuery(network, stream)
	if err != nil {
		return nil, err
	}
	if from > to {
		return nil, ErrBadSpan
	}
	return p.spansIn(p.db, runKey(nil, spaceCoverage, network, sb), from, to, false)
}

// spansIn returns the spans of the run prefix in r (the store, or a batch
// not committed yet) that intersect [from, to] (adjacent: that intersect
// or touch it).
func (p *Pebble) spansIn(r pebble.Reader, prefix []byte, from, to uint32, adjacent bool) ([]Span, error) {
	want := Span{from, to}
	meets := func(s Span) bool {
		if adjacent {
			return touches(s, want)
		}
		return s.From <= to && s.To >= from
	}
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: runEnd(prefix)})
	if err != nil {
		p.metrics.failed("coverage", err)
		return nil, fmt.Errorf("archive: pebble: %w", err)
	}
	var out []Span
	span := func() Span {
		k, v := it.Key(), it.Value()
		return Span{binary.BigEndian.Uint32(k[len(k)-4:]), binary.BigEndian.Uint32(v)}
	}
	// The one span starting before from may reach into it.
	if it.SeekLT(tsKey(prefix, from)) {
		if s := span(); meets(s) {
			out = append(out, s)
		}
	}
	for ok := it.SeekGE(tsKey(prefix, from)); ok; ok = it.Next() {
		s := span()
		if uint64(s.From) > uint64(to)+1 || !adjacent && s.From > to {
			break
		}
		if meets(s) {
			out = append(out, s)
		}
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		p.metrics.failed("coverage", err)
		return nil, fmt.Errorf("archive: pebble: %w", err)
	}
	return out, nil
}

// DeleteBefore implements Store: one range deletion per (network, stream)
// run, the reports it removes counted as it goes.
func (p *Pebble) DeleteBefore(_ context.Context, cutoff uint32) (Deleted, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var d Deleted
	b := p.db.NewBatch()
	defer b.Close()
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: []byte{spaceReports}, UpperBound: []byte{spaceReports + 1}})
	if err != nil {
		return d, fmt.Errorf("archive: pebble: %w", err)
	}
	gone := map[string]int64{}
	for ok := it.First(); ok; {
		k := it.Key()
		prefix := append([]byte(nil), k[:len(k)-4]...)
		network := string(prefix[1 : len(prefix)-33])
		var n int64
		for ; ok; ok = it.Next() {
			k := it.Key()
			if len(k) != len(prefix)+4 || !bytes.HasPrefix(k, prefix) || binary.BigEndian.Uint32(k[len(prefix):]) >= cutoff {
				break
			}
			n++
		}
		if n > 0 {
			_ = b.DeleteRange(tsKey(prefix, 0), tsKey(prefix, cutoff), nil)
			gone[network] += n
			d.Reports += n
		}
		ok = it.SeekGE(runEnd(prefix))
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return Deleted{}, fmt.Errorf("archive: pebble: %w", err)
	}
	for n, k := range gone {
		if err := p.addCount(b, n, -k); err != nil {
			return Deleted{}, err
		}
	}
	if err := p.deleteRollupsBefore(b, cutoff); err != nil {
		return Deleted{}, err
	}
	it, err = p.db.NewIter(&pebble.IterOptions{LowerBound: []byte{spaceCoverage}, UpperBound: []byte{spaceCoverage + 1}})
	if err != nil {
		return Deleted{}, fmt.Errorf("archive: pebble: %w", err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		from, to := binary.BigEndian.Uint32(k[len(k)-4:]), binary.BigEndian.Uint32(it.Value())
		if from >= cutoff {
			continue
		}
		_ = b.Delete(k, nil)
		if to >= cutoff {
			_ = b.Set(tsKey(k[:len(k)-4], cutoff), binary.BigEndian.AppendUint32(nil, to), nil)
		}
		d.Spans++
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return Deleted{}, fmt.Errorf("archive: pebble: %w", err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		p.metrics.failed("retention", err)
		return Deleted{}, fmt.Errorf("archive: pebble: %w", err)
	}
	p.metrics.deleted(d)
	return d, nil
}

// Stats implements Store.
func (p *Pebble) Stats(_ context.Context) (Stats, error) {
	var s Stats
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: []byte{spaceCounts}, UpperBound: []byte{spaceCounts + 1}})
	if err != nil {
		return s, fmt.Errorf("archive: pebble: %w", err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		s.Reports += int64(binary.BigEndian.Uint64(it.Value()))
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return Stats{}, fmt.Errorf("archive: pebble: %w", err)
	}
	it, err = p.db.NewIter(&pebble.IterOptions{LowerBound: []byte{spaceCoverage}, UpperBound: []byte{spaceCoverage + 1}, KeyTypes: pebble.IterKeyTypePointsOnly})
	if err != nil {
		return Stats{}, fmt.Errorf("archive: pebble: %w", err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		s.Spans++
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return Stats{}, fmt.Errorf("archive: pebble: %w", err)
	}
	s.BytesOnDisk = int64(p.db.Metrics().DiskSpaceUsage())
	p.metrics.stats(s)
	return s, nil
}

// compact flushes the memtable and compacts every key, for measures of
// the room reports take at rest.
func (p *Pebble) compact(ctx context.Context) error {
	if err := p.db.Flush(); err != nil {
		return err
	}
	return p.db.Compact(ctx, []byte{0}, []byte{0xff}, false)
}

// Close implements Store: the directory is free for the next open once it
// returns.
func (p *Pebble) Close() error {
	err := p.db.Close()
	if lerr := p.lock.Close(); err == nil {
		err = lerr
	}
	if err != nil {
		return fmt.Errorf("archive: close the Pebble store in %s: %w", p.dir, err)
	}
	return nil
}

// pebbleLogger hands Pebble's messages to a zap logger.
type pebbleLogger struct{ log *zap.Logger }

func (l pebbleLogger) Infof(format string, args ...any) {
	if l.log != nil {
		l.log.Debug(fmt.Sprintf(format, args...), zap.String("component", "archive.pebble"))
	}
}

func (l pebbleLogger) Errorf(format string, args ...any) {
	if l.log != nil {
		l.log.Error(fmt.Sprintf(format, args...), zap.String("component", "archive.pebble"))
	}
}

func (l pebbleLogger) Fatalf(format string, args ...any) {
	if l.log != nil {
		l.log.Error(fmt.Sprintf(format, args...), zap.String("component", "archive.pebble"))
	}
	panic(fmt.Sprintf("archive: pebble: "+format, args...))
}

// Streams implements Store: the runs of network's reports and coverage,
// each stream one seek past the last (its first and last report two
// more), never a scan of its reports.
func (p *Pebble) Streams(_ context.Context, network string) ([]StreamInfo, error) {
	if !validNetwork(network) {
		return nil, fmt.Errorf("archive: network %q is not a network name", network)
	}
	byStream := map[[32]byte]*StreamInfo{}
	var order [][32]byte
	info := func(sb [32]byte) *StreamInfo {
		si := byStream[sb]
		if si == nil {
			si = &StreamInfo{Stream: streamID(sb[:])}
			byStream[sb] = si
			order = append(order, sb)
		}
		return si
	}
	for _, space := range []byte{spaceReports, spaceCoverage} {
		lo := append(append([]byte{space}, network...), 0)
		it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: append(append([]byte{space}, network...), 1)})
		if err != nil {
			p.metrics.failed("read", err)
			return nil, fmt.Errorf("archive: pebble: %w", err)
		}
		for ok := it.First(); ok; {
			k := it.Key()
			if len(k) != len(lo)+32+4 {
				ok = it.Next()
				continue
			}
			var sb [32]byte
			copy(sb[:], k[len(lo):])
			prefix := runKey(nil, space, network, sb)
			si := info(sb)
			if space == spaceReports {
				si.Reports, si.First = true, binary.BigEndian.Uint32(k[len(prefix):])
				if it.SeekLT(runEnd(prefix)) {
					si.Last = binary.BigEndian.Uint32(it.Key()[len(prefix):])
				}
				ok = it.SeekGE(runEnd(prefix))
				continue
			}
			for ; ok && bytes.HasPrefix(it.Key(), prefix); ok = it.Next() {
				k, v := it.Key(), it.Value()
				si.Spans++
				si.Covered += uint64(binary.BigEndian.Uint32(v)) - uint64(binary.BigEndian.Uint32(k[len(prefix):])) + 1
			}
		}
		if err := errors.Join(it.Error(), it.Close()); err != nil {
			p.metrics.failed("read", err)
			return nil, fmt.Errorf("archive: pebble: %w", err)
		}
	}
	slices.SortFunc(order, func(a, b [32]byte) int { return bytes.Compare(a[:], b[:]) })
	out := make([]StreamInfo, 0, len(order))
	for _, sb := range order {
		out = append(out, *byStream[sb])
	}
	return out, nil
}
