package don

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Reading report records. Every place a report enters the gateway (an
// upstream REST answer, a stream frame, an entry of the shared tier) and
// the decoded view read its record with the functions here, so that all of
// them, and every client after them, read the same fields:
//
//   - One report is bounded (MaxReportSize, MaxRecordSize) before its JSON
//     is parsed: a record over the bound is refused (ErrOversize), never
//     decoded, cached or served.
//   - The JSON must be valid, and a key must not appear twice in an object
//     that names the record or holds it (ErrDuplicateKey). JSON parsers do
//     not agree on a repeated key: Go's keeps the last, others the first,
//     so a record {"feedID":"<Y>","feedID":"<X>",…} around X's genuine
//     report would verify as X's here and be read as Y's by a client. A
//     key spelled as one of the record's fields in another case or with
//     escapes (Go's decoder matches "FEEDID" and "feed\u0049D" to feedID)
//     is refused likewise: the upstream writes its four fields as they
//     are named, once each.
//   - A key the record does not know is allowed (once): it cannot change
//     what a client reads of the four fields, and an upstream that adds a
//     field is not refused for it.
//
// The records are kept and served as the upstream sent them (their bytes
// are what the SDKs read, and what the cache stores); these checks decide
// only whether they are.

// MaxReportSize bounds a fullReport: the bytes of its ABI encoding (its hex
// is twice as long, and "0x"). The largest canonical report of the schema
// table (V14, seventeen words and a string, signed by 32 signers, the most
// rawVs can carry) is 2976 bytes; a real V3 report signed by f+1 = 2
// signers is 736. The bound leaves room for a schema more than twice the
// largest, and a fullReport longer than it is refused (ErrOversize) before
// it is decoded.
const MaxReportSize = 8 << 10

// MaxRecordSize bounds the JSON of one report: a record, or an answer or
// stream frame {"report":{…}} holding one. It is a fullReport of
// MaxReportSize in hex and 2 KiB for the other fields and the keys around:
// far below the 64 MiB an upstream answer may have, and below the 32 KiB
// the SDKs read of one stream message.
const MaxRecordSize = 2*MaxReportSize + 2<<10

// The errors of reading a record. ErrOversize and ErrDuplicateKey are
// refusals of the record itself, in every verification mode (Gate.Refuse
// counts them); CauseOf names every error's cause.
var (
	ErrOversize     = errors.New("don: report larger than any report can be")
	ErrDuplicateKey = errors.New("don: a key of the report appears twice, or in another spelling")
)

// CauseOf returns the cause of an error of reading or decoding a report:
// oversize, duplicate_key, trailing_bytes, or malformed for any other.
func CauseOf(err error) Cause {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrOversize):
		return CauseOversize
	case errors.Is(err, ErrDuplicateKey):
		return CauseDuplicateKey
	case errors.Is(err, ErrTrailingBytes):
		return CauseTrailingBytes
	}
	return CauseMalformed
}

// Refused reports whether err refuses a record in every mode (oversize,
// duplicate_key), whatever its signatures.
func Refused(err error) bool {
	c := CauseOf(err)
	return c == CauseOversize || c == CauseDuplicateKey
}

// The keys of a record and of the answers holding one.
const (
	keyFeedID     = "feedID"
	keyValidFrom  = "validFromTimestamp"
	keyObserved   = "observationsTimestamp"
	keyFullReport = "fullReport"
	keyReport     = "report"
	keyReports    = "reports"
)

var recordKeys = []string{keyFeedID, keyValidFrom, keyObserved, keyFullReport}

// ReadRecord reads a report record, a JSON object as the API sends it
// (see the rules above). A field the record lacks is left zero: the checks
// after it (the stream asked for, the signed blob's header) refuse it.
func ReadRecord(raw []byte) (Record, error) {
	if len(raw) > MaxRecordSize {
		return Record{}, fmt.Errorf("%w: a record of %d bytes (at most %d)", ErrOversize, len(raw), MaxRecordSize)
	}
	if !json.Valid(raw) {
		return Record{}, fmt.Errorf("%w: a record is not JSON", ErrMalformed)
	}
	return readRecord(raw)
}

