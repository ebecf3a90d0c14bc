package archive

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/big"
	"slices"

	"streamgate/don"
	"streamgate/feedid"
)

// Rollups: the open, high, low and close of every scaled field of a
// stream's reports per bucket of time, kept beside the reports so that
// bars over any span read a few rows instead of every report.
//
// A rollup is written in the same batch (Pebble) or transaction
// (PostgreSQL) as the reports it holds, and only for the reports that
// call stored (a duplicate adds nothing), so the rollups are always the
// aggregate of the stored reports; coverage changes store no report and
// change no rollup. Whether a bar may be shown is the coverage's answer,
// asked when bars are read, never the rollup's. Retention deletes every
// rollup whose bucket starts before the cutoff (the coverage of those
// seconds goes with it: their bars are not covered any more).
// RebuildRollups recomputes the rollups of a span from its reports (a
// store that held reports before it kept rollups; a repair).
//
// A report whose fullReport does not decode under its stream's schema
// (don.DecodeEnvelope, don.DecodeBlob) has no values: it is stored, and
// counted in its rollup's Undecoded, so that a bar built without it can
// say so.

// RollupLevels are the bucket sizes of the rollups in seconds: a minute,
// five minutes, an hour, a UTC day. Each is a multiple of the one before,
// and every bucket starts at a multiple of its size (Unix time: a UTC
// minute, hour, day).
var RollupLevels = [...]uint32{60, 300, 3600, 86400}

// levelIndex returns the index of level in RollupLevels.
func levelIndex(level uint32) (int, bool) {
	i := slices.Index(RollupLevels[:], level)
	return i, i >= 0
}

// Bar is the rollup of one field over one bucket: the bucket's start, the
// reports in it (Reports decoded, Undecoded not), the observationsTimestamp
// of the first and last decoded one, and the field's value in the first
// (Open) and last (Close), its highest and lowest, as the report's
// integers (scaled fields: 18 decimals).
type Bar struct {
	Start                  uint32
	Reports, Undecoded     uint32
	First, Last            uint32
	Open, High, Low, Close *big.Int
}

// RollupReader reads rollups; both stores implement it.
type RollupReader interface {
	// Rollups returns the rollups of field (a scaled field of the
	// stream's schema, ScaledFields) of stream at level (one of
	// RollupLevels) whose bucket starts in [from, to], in ascending order.
	Rollups(ctx context.Context, network string, stream feedid.ID, level uint32, field string, from, to uint32) ([]Bar, error)
	// RollupBefore returns the start of the latest minute rollup of
	// stream that starts before ts, and whether there is one.
	RollupBefore(ctx context.Context, network string, stream feedid.ID, ts uint32) (uint32, bool, error)
}

// RollupStore is a RollupReader that can rebuild its rollups.
type RollupStore interface {
	RollupReader
	// RebuildRollups recomputes, from the stored reports, every rollup
	// of stream whose bucket meets [from, to] (at every level: the UTC
	// days holding from and to are rebuilt whole).
	RebuildRollups(ctx context.Context, network string, stream feedid.ID, from, to uint32) error
}

var (
	_ RollupStore = (*Pebble)(nil)
	_ RollupStore = (*Postgres)(nil)
)

// ErrUnknownField is wrapped by Rollups' error for a field the stream's
// schema has not among its scaled fields.
var ErrUnknownField = fmt.Errorf("archive: not a scaled field of the stream's schema")

// ScaledFields returns the names of a schema's scaled fields (18
// decimals: prices, rates, volumes of int192, fees, multipliers) in
// schema order, the fields that rollups hold; nil for an unknown schema.
func ScaledFields(s don.Schema) []string {
	var out []string
	for _, f := range don.SchemaFields(s) {
		if f.Scaled {
			out = append(out, f.Name)
		}
	}
	return out
}

// fieldIndex returns the index of field among the scaled fields of
// stream's schema.
func fieldIndex(sb [32]byte, field string) (int, error) {
	s := don.SchemaOf(sb[:])
	i := slices.Index(ScaledFields(s), field)
	if i < 0 {
		return 0, fmt.Errorf("%w: %q of %s", ErrUnknownField, field, s)
	}
	return i, nil
}

