package simulator

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/big"
	"math/bits"
	"slices"
)

// The layout of fullReport (as the official clients decode it): the Ethereum ABI encoding
// of (bytes32[3] reportContext, bytes reportBlob, bytes32[] rawRs,
// bytes32[] rawSs, bytes32 rawVs). The head is seven words: the three
// context words, the offsets of the three dynamic members, and rawVs. The
// tail holds each dynamic member as a length word followed by its content,
// in the order of the head.

const word = 32

// Schema is a report schema version; its value is the one the first two
// bytes of a stream ID carry.
type Schema uint16

// The schemas of the service.
const (
	SchemaV3  Schema = 0x0003 // crypto prices: price, bid, ask
	SchemaV7  Schema = 0x0007 // redemption rates: exchangeRate
	SchemaV11 Schema = 0x000b // real-world assets: mid, bid, ask, volumes, market status
)

// String returns the schemaVersion name of s ("V3", "V7", "V11").
func (s Schema) String() string { return fmt.Sprintf("V%d", uint16(s)) }

// SchemaOf returns the schema that a stream ID's first two bytes encode.
func SchemaOf(feedID [32]byte) Schema { return Schema(binary.BigEndian.Uint16(feedID[:2])) }

// blobWords is the number of 32-byte words of a schema's reportBlob.
func (s Schema) blobWords() int {
	switch s {
	case SchemaV3:
		return 9
	case SchemaV7:
		return 7
	case SchemaV11:
		return 14
	}
	return 0
}

// FullReport is the outer structure of a fullReport.
type FullReport struct {
	ReportContext [3][32]byte
	ReportBlob    []byte
	RawRs         [][32]byte
	RawSs         [][32]byte
	RawVs         [32]byte
}

// ErrMalformedReport is wrapped by every decoding error.
var ErrMalformedReport = errors.New("simulator: malformed report")

// Encode returns the ABI encoding of r.
func (r *FullReport) Encode() []byte { return r.AppendEncode(nil) }

// AppendEncode appends the ABI encoding of r to dst.
func (r *FullReport) AppendEncode(dst []byte) []byte {
	blobWords := (len(r.ReportBlob) + word - 1) / word
	n := (7 + 1 + blobWords + 1 + len(r.RawRs) + 1 + len(r.RawSs)) * word
	start := len(dst)
	dst = slices.Grow(dst, n)[:start+n]
	b := dst[start:]
	clear(b)
	for i := range r.ReportContext {
		copy(b[i*word:], r.ReportContext[i][:])
	}
	offBlob := 7 * word
	offRs := offBlob + (1+blobWords)*word
	offSs := offRs + (1+len(r.RawRs))*word
	putUint(b[3*word:], uint64(offBlob))
	putUint(b[4*word:], uint64(offRs))
	putUint(b[5*word:], uint64(offSs))
	copy(b[6*word:], r.RawVs[:])
	putUint(b[offBlob:], uint64(len(r.ReportBlob)))
	copy(b[offBlob+word:], r.ReportBlob)
	putUint(b[offRs:], uint64(len(r.RawRs)))
	for i := range r.RawRs {
		copy(b[offRs+(1+i)*word:], r.RawRs[i][:])
	}
	putUint(b[offSs:], uint64(len(r.RawSs)))
	for i := range r.RawSs {
		copy(b[offSs+(1+i)*word:], r.RawSs[i][:])
	}
	return dst
}