// ReadReport reads an answer or a stream frame holding one report,
// {"report":{…}}: its record (ReadRecord) and the record's bytes, as sent
// (a slice of body).
func ReadReport(body []byte) (Record, []byte, error) {
	if len(body) > MaxRecordSize {
		return Record{}, nil, fmt.Errorf("%w: an answer of one report of %d bytes (at most %d)", ErrOversize, len(body), MaxRecordSize)
	}
	if !json.Valid(body) {
		return Record{}, nil, fmt.Errorf("%w: not JSON", ErrMalformed)
	}
	return readReport(body)
}

// ReadReports reads an answer holding a list of reports, {"reports":[…]}
// (a bulk answer, a page): each record (ReadRecord: each bounded by
// MaxRecordSize) and its bytes, as sent. An empty list is [] (null is
// malformed).
func ReadReports(body []byte) ([]Record, [][]byte, error) {
	if !json.Valid(body) {
		return nil, nil, fmt.Errorf("%w: not JSON", ErrMalformed)
	}
	var list []byte
	err := members(body, func(key, val []byte) error {
		switch k, err := knownKey(key, keyReports); {
		case err != nil:
			return err
		case !k:
			return nil
		case list != nil:
			return fmt.Errorf("%w: %q twice", ErrDuplicateKey, keyReports)
		}
		list = val
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	if len(list) == 0 || list[0] != '[' {
		return nil, nil, fmt.Errorf("%w: no list of reports", ErrMalformed)
	}
	recs, raws := []Record{}, [][]byte{}
	err = elements(list, func(val []byte) error {
		if len(val) > MaxRecordSize {
			return fmt.Errorf("%w: a record of %d bytes (at most %d)", ErrOversize, len(val), MaxRecordSize)
		}
		r, err := readRecord(val)
		if err != nil {
			return err
		}
		recs, raws = append(recs, r), append(raws, val)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return recs, raws, nil
}

// FrameKey returns what the real-time hub files a stream frame under, the
// feedID and observationsTimestamp of its record read as ReadReport reads
// them (the record's own keys, never a key of the same name elsewhere in
// the frame), without the size bound and, for a key repeated, from its
// first occurrence; ok is false when the frame is not JSON or lacks
// either. The frame's check (Gate.CheckFrame, ReadReport) refuses a frame
// that is over the bound or repeats a key; FrameKey only finds where it
// would go. feedID is a slice of frame when it holds no escape.
func FrameKey(frame []byte) (feedID []byte, observationsTimestamp int64, ok bool) {
	if !json.Valid(frame) {
		return nil, 0, false
	}
	return frameKey(frame)
}

// AcceptedFrameKey is FrameKey for a frame that FrameKey accepted before
// (one the real-time hub filed and delivered, read again per client): it
// gives the same answer without checking the frame's syntax again, which
// is most of FrameKey's cost (json.Valid over the fullReport's hex), paid
// once per frame per client otherwise. Bytes that are not JSON, which the
// scanners do not expect, give ok false (a scanner's panic on them is
// recovered), never a guess that a check would refuse.
func AcceptedFrameKey(frame []byte) (feedID []byte, observationsTimestamp int64, ok bool) {
	defer func() {
		if recover() != nil {
			feedID, observationsTimestamp, ok = nil, 0, false
		}
	}()
	return frameKey(frame)
}

// FrameFields is FrameKey with the record's validFromTimestamp too (0
// when the record lacks it): what the real-time hub reads of a frame, once,
// at its entry.
func FrameFields(frame []byte) (feedID []byte, validFromTimestamp, observationsTimestamp int64, ok bool) {
	if !json.Valid(frame) {
		return nil, 0, 0, false
	}
	f, ok := frameFields(frame)
	return f.feedID, f.validFrom, f.observed, ok
}

// frameKey is FrameKey on a frame whose syntax was checked.
func frameKey(frame []byte) (feedID []byte, observationsTimestamp int64, ok bool) {
	f, ok := frameFields(frame)
	return f.feedID, f.observed, ok
}

// frameFields reads the record of a frame whose syntax was checked, as
// FrameKey: ok false when it lacks feedID or observationsTimestamp.
func frameFields(frame []byte) (recordFields, bool) {
	var f recordFields
	found := false
	err := members(frame, func(key, val []byte) error {
		if found || string(key) != `"`+keyReport+`"` {
			return nil
		}
		found = true
		var err error
		f, err = scanRecord(val, false)
		return err
	})
	if err != nil || !f.has[0] || !f.has[2] {
		return recordFields{}, false
	}
	return f, true
}

// readReport reads {"report":{…}} (valid JSON) as ReadReport.
func readReport(body []byte) (Record, []byte, error) {
	var rec []byte
	err := members(body, func(key, val []byte) error {
		switch k, err := knownKey(key, keyReport); {
		case err != nil:
			return err
		case !k:
			return nil
		case rec != nil:
			return fmt.Errorf("%w: %q twice", ErrDuplicateKey, keyReport)
		}
		rec = val
		return nil
	})
	if err != nil {
		return Record{}, nil, err
	}
	if len(rec) == 0 || rec[0] != '{' {
		return Record{}, nil, fmt.Errorf("%w: no report", ErrMalformed)
	}
	r, err := readRecord(rec)
	return r, rec, err
}

// knownKey reports whether key (a JSON string as written) is name; a key
// that is name in another spelling (case, escapes) is ErrDuplicateKey.
func knownKey(key []byte, name string) (bool, error) {
	k := key[1 : len(key)-1]
	if string(k) == name {
		return true, nil
	}
	if s, ok := unquote(key); ok && strings.EqualFold(s, name) {
		return false, fmt.Errorf("%w: %s spelled %s", ErrDuplicateKey, name, key)
	}
	return false, nil
}

// readRecord reads a record (valid JSON) as ReadRecord.
func readRecord(raw []byte) (Record, error) {
	f, err := scanRecord(raw, true)
	if err != nil {
		return Record{}, err
	}
	return Record{FeedID: string(f.feedID), FullReport: string(f.fullReport),
		ValidFromTimestamp: f.validFrom, ObservationsTimestamp: f.observed}, nil
}

// recordFields are the fields of a record as scanned: the strings are
// slices of the record when they hold no escape.
type recordFields struct {
	feedID, fullReport  []byte
	validFrom, observed int64
	has                 [4]bool // in recordKeys' order
}

// scanRecord reads the four fields of a record (valid JSON). Strict, a key
// twice or one of the fields in another spelling is ErrDuplicateKey and a
// fullReport over MaxReportSize ErrOversize; not strict (FrameKey), the
// first occurrence of each field counts and other spellings are ignored.
// A field of the wrong JSON type is ErrMalformed in either.
func scanRecord(raw []byte, strict bool) (recordFields, error) {
	var f recordFields
	var seen keySet
	err := members(raw, func(key, val []byte) error {
		i := fieldIndex(key)
		if strict {
			if seen.add(key) {
				return fmt.Errorf("%w: %s twice", ErrDuplicateKey, key)
			}
			if i < 0 {
				if s, ok := unquote(key); ok {
					for _, name := range recordKeys {
						if strings.EqualFold(s, name) {
							return fmt.Errorf("%w: %s spelled %s", ErrDuplicateKey, name, key)
						}
					}
				}
				return nil
			}
		} else if i < 0 || f.has[i] {
			return nil
		}
		f.has[i] = true
		var ok bool
		switch recordKeys[i] {
		case keyFeedID:
			f.feedID, ok = stringValue(val)
		case keyFullReport:
			if strict && len(val) > 2+2+2*MaxReportSize {
				return fmt.Errorf("%w: a fullReport of %d hex digits (at most %d bytes)", ErrOversize, len(val)-4, MaxReportSize)
			}
			f.fullReport, ok = stringValue(val)
		case keyValidFrom:
			f.validFrom, ok = intValue(val)
		case keyObserved:
			f.observed, ok = intValue(val)
		}
		if !ok {
			return fmt.Errorf("%w: %s is not of its type", ErrMalformed, recordKeys[i])
		}
		return nil
	})
	return f, err
}

// fieldIndex returns the index in recordKeys of key (a JSON string as
// written, without escapes), or -1.
func fieldIndex(key []byte) int {
	k := key[1 : len(key)-1]
	for i, name := range recordKeys {
		if string(k) == name {
			return i
		}
	}
	return -1
}

// keySet holds the keys of one object, as written (a key with escapes is
// compared unescaped).
type keySet struct {
	list []string
	m    map[string]struct{}
}

// add adds key and reports whether it was there already.
func (s *keySet) add(key []byte) bool {
	k, ok := unquote(key)
	if !ok {
		k = string(key)
	}
	if s.m != nil {
		if _, dup := s.m[k]; dup {
			return true
		}
		s.m[k] = struct{}{}
		return false
	}
	for _, have := range s.list {
		if have == k {
			return true
		}
	}
	s.list = append(s.list, k)
	if len(s.list) > 16 {
		s.m = make(map[string]struct{}, 2*len(s.list))
		for _, have := range s.list {
			s.m[have] = struct{}{}
		}
	}
	return false
}

// unquote returns the string a JSON string (as written) holds, as Go's
// decoder reads it (invalid UTF-8 replaced).
func unquote(s []byte) (string, bool) {
	inner := s[1 : len(s)-1]
	if !hasEscape(inner) && utf8.Valid(inner) {
		return string(inner), true
	}
	var out string
	err := json.Unmarshal(s, &out)
	return out, err == nil
}

func hasEscape(b []byte) bool { return bytes.IndexByte(b, '\\') >= 0 }

// stringValue returns the contents of a JSON string value, as Go's decoder
// reads it (invalid UTF-8 replaced): a slice of it when it holds no escape
// and is valid UTF-8.
func stringValue(val []byte) ([]byte, bool) {
	if len(val) < 2 || val[0] != '"' {
		return nil, false
	}
	if inner := val[1 : len(val)-1]; !hasEscape(inner) && utf8.Valid(inner) {
		return inner, true
	}
	s, ok := unquote(val)
	return []byte(s), ok
}

// intValue returns a JSON number that is an integer within int64, as Go's
// decoder reads one into an int64 (no fraction, no exponent).
func intValue(val []byte) (int64, bool) {
	n, err := strconv.ParseInt(string(val), 10, 64)
	return n, err == nil && len(val) > 0 && val[0] != '+'
}

// The scanners below walk JSON that json.Valid accepted: they need not
// check its syntax.

// members calls fn with each member of the object b: its key as written
// (quotes included) and its value's bytes. b that is not an object is
// ErrMalformed.
func members(b []byte, fn func(key, val []byte) error) error {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return fmt.Errorf("%w: not an object", ErrMalformed)
	}
	i = skipSpace(b, i+1)
	if b[i] == '}' {
		return nil
	}
	for {
		end := stringEnd(b, i)
		key := b[i:end]
		i = skipSpace(b, skipSpace(b, end)+1) // past the colon
		vend := valueEnd(b, i)
		if err := fn(key, b[i:vend]); err != nil {
			return err
		}
		i = skipSpace(b, vend)
		if b[i] == '}' {
			return nil
		}
		i = skipSpace(b, i+1) // past the comma
	}
}

// elements calls fn with each element of the array b.
func elements(b []byte, fn func(val []byte) error) error {
	i := skipSpace(b, 1)
	if b[i] == ']' {
		return nil
	}
	for {
		vend := valueEnd(b, i)
		if err := fn(b[i:vend]); err != nil {
			return err
		}
		i = skipSpace(b, vend)
		if b[i] == ']' {
			return nil
		}
		i = skipSpace(b, i+1)
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// stringEnd returns the index after the string that starts at b[i].
func stringEnd(b []byte, i int) int {
	for j := i + 1; ; {
		q := j + bytes.IndexByte(b[j:], '"')
		escaped := false // an odd number of backslashes before the quote
		for p := q - 1; p > i && b[p] == '\\'; p-- {
			escaped = !escaped
		}
		if !escaped {
			return q + 1
		}
		j = q + 1
	}
}

// valueEnd returns the index after the value that starts at b[i].
func valueEnd(b []byte, i int) int {
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for j := i; ; j++ {
			switch b[j] {
			case '"':
				j = stringEnd(b, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
	}
	j := i
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
		j++
	}
	return j
}