// reportValues returns the scaled fields of r's report in schema order,
// nil when its fullReport does not decode under its stream's schema.
func reportValues(r *Report) []*big.Int {
	sb, err := streamBytes(r.Stream)
	if err != nil {
		return nil
	}
	env, err := don.DecodeEnvelope(r.FullReport)
	if err != nil {
		return nil
	}
	s, fields, err := don.DecodeBlob(env.ReportBlob)
	if err != nil || s != don.SchemaOf(sb[:]) {
		return nil
	}
	vals := make([]*big.Int, 0, 8)
	for _, f := range fields {
		if v, ok := f.Value.(*big.Int); ok && f.Scaled {
			vals = append(vals, v)
		}
	}
	return vals
}

// rollupsOff, set only by the benchmarks that measure what the rollups
// cost a write, makes Pebble's writes store the reports alone: nothing
// decoded, no rollup written.
var rollupsOff bool

// rollupValues decodes every report's scaled fields (reportValues), out
// of any lock: decoding is most of a write's work.
func rollupValues(reports []Report) [][]*big.Int {
	out := make([][]*big.Int, len(reports))
	for i := range reports {
		if rollupsOff {
			break
		}
		out[i] = reportValues(&reports[i])
	}
	return out
}

// agg is a rollup being built: every scaled field's open, high, low and
// close. Its big.Ints are never changed in place (shared, not copied).
type agg struct {
	n, undecoded uint32
	first, last  uint32
	o, h, l, c   []*big.Int
}

// add adds one report at ts with values vals (nil: undecoded).
func (a *agg) add(ts uint32, vals []*big.Int) {
	if vals == nil {
		a.undecoded++
		return
	}
	a.merge(&agg{n: 1, first: ts, last: ts, o: vals, h: vals, l: vals, c: vals})
}

// merge merges b (other reports of the bucket) into a.
func (a *agg) merge(b *agg) {
	a.undecoded += b.undecoded
	if b.n == 0 {
		return
	}
	if a.n == 0 || len(a.o) != len(b.o) {
		a.n, a.first, a.last = b.n, b.first, b.last
		a.o, a.h, a.l, a.c = slices.Clone(b.o), slices.Clone(b.h), slices.Clone(b.l), slices.Clone(b.c)
		return
	}
	a.n += b.n
	if b.first < a.first {
		a.first = b.first
		copy(a.o, b.o)
	}
	if b.last > a.last {
		a.last = b.last
		copy(a.c, b.c)
	}
	for i := range a.h {
		if b.h[i].Cmp(a.h[i]) > 0 {
			a.h[i] = b.h[i]
		}
		if b.l[i].Cmp(a.l[i]) < 0 {
			a.l[i] = b.l[i]
		}
	}
}

// bar returns field i of a as a Bar of bucket start.
func (a *agg) bar(start uint32, i int) Bar {
	b := Bar{Start: start, Reports: a.n, Undecoded: a.undecoded, First: a.first, Last: a.last}
	if a.n > 0 && i < len(a.o) {
		b.Open, b.High, b.Low, b.Close = a.o[i], a.h[i], a.l[i], a.c[i]
	}
	return b
}

// rollupKey names one rollup.
type rollupKey struct {
	network string
	stream  [32]byte
	level   uint8 // index in RollupLevels
	start   uint32
}

// aggregate builds the rollups, at every level, of the reports at the
// indexes idx (those a write stored), vals their values.
func aggregate(reports []Report, vals [][]*big.Int, idx []int) map[rollupKey]*agg {
	m := map[rollupKey]*agg{}
	for _, i := range idx {
		r := &reports[i]
		sb, _ := streamBytes(r.Stream)
		for li, size := range RollupLevels {
			k := rollupKey{r.Network, sb, uint8(li), r.ObservationsTimestamp - r.ObservationsTimestamp%size}
			a := m[k]
			if a == nil {
				a = &agg{}
				m[k] = a
			}
			a.add(r.ObservationsTimestamp, vals[i])
		}
	}
	return m
}