// DecodeFullReport decodes the ABI encoding of a fullReport. It follows the
// offsets of the head, as any ABI decoder does, and checks every bound.
func DecodeFullReport(b []byte) (FullReport, error) {
	var r FullReport
	if len(b) < 7*word || len(b)%word != 0 {
		return r, fmt.Errorf("%w: %d bytes", ErrMalformedReport, len(b))
	}
	for i := range r.ReportContext {
		copy(r.ReportContext[i][:], b[i*word:])
	}
	copy(r.RawVs[:], b[6*word:])
	blob, err := dynamic(b, 3)
	if err != nil {
		return r, fmt.Errorf("reportBlob: %w", err)
	}
	blobLen, _ := readUint(blob[:word])
	r.ReportBlob = blob[word : word+int(blobLen)]
	if r.RawRs, err = words(b, 4); err != nil {
		return r, fmt.Errorf("rawRs: %w", err)
	}
	if r.RawSs, err = words(b, 5); err != nil {
		return r, fmt.Errorf("rawSs: %w", err)
	}
	return r, nil
}

// dynamic returns the tail of b from the offset in head word i on, after
// checking that the length word and the content fit.
func dynamic(b []byte, i int) ([]byte, error) {
	off, ok := readUint(b[i*word : (i+1)*word])
	if !ok || off%word != 0 || off < 7*word || off+word > uint64(len(b)) {
		return nil, fmt.Errorf("%w: bad offset", ErrMalformedReport)
	}
	tail := b[off:]
	n, ok := readUint(tail[:word])
	if !ok || n > uint64(len(tail)-word) {
		return nil, fmt.Errorf("%w: bad length", ErrMalformedReport)
	}
	return tail, nil
}

func words(b []byte, i int) ([][32]byte, error) {
	tail, err := dynamic(b, i)
	if err != nil {
		return nil, err
	}
	n, _ := readUint(tail[:word])
	if n*word > uint64(len(tail)-word) {
		return nil, fmt.Errorf("%w: bad length", ErrMalformedReport)
	}
	out := make([][32]byte, n)
	for j := range out {
		copy(out[j][:], tail[(1+j)*word:])
	}
	return out, nil
}

// ReportFields are the decoded fields of a reportBlob. Fields that the
// schema lacks are nil or zero. Prices and fees are the raw integers
// (prices carry 18 decimals).
type ReportFields struct {
	Schema                Schema
	FeedID                [32]byte
	ValidFromTimestamp    uint32
	ObservationsTimestamp uint32
	NativeFee             *big.Int // uint192
	LinkFee               *big.Int // uint192
	ExpiresAt             uint32

	Price *big.Int // V3
	Bid   *big.Int // V3, V11
	Ask   *big.Int // V3, V11

	ExchangeRate *big.Int // V7

	Mid                 *big.Int // V11
	LastSeenTimestampNs uint64   // V11
	BidVolume           *big.Int // V11
	AskVolume           *big.Int // V11
	LastTradedPrice     *big.Int // V11
	MarketStatus        uint32   // V11: 0 unknown, 1 pre-market, 2 regular, 3 post-market, 4 overnight, 5 closed
}

// DecodeReportBlob decodes a reportBlob. The schema is read from the first
// two bytes of its feedId; the blob must have exactly that schema's length.
func DecodeReportBlob(blob []byte) (ReportFields, error) {
	var f ReportFields
	if len(blob) < word {
		return f, fmt.Errorf("%w: blob of %d bytes", ErrMalformedReport, len(blob))
	}
	copy(f.FeedID[:], blob)
	f.Schema = SchemaOf(f.FeedID)
	n := f.Schema.blobWords()
	if n == 0 {
		return f, fmt.Errorf("%w: unknown schema %#04x", ErrMalformedReport, uint16(f.Schema))
	}
	if len(blob) != n*word {
		return f, fmt.Errorf("%w: %s blob of %d bytes, want %d", ErrMalformedReport, f.Schema, len(blob), n*word)
	}
	d := blobDecoder{b: blob, i: 1}
	f.ValidFromTimestamp = d.uint32()
	f.ObservationsTimestamp = d.uint32()
	f.NativeFee = d.uint192()
	f.LinkFee = d.uint192()
	f.ExpiresAt = d.uint32()
	switch f.Schema {
	case SchemaV3:
		f.Price, f.Bid, f.Ask = d.int192(), d.int192(), d.int192()
	case SchemaV7:
		f.ExchangeRate = d.int192()
	case SchemaV11:
		f.Mid = d.int192()
		f.LastSeenTimestampNs = d.uint64()
		f.Bid, f.BidVolume = d.int192(), d.int192()
		f.Ask, f.AskVolume = d.int192(), d.int192()
		f.LastTradedPrice = d.int192()
		f.MarketStatus = d.uint32()
	}
	if d.err != nil {
		return f, d.err
	}
	return f, nil
}

