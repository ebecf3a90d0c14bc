package upstreamsim

import (
	"encoding/binary"
	"encoding/hex"
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

// The schemas of the service: every one the official SDKs decode (V1 to
// V13) and V14 of the documentation (Futures).
const (
	SchemaV1  Schema = 0x0001 // legacy: price, bid, ask and block numbers
	SchemaV2  Schema = 0x0002 // basic crypto prices: price
	SchemaV3  Schema = 0x0003 // crypto prices: price, bid, ask
	SchemaV4  Schema = 0x0004 // real-world assets, first version: price, market status
	SchemaV5  Schema = 0x0005 // interest rates: rate, timestamp, duration
	SchemaV6  Schema = 0x0006 // five prices
	SchemaV7  Schema = 0x0007 // redemption rates: exchangeRate
	SchemaV8  Schema = 0x0008 // real-world assets, standard: mid price, market status
	SchemaV9  Schema = 0x0009 // net asset value: NAV per share, NAV date, AUM, ripcord
	SchemaV10 Schema = 0x000a // tokenized equities: price, multipliers, tokenized price
	SchemaV11 Schema = 0x000b // real-world assets: mid, bid, ask, volumes, market status
	SchemaV12 Schema = 0x000c // net asset value with the next one
	SchemaV13 Schema = 0x000d // top of book: best bid and ask, volumes
	SchemaV14 Schema = 0x000e // futures: prices, contract, roll prices
)

// Schemas lists the schemas the simulator publishes, in order.
var Schemas = []Schema{SchemaV1, SchemaV2, SchemaV3, SchemaV4, SchemaV5, SchemaV6, SchemaV7,
	SchemaV8, SchemaV9, SchemaV10, SchemaV11, SchemaV12, SchemaV13, SchemaV14}

// String returns the schemaVersion name of s ("V3", "V7", "V11").
func (s Schema) String() string { return fmt.Sprintf("V%d", uint16(s)) }

// SchemaOf returns the schema that a stream ID's first two bytes encode.
func SchemaOf(feedID [32]byte) Schema { return Schema(binary.BigEndian.Uint16(feedID[:2])) }

// The kinds of a blob's words.
type wordKind uint8

const (
	kID   wordKind = iota // bytes32, the feedId
	kB32                  // another bytes32
	kU8                   // uint8
	kU32                  // uint32
	kU64                  // uint64
	kU192                 // uint192
	kI192                 // int192
	kStr                  // string: the head word is an offset to a length word and the bytes
)

type layoutField struct {
	name string
	kind wordKind
}

// layouts are the blob layouts as the simulator writes and reads them: its
// own table, written from the schemas' documentation and SDKs
// independently of the gateway's (don/schemas.go), so that each checks the
// other.
var layouts = map[Schema][]layoutField{}

func init() {
	hdr := []layoutField{{"feedId", kID}, {"validFromTimestamp", kU32}, {"observationsTimestamp", kU32},
		{"nativeFee", kU192}, {"linkFee", kU192}, {"expiresAt", kU32}}
	with := func(own ...layoutField) []layoutField { return append(append([]layoutField(nil), hdr...), own...) }
	layouts[SchemaV1] = []layoutField{{"feedId", kID}, {"observationsTimestamp", kU32}, {"price", kI192},
		{"bid", kI192}, {"ask", kI192}, {"currentBlockNum", kU64}, {"currentBlockHash", kB32},
		{"validFromBlockNum", kU64}, {"currentBlockTimestamp", kU64}}
	layouts[SchemaV2] = with(layoutField{"price", kI192})
	layouts[SchemaV3] = with(layoutField{"price", kI192}, layoutField{"bid", kI192}, layoutField{"ask", kI192})
	layouts[SchemaV4] = with(layoutField{"price", kI192}, layoutField{"marketStatus", kU8})
	layouts[SchemaV5] = with(layoutField{"rate", kI192}, layoutField{"timestamp", kU32}, layoutField{"duration", kU32})
	layouts[SchemaV6] = with(layoutField{"price", kI192}, layoutField{"price2", kI192}, layoutField{"price3", kI192},
		layoutField{"price4", kI192}, layoutField{"price5", kI192})
	layouts[SchemaV7] = with(layoutField{"exchangeRate", kI192})
	layouts[SchemaV8] = with(layoutField{"lastUpdateTimestamp", kU64}, layoutField{"midPrice", kI192},
		layoutField{"marketStatus", kU32})
	layouts[SchemaV9] = with(layoutField{"navPerShare", kI192}, layoutField{"navDate", kU64},
		layoutField{"aum", kI192}, layoutField{"ripcord", kU32})
	layouts[SchemaV10] = with(layoutField{"lastUpdateTimestamp", kU64}, layoutField{"price", kI192},
		layoutField{"marketStatus", kU32}, layoutField{"currentMultiplier", kI192}, layoutField{"newMultiplier", kI192},
		layoutField{"activationDateTime", kU32}, layoutField{"tokenizedPrice", kI192})
	layouts[SchemaV11] = with(layoutField{"mid", kI192}, layoutField{"lastSeenTimestampNs", kU64},
		layoutField{"bid", kI192}, layoutField{"bidVolume", kI192}, layoutField{"ask", kI192},
		layoutField{"askVolume", kI192}, layoutField{"lastTradedPrice", kI192}, layoutField{"marketStatus", kU32})
	layouts[SchemaV12] = with(layoutField{"navPerShare", kI192}, layoutField{"nextNavPerShare", kI192},
		layoutField{"navDate", kU64}, layoutField{"ripcord", kU32})
	layouts[SchemaV13] = with(layoutField{"bestAsk", kI192}, layoutField{"bestBid", kI192},
		layoutField{"askVolume", kU64}, layoutField{"bidVolume", kU64}, layoutField{"lastTradedPrice", kI192})
	layouts[SchemaV14] = []layoutField{{"feedId", kID}, {"validFromTimestamp", kU64}, {"observationsTimestamp", kU64},
		{"nativeFee", kU192}, {"linkFee", kU192}, {"expiresAt", kU64},
		{"midPrice", kI192}, {"bidPrice", kI192}, {"askPrice", kI192}, {"expiryTime", kStr},
		{"firstDayOfNotice", kU64}, {"lastSeenTimestampNs", kU64}, {"marketStatus", kU32},
		{"contractMonth", kU32}, {"goldmanRollPrice", kI192}, {"currentBusinessDay", kU32},
		{"interpolatedGoldmanRollPrice", kI192}}
}

// v14StringWords is the tail of a V14 blob: the length word of expiryTime
// and one word of its bytes ("YYYY-MM-DD").
const v14StringWords = 2

// blobWords is the number of 32-byte words of a schema's reportBlob as the
// simulator writes it; 0 for a schema it does not know.
func (s Schema) blobWords() int {
	n := len(layouts[s])
	if s == SchemaV14 {
		n += v14StringWords
	}
	return n
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
// (prices carry 18 decimals). Named holds every field of every schema.
type ReportFields struct {
	Schema                Schema
	FeedID                [32]byte
	ValidFromTimestamp    uint32   // zero for V1 and V14
	ObservationsTimestamp uint32   // zero for V14
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

	// Named is every field of the blob in schema order, its value as a
	// string: integers in decimal, bytes32 as 0x and hex, a string as is.
	Named []NamedValue
}

// NamedValue is one field of a blob.
type NamedValue struct {
	Name, Value string
	// Int is the value of an integer field, nil for bytes32 and string.
	Int *big.Int
	// Wide: a 192-bit integer (every price, rate, volume of that width,
	// NAV, AUM, multiplier and fee), which carries 18 decimals.
	Wide bool
}

// DecodeReportBlob decodes a reportBlob. The schema is read from the first
// two bytes of its feedId; the blob must have exactly the length the
// simulator writes for that schema.
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
	d := blobDecoder{b: blob}
	get := map[string]*big.Int{}
	for _, lf := range layouts[f.Schema] {
		var v string
		var x *big.Int
		switch lf.kind {
		case kID, kB32:
			v = "0x" + hex.EncodeToString(d.next())
		case kU8:
			x = new(big.Int).SetUint64(uint64(d.uintN(8)[word-1]))
		case kU32:
			x = new(big.Int).SetUint64(uint64(binary.BigEndian.Uint32(d.uintN(32)[word-4:])))
		case kU64:
			x = new(big.Int).SetUint64(binary.BigEndian.Uint64(d.uintN(64)[word-8:]))
		case kU192:
			x = d.uint192()
		case kI192:
			x = d.int192()
		case kStr:
			v = d.str()
		}
		if x != nil {
			v, get[lf.name] = x.String(), x
		}
		f.Named = append(f.Named, NamedValue{Name: lf.name, Value: v, Int: x, Wide: lf.kind == kU192 || lf.kind == kI192})
	}
	if d.err != nil {
		return f, d.err
	}
	u32 := func(name string) uint32 {
		if x, ok := get[name]; ok && x.IsUint64() && x.Uint64() <= 1<<32-1 {
			return uint32(x.Uint64())
		}
		return 0
	}
	if f.Schema != SchemaV14 {
		f.ValidFromTimestamp, f.ObservationsTimestamp, f.ExpiresAt = u32("validFromTimestamp"), u32("observationsTimestamp"), u32("expiresAt")
	}
	f.NativeFee, f.LinkFee = get["nativeFee"], get["linkFee"]
	switch f.Schema {
	case SchemaV3:
		f.Price, f.Bid, f.Ask = get["price"], get["bid"], get["ask"]
	case SchemaV7:
		f.ExchangeRate = get["exchangeRate"]
	case SchemaV11:
		f.Mid, f.Bid, f.Ask = get["mid"], get["bid"], get["ask"]
		f.LastSeenTimestampNs = get["lastSeenTimestampNs"].Uint64()
		f.BidVolume, f.AskVolume = get["bidVolume"], get["askVolume"]
		f.LastTradedPrice = get["lastTradedPrice"]
		f.MarketStatus = u32("marketStatus")
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

// str reads a string member: the head word is the offset of its length
// word, the bytes follow it, padded with zeros to a whole word.
func (d *blobDecoder) str() string {
	off, ok := readUint(d.next())
	if !ok || off%word != 0 || off+word > uint64(len(d.b)) {
		d.failf("bad string offset")
		return ""
	}
	n, ok := readUint(d.b[off : off+word])
	if !ok || n > uint64(len(d.b))-off-word {
		d.failf("bad string length")
		return ""
	}
	body := d.b[off+word:]
	for _, c := range body[n:] {
		if c != 0 {
			d.failf("string padding not zero")
			break
		}
	}
	return string(body[:n])
}

func (d *blobDecoder) failf(msg string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrMalformedReport, msg)
	}
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
