package don

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strconv"
)

// The decoded view: a report record as the upstream sent it, its fields
// untouched (fullReport included), with three more members:
//
//	"decoded":      every field of the report's schema (schemas.go), in
//	                schema order: feedId as 0x and hex, every integer as a
//	                decimal string, a marketStatus followed by its
//	                marketStatusName, a ripcord by its ripcordName; a schema
//	                not in the table is {"schema":"unknown schema",
//	                "version":"V15"}, never an error;
//	"decimal":      the scaled values (18 decimals: prices, rates, volumes,
//	                fees…) as decimal strings with the point placed:
//	                "4204.150104000000000000";
//	"verification": the DON verification of the report under the
//	                configuration in force: {"mode", "verified", "signers",
//	                "configDigest"} and, when it did not verify, "cause" and
//	                "meaning".

// DecodedMediaType is the media type a client asks for (Accept) to get the
// decoded view.
const DecodedMediaType = "application/vnd.streamgate.decoded+json"

// Verification is what the decoded view states of a report's signatures.
type Verification struct {
	Mode   string // enforce, report or off
	Result Result // meaningless in mode off
}

// DecodeFullReport decodes a fullReport given as 0x and hex: its envelope
// and its blob's fields.
func DecodeFullReport(fullReport string) (Schema, []Field, error) {
	b, ok := hexBytes(fullReport)
	if !ok {
		return 0, nil, fmt.Errorf("%w: fullReport is not 0x and hex", ErrMalformed)
	}
	env, err := DecodeEnvelope(b)
	if err != nil {
		return 0, nil, err
	}
	return DecodeBlob(env.ReportBlob)
}