type blobDecoder struct {
	b   []byte
	i   int
	err error
}

func (d *blobDecoder) next() []byte {
	w := d.b[d.i*word : (d.i+1)*word]
	d.i++
	return w
}

func (d *blobDecoder) fail(bitsWide int) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: word %d out of range of a %d-bit integer", ErrMalformedReport, d.i-1, bitsWide)
	}
}

func (d *blobDecoder) uintN(n int) []byte {
	w := d.next()
	for _, c := range w[:word-n/8] {
		if c != 0 {
			d.fail(n)
			break
		}
	}
	return w
}

func (d *blobDecoder) uint32() uint32 { return binary.BigEndian.Uint32(d.uintN(32)[word-4:]) }
func (d *blobDecoder) uint64() uint64 { return binary.BigEndian.Uint64(d.uintN(64)[word-8:]) }
func (d *blobDecoder) uint192() *big.Int {
	return new(big.Int).SetBytes(d.uintN(192)[word-24:])
}

// int192 reads a two's complement int192, sign-extended to 256 bits.
func (d *blobDecoder) int192() *big.Int {
	w := d.next()
	neg := w[word-24]&0x80 != 0
	ext := byte(0)
	if neg {
		ext = 0xff
	}
	for _, c := range w[:word-24] {
		if c != ext {
			d.fail(192)
			break
		}
	}
	v := new(big.Int).SetBytes(w[word-24:])
	if neg {
		v.Sub(v, new(big.Int).Lsh(big.NewInt(1), 192))
	}
	return v
}

// readUint reads a word holding a small unsigned integer.
func readUint(w []byte) (uint64, bool) {
	for _, c := range w[:word-8] {
		if c != 0 {
			return 0, false
		}
	}
	return binary.BigEndian.Uint64(w[word-8:]), true
}

// putUint writes v as a 256-bit big-endian unsigned word into w[:32].
func putUint(w []byte, v uint64) {
	clear(w[:word-8])
	binary.BigEndian.PutUint64(w[word-8:word], v)
}

// fixed is a signed 128-bit integer in two's complement: the range of every
// value the simulator writes into an int192 or uint192 field.
type fixed struct {
	hi int64
	lo uint64
}

// scaled returns n·10⁹: a value with 9 decimals (nano-units) as an 18-decimal
// fixed-point integer.
func scaled(n int64) fixed {
	neg := n < 0
	u := uint64(n)
	if neg {
		u = -u
	}
	hi, lo := bits.Mul64(u, 1e9)
	v := fixed{hi: int64(hi), lo: lo}
	if neg {
		v = v.neg()
	}
	return v
}

func (v fixed) neg() fixed {
	lo, borrow := bits.Sub64(0, v.lo, 0)
	hi, _ := bits.Sub64(0, uint64(v.hi), borrow)
	return fixed{hi: int64(hi), lo: lo}
}

// putInt writes v as a 256-bit two's complement word, sign-extended, into
// w[:32]: valid for an int192 field and, when v ≥ 0, for a uint192 one.
func putInt(w []byte, v fixed) {
	ext := byte(0)
	if v.hi < 0 {
		ext = 0xff
	}
	for i := range word - 16 {
		w[i] = ext
	}
	binary.BigEndian.PutUint64(w[word-16:], uint64(v.hi))
	binary.BigEndian.PutUint64(w[word-8:word], v.lo)
}
