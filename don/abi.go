package don

import (
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

// Envelope is a decoded fullReport.
type Envelope struct {
	ReportContext [3][32]byte
	ReportBlob    []byte
	RawRs         [][32]byte
	RawSs         [][32]byte
	RawVs         [32]byte
}

// DecodeEnvelope decodes the ABI encoding of a fullReport.
func DecodeEnvelope(b []byte) (*Envelope, error) {
	vals, err := envelopeArgs.Unpack(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
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

// The schemas decoded.
const (
	SchemaV3  Schema = 0x0003
	SchemaV7  Schema = 0x0007
	SchemaV11 Schema = 0x000b
)

// String returns "V3", "V7" or "V11".
func (s Schema) String() string { return fmt.Sprintf("V%d", uint16(s)) }

// The fields every schema starts with, then each schema's own.
var (
	commonFields = []field{
		{"feedId", "bytes32"}, {"validFromTimestamp", "uint32"}, {"observationsTimestamp", "uint32"},
		{"nativeFee", "uint192"}, {"linkFee", "uint192"}, {"expiresAt", "uint32"},
	}
	schemaFields = map[Schema][]field{
		SchemaV3: {{"price", "int192"}, {"bid", "int192"}, {"ask", "int192"}},
		SchemaV7: {{"exchangeRate", "int192"}},
		SchemaV11: {{"mid", "int192"}, {"lastSeenTimestampNs", "uint64"}, {"bid", "int192"}, {"bidVolume", "int192"},
			{"ask", "int192"}, {"askVolume", "int192"}, {"lastTradedPrice", "int192"}, {"marketStatus", "uint32"}},
	}
	schemaArgs = map[Schema]abi.Arguments{}
)

type field struct{ name, typ string }

func init() {
	for s, own := range schemaFields {
		all := append(append([]field(nil), commonFields...), own...)
		types := make([]string, len(all))
		for i, f := range all {
			types[i] = f.typ
		}
		schemaFields[s] = all
		schemaArgs[s] = args(types...)
	}
}

// Field is one decoded field of a report blob, in schema order.
type Field struct {
	Name string
	Type string // the Solidity type: bytes32, uint32, uint64, uint192, int192
	// Value is [32]byte, uint32, uint64 or *big.Int.
	Value any
}

// DecodeBlob decodes a reportBlob of schema V3, V7 or V11 (read from the
// first two bytes of its feedId); the blob must have exactly its schema's
// length.
func DecodeBlob(blob []byte) (Schema, []Field, error) {
	if len(blob) < 32 {
		return 0, nil, fmt.Errorf("%w: blob of %d bytes", ErrMalformed, len(blob))
	}
	s := Schema(uint16(blob[0])<<8 | uint16(blob[1]))
	a, ok := schemaArgs[s]
	if !ok {
		return s, nil, fmt.Errorf("%w: unknown schema %#04x", ErrMalformed, uint16(s))
	}
	if len(blob) != 32*len(a) {
		return s, nil, fmt.Errorf("%w: %s blob of %d bytes, want %d", ErrMalformed, s, len(blob), 32*len(a))
	}
	vals, err := a.Unpack(blob)
	if err != nil {
		return s, nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	fs := schemaFields[s]
	out := make([]Field, len(fs))
	for i, f := range fs {
		switch vals[i].(type) {
		case [32]byte, uint32, uint64, *big.Int:
		default:
			return s, nil, fmt.Errorf("%w: %s decoded as %T", ErrMalformed, f.name, vals[i])
		}
		out[i] = Field{Name: f.name, Type: f.typ, Value: vals[i]}
	}
	return s, out, nil
}