// AppendFields appends the "decoded" and "decimal" objects of fields (as
// `"decoded":{…},"decimal":{…}`) to dst: every field in schema order, its
// integers as decimal strings, a marketStatus followed by its name
// (marketStatusName) and a ripcord by its (ripcordName); "decimal" holds the
// scaled fields with the point placed.
func AppendFields(dst []byte, schema Schema, fields []Field) []byte {
	dst = append(dst, `"decoded":{"schema":"`...)
	dst = append(dst, schema.String()...)
	dst = append(dst, '"')
	for _, f := range fields {
		dst = append(dst, `,"`...)
		dst = append(dst, f.Name...)
		dst = append(dst, `":`...)
		var status uint64
		switch v := f.Value.(type) {
		case [32]byte:
			dst = append(dst, `"0x`...)
			dst = hex.AppendEncode(dst, v[:])
			dst = append(dst, '"')
		case string:
			m, _ := json.Marshal(v)
			dst = append(dst, m...)
		case uint8:
			status = uint64(v)
			dst = appendQuotedUint(dst, status)
		case uint32:
			status = uint64(v)
			dst = appendQuotedUint(dst, status)
		case uint64:
			dst = appendQuotedUint(dst, v)
		case *big.Int:
			dst = append(dst, '"')
			dst = v.Append(dst, 10)
			dst = append(dst, '"')
		}
		switch f.Name {
		case "marketStatus":
			dst = append(dst, `,"marketStatusName":"`...)
			dst = append(dst, MarketStatusName(schema, uint32(status))...)
			dst = append(dst, '"')
		case "ripcord":
			dst = append(dst, `,"ripcordName":"`...)
			dst = append(dst, RipcordName(uint32(status))...)
			dst = append(dst, '"')
		}
	}
	dst = append(dst, `},"decimal":{`...)
	first := true
	for _, f := range fields {
		v, ok := f.Value.(*big.Int)
		if !ok || !f.Scaled {
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = append(dst, '"')
		dst = append(dst, f.Name...)
		dst = append(dst, `":"`...)
		dst = AppendDecimal(dst, v, 18)
		dst = append(dst, '"')
	}
	return append(dst, '}')
}

// UnknownSchema is the decoded view's "schema" of a report whose schema
// streamgate does not decode.
const UnknownSchema = "unknown schema"

// appendUnknown appends the decoded view of a report of an unknown schema:
// `"decoded":{"schema":"unknown schema","version":"V15"},"decimal":{}`.
func appendUnknown(dst []byte, s Schema) []byte {
	dst = append(dst, `"decoded":{"schema":"`+UnknownSchema+`","version":"`...)
	dst = append(dst, s.String()...)
	return append(dst, `"},"decimal":{}`...)
}

func appendQuotedUint(dst []byte, v uint64) []byte {
	dst = append(dst, '"')
	dst = strconv.AppendUint(dst, v, 10)
	return append(dst, '"')
}

// AppendDecimal appends v·10⁻ᵈ with all d decimals: "-0.000000000000000001".
func AppendDecimal(dst []byte, v *big.Int, d int) []byte {
	if v.Sign() < 0 {
		dst = append(dst, '-')
	}
	digits := new(big.Int).Abs(v).Text(10)
	if len(digits) <= d {
		digits = string(bytes.Repeat([]byte{'0'}, d-len(digits)+1)) + digits
	}
	dst = append(dst, digits[:len(digits)-d]...)
	if d > 0 {
		dst = append(dst, '.')
		dst = append(dst, digits[len(digits)-d:]...)
	}
	return dst
}

// AppendVerification appends `"verification":{…}`.
func AppendVerification(dst []byte, v Verification) []byte {
	dst = append(dst, `"verification":{"mode":"`...)
	dst = append(dst, v.Mode...)
	dst = append(dst, `","verified":`...)
	if v.Mode == ModeOff {
		return append(dst, `false}`...)
	}
	dst = strconv.AppendBool(dst, v.Result.OK())
	dst = append(dst, `,"signers":`...)
	dst = strconv.AppendInt(dst, int64(v.Result.Signers), 10)
	dst = append(dst, `,"configDigest":"`...)
	dst = append(dst, hexDigest(v.Result.Digest)...)
	dst = append(dst, '"')
	if !v.Result.OK() {
		dst = append(dst, `,"cause":"`...)
		dst = append(dst, v.Result.Cause...)
		dst = append(dst, `","meaning":`...)
		m, _ := json.Marshal(v.Result.Cause.Meaning())
		dst = append(dst, m...)
	}
	return append(dst, '}')
}

// AppendDecodedRecord appends the decoded view of a report record (a JSON
// object as the upstream sent it) to dst: the record's members unchanged,
// then "decoded", "decimal" and "verification" (verify gives the latter
// for the record: its fields and fullReport). A fullReport that does not
// decode gets "decodeError" instead of "decoded" and "decimal"; one of a
// schema not in the table is shown as "unknown schema".
func AppendDecodedRecord(dst, rec []byte, verify func(Record) Verification) ([]byte, error) {
	trimmed := bytes.TrimSpace(rec)
	r, err := ReadRecord(trimmed)
	if err != nil {
		return dst, err
	}
	dst = append(dst, trimmed[:len(trimmed)-1]...)
	if len(bytes.TrimSpace(trimmed[1:len(trimmed)-1])) > 0 {
		dst = append(dst, ',')
	}
	schema, fields, err := DecodeFullReport(r.FullReport)
	switch {
	case errors.Is(err, ErrUnknownSchema):
		dst = appendUnknown(dst, schema)
	case err != nil:
		dst = append(dst, `"decodeError":`...)
		m, _ := json.Marshal(err.Error())
		dst = append(dst, m...)
	default:
		dst = AppendFields(dst, schema, fields)
	}
	dst = append(dst, ',')
	dst = AppendVerification(dst, verify(r))
	return append(dst, '}'), nil
}

// DecodedBody returns the decoded view of an answer body of the API:
// {"report":{…}} or {"reports":[…]}, each record decoded.
func DecodedBody(body []byte, verify func(Record) Verification) ([]byte, error) {
	out := make([]byte, 0, 2*len(body)+512)
	if _, rec, err := ReadReport(body); err == nil {
		out = append(out, `{"report":`...)
		if out, err = AppendDecodedRecord(out, rec, verify); err != nil {
			return nil, err
		}
		out = append(out, '}')
	} else {
		_, recs, err := ReadReports(body)
		if err != nil {
			return nil, err
		}
		out = append(out, `{"reports":[`...)
		for i, rec := range recs {
			if i > 0 {
				out = append(out, ',')
			}
			if out, err = AppendDecodedRecord(out, rec, verify); err != nil {
				return nil, err
			}
		}
		out = append(out, "]}"...)
	}
	return append(out, '\n'), nil
}
