package don

import (
	"bytes"
	"errors"
	"fmt"
	"math/big"

	"github.com/ethereum/go-ethereum/accounts/abi"
)

// The ABI layouts are go-ethereum's accounts/abi, as the official Go SDK
// decodes them: the offsets, lengths and integer widths are checked by a
// decoder that is fuzzed and used on chain data every day, not by one
// written here.

func mustType(t string) abi.Type {
	typ, err := abi.NewType(t, "", nil)
	if err != nil {
		panic(err)
	}
	return typ
}

func args(types ...string) abi.Arguments {
	out := make(abi.Arguments, len(types))
	for i, t := range types {
		out[i] = abi.Argument{Type: mustType(t)}
	}
	return out
}

var envelopeArgs = args("bytes32[3]", "bytes", "bytes32[]", "bytes32[]", "bytes32")

// ErrMalformed is wrapped by every decoding error.
var ErrMalformed = errors.New("don: malformed report")

// ErrTrailingBytes is the error of a fullReport that is the canonical
// encoding of its envelope followed by more bytes.
var ErrTrailingBytes = fmt.Errorf("%w: bytes after the envelope's end", ErrMalformed)

// Envelope is a decoded fullReport.
type Envelope struct {
	ReportContext [3][32]byte
	ReportBlob    []byte
	RawRs         [][32]byte
	RawSs         [][32]byte
	RawVs         [32]byte
}

// DecodeEnvelope decodes the ABI encoding of a fullReport, which must be
// canonical: exactly what abi.encode writes of the values it decodes to,
// its last word the end of the data. The decoder reads the words the
// offsets point to and ignores the rest, so a report with bytes appended
// (ErrTrailingBytes), or with offsets, lengths or padding an encoder would
// not write (ErrMalformed), would otherwise verify: its signatures cover
// the blob and the context, not the envelope. A fullReport over
// MaxReportSize is ErrOversize, not decoded.
func DecodeEnvelope(b []byte) (*Envelope, error) {
	if len(b) > MaxReportSize {
		return nil, fmt.Errorf("%w: a fullReport of %d bytes (at most %d)", ErrOversize, len(b), MaxReportSize)
	}
	vals, err := envelopeArgs.Unpack(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	again, err := envelopeArgs.Pack(vals...)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	case len(again) < len(b) && bytes.Equal(again, b[:len(again)]):
		return nil, fmt.Errorf("%w: %d bytes after the %d of the envelope", ErrTrailingBytes, len(b)-len(again), len(again))
	case !bytes.Equal(again, b):
		return nil, fmt.Errorf("%w: not the canonical encoding of its envelope", ErrMalformed)
	}
	env := &Envelope{}
	var ok [5]bool
	env.ReportContext, ok[0] = vals[0].([3][32]byte)
	env.ReportBlob, ok[1] = vals[1].([]byte)
	env.RawRs, ok[2] = vals[2].([][32]byte)
	env.RawSs, ok[3] = vals[3].([][32]byte)
	env.RawVs, ok[4] = vals[4].([32]byte)
	for _, o := range ok {
		if !o {
			return nil, fmt.Errorf("%w: unexpected types", ErrMalformed)
		}
	}
	return env, nil
}

// Schema is a report schema version, the first two bytes of a stream ID.
type Schema uint16

// String returns "V3", "V7", "V11"…
func (s Schema) String() string { return fmt.Sprintf("V%d", uint16(s)) }

// ErrUnknownSchema is returned by DecodeBlob and BlobHeader for a blob of
// a schema not in the table (schemas.go). It wraps ErrMalformed for the
// callers that only tell decoded from not, but the decoded view shows such
// a report as "unknown schema", never as an error.
var ErrUnknownSchema = fmt.Errorf("%w: unknown schema", ErrMalformed)

// Field is one decoded field of a report blob, in schema order.
type Field struct {
	Name string
	// Type is the Solidity type: bytes32, string, uint8, uint32, uint64,
	// uint192 or int192.
	Type string
	// Value is [32]byte, string, uint8, uint32, uint64 or *big.Int.
	Value any
	// Scaled: the integer carries 18 decimals (a price, rate, volume, fee
	// or multiplier); the decoded view states it also with the point
	// placed.
	Scaled bool
}

// SchemaOf returns the schema a blob (or a stream ID) states in its first
// two bytes.
func SchemaOf(blob []byte) Schema {
	if len(blob) < 2 {
		return 0
	}
	return Schema(uint16(blob[0])<<8 | uint16(blob[1]))
}

// DecodeBlob decodes a reportBlob (its schema read from the first two
// bytes of its feedId). A blob of a static schema must have exactly its
// schema's length; one with a dynamic member (V14's string) must be the
// canonical ABI encoding of what it decodes to. A schema not in the table
// gives ErrUnknownSchema and the schema.
func DecodeBlob(blob []byte) (Schema, []Field, error) {
	if len(blob) < 32 {
		return 0, nil, fmt.Errorf("%w: blob of %d bytes", ErrMalformed, len(blob))
	}
	s := SchemaOf(blob)
	sc, ok := schemas[s]
	if !ok {
		return s, nil, fmt.Errorf("%w %#04x", ErrUnknownSchema, uint16(s))
	}
	if !sc.dynamic && len(blob) != 32*len(sc.args) {
		return s, nil, fmt.Errorf("%w: %s blob of %d bytes, want %d", ErrMalformed, s, len(blob), 32*len(sc.args))
	}
	vals, err := sc.args.Unpack(blob)
	if err != nil {
		return s, nil, fmt.Errorf("%w: %s: %v", ErrMalformed, s, err)
	}
	if sc.dynamic {
		again, err := sc.args.Pack(vals...)
		if err != nil || !bytes.Equal(again, blob) {
			return s, nil, fmt.Errorf("%w: %s blob is not the canonical encoding of its fields", ErrMalformed, s)
		}
	}
	out := make([]Field, len(sc.fields))
	for i, f := range sc.fields {
		switch vals[i].(type) {
		case [32]byte, string, uint8, uint32, uint64, *big.Int:
		default:
			return s, nil, fmt.Errorf("%w: %s decoded as %T", ErrMalformed, f.name, vals[i])
		}
		out[i] = Field{Name: f.name, Type: f.typ, Value: vals[i], Scaled: f.scaled}
	}
	return s, out, nil
}

// Header is what every schema's blob says of its report's place: the
// fields a record's feedID, validFromTimestamp and observationsTimestamp
// must match.
type Header struct {
	Schema Schema
	FeedID [32]byte
	// ValidFromTimestamp is zero and HasValidFrom false for V1, whose blob
	// has none (it states block numbers instead).
	ValidFromTimestamp    uint64
	HasValidFrom          bool
	ObservationsTimestamp uint64
}

// BlobHeader returns the header of a blob of a schema of the table, which
// must decode (ErrUnknownSchema for another schema); ReadHeader reads it.
func BlobHeader(blob []byte) (Header, error) {
	s, _, err := DecodeBlob(blob)
	if err != nil {
		return Header{Schema: s}, err
	}
	return ReadHeader(blob)
}