// sortedKeys returns m's keys in (network, stream, level, start) order, so
// that concurrent writers take their rows in one order.
func sortedKeys(m map[rollupKey]*agg) []rollupKey {
	keys := make([]rollupKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b rollupKey) int {
		switch {
		case a.network != b.network:
			return cmpStr(a.network, b.network)
		case a.stream != b.stream:
			return slices.Compare(a.stream[:], b.stream[:])
		case a.level != b.level:
			return int(a.level) - int(b.level)
		}
		return cmpU32(a.start, b.start)
	})
	return keys
}

func cmpStr(a, b string) int {
	if a < b {
		return -1
	}
	if a > b {
		return 1
	}
	return 0
}

func cmpU32(a, b uint32) int {
	if a < b {
		return -1
	}
	if a > b {
		return 1
	}
	return 0
}

// The encoding of a rollup's value in Pebble:
//
//	n(4) undecoded(4) first(4) last(4) fields(1), then per scaled field
//	open, high, low, close, each a 32-byte two's complement word
//
// (every int192 and uint192 fits one word, as in the reports' ABI).
const rollupHead = 17

func encodeAgg(a *agg) []byte {
	nf := len(a.o)
	out := make([]byte, rollupHead, rollupHead+nf*4*32)
	binary.BigEndian.PutUint32(out[0:], a.n)
	binary.BigEndian.PutUint32(out[4:], a.undecoded)
	binary.BigEndian.PutUint32(out[8:], a.first)
	binary.BigEndian.PutUint32(out[12:], a.last)
	out[16] = byte(nf)
	for i := range nf {
		for _, v := range []*big.Int{a.o[i], a.h[i], a.l[i], a.c[i]} {
			out = appendWord(out, v)
		}
	}
	return out
}

func decodeAgg(v []byte) (*agg, error) {
	if len(v) < rollupHead || len(v) != rollupHead+int(v[16])*4*32 {
		return nil, fmt.Errorf("archive: pebble: a stored rollup of %d bytes is damaged", len(v))
	}
	a := &agg{n: binary.BigEndian.Uint32(v[0:]), undecoded: binary.BigEndian.Uint32(v[4:]),
		first: binary.BigEndian.Uint32(v[8:]), last: binary.BigEndian.Uint32(v[12:])}
	nf := int(v[16])
	a.o, a.h, a.l, a.c = make([]*big.Int, nf), make([]*big.Int, nf), make([]*big.Int, nf), make([]*big.Int, nf)
	for i := range nf {
		w := v[rollupHead+i*128:]
		a.o[i], a.h[i], a.l[i], a.c[i] = readWord(w[0:32]), readWord(w[32:64]), readWord(w[64:96]), readWord(w[96:128])
	}
	return a, nil
}

// decodeBar decodes field i of a stored rollup value only.
func decodeBar(start uint32, v []byte, i int) (Bar, error) {
	if len(v) < rollupHead || len(v) != rollupHead+int(v[16])*4*32 {
		return Bar{}, fmt.Errorf("archive: pebble: a stored rollup of %d bytes is damaged", len(v))
	}
	b := Bar{Start: start, Reports: binary.BigEndian.Uint32(v[0:]), Undecoded: binary.BigEndian.Uint32(v[4:]),
		First: binary.BigEndian.Uint32(v[8:]), Last: binary.BigEndian.Uint32(v[12:])}
	if b.Reports > 0 && i < int(v[16]) {
		w := v[rollupHead+i*128:]
		b.Open, b.High, b.Low, b.Close = readWord(w[0:32]), readWord(w[32:64]), readWord(w[64:96]), readWord(w[96:128])
	}
	return b, nil
}

var two256 = new(big.Int).Lsh(big.NewInt(1), 256)

func appendWord(dst []byte, v *big.Int) []byte {
	var w [32]byte
	if v.Sign() >= 0 {
		v.FillBytes(w[:])
	} else {
		new(big.Int).Add(two256, v).FillBytes(w[:])
	}
	return append(dst, w[:]...)
}

func readWord(w []byte) *big.Int {
	v := new(big.Int).SetBytes(w)
	if w[0]&0x80 != 0 {
		v.Sub(v, two256)
	}
	return v
}
