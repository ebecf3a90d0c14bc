package don_test

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"streamgate/don"
	"streamgate/upstreamsim"
)

const (
	idX = "0x0003" + "1111111111111111111111111111111111111111111111111111111111"
	idY = "0x0003" + "2222222222222222222222222222222222222222222222222222222222"
)

// Each record is read as every JSON parser reads it, or refused with the
// cause that says why not.
func TestReadRecord(t *testing.T) {
	tail := `"validFromTimestamp":1,"observationsTimestamp":2,"fullReport":"0x00"`
	cases := []struct {
		name, rec string
		cause     don.Cause
	}{
		{"as the upstream writes it", `{"feedID":"` + idX + `",` + tail + `}`, ""},
		{"spaces around", " {\n \"feedID\" : \"" + idX + "\" , " + tail + " }\n", ""},
		{"a key the record does not know", `{"feedID":"` + idX + `",` + tail + `,"extra":{"feedID":"` + idY + `"}}`, ""},
		{"an unknown key before, holding a feedID", `{"extra":{"feedID":"` + idY + `"},"feedID":"` + idX + `",` + tail + `}`, ""},
		{"an escaped value", `{"feedID":"0x\u0030003` + idX[6:] + `",` + tail + `}`, ""},
		{"feedID twice, the other stream first", `{"feedID":"` + idY + `","feedID":"` + idX + `",` + tail + `}`, don.CauseDuplicateKey},
		{"feedID twice, the other stream last", `{"feedID":"` + idX + `",` + tail + `,"feedID":"` + idY + `"}`, don.CauseDuplicateKey},
		{"feedID twice, the same", `{"feedID":"` + idX + `","feedID":"` + idX + `",` + tail + `}`, don.CauseDuplicateKey},
		{"a time twice", `{"feedID":"` + idX + `",` + tail + `,"observationsTimestamp":3}`, don.CauseDuplicateKey},
		{"feedID in capitals", `{"FEEDID":"` + idY + `","feedID":"` + idX + `",` + tail + `}`, don.CauseDuplicateKey},
		{"feedID in capitals alone", `{"FeedID":"` + idX + `",` + tail + `}`, don.CauseDuplicateKey},
		{"feedID escaped", `{"feed\u0049D":"` + idY + `","feedID":"` + idX + `",` + tail + `}`, don.CauseDuplicateKey},
		{"long s folds to s", "{\"feedID\":\"" + idX + "\",\"validFromTimestamp\":1,\"ob\u017fervationsTimestamp\":5,\"observationsTimestamp\":2,\"fullReport\":\"0x00\"}", don.CauseDuplicateKey},
		{"an unknown key twice", `{"feedID":"` + idX + `",` + tail + `,"x":1,"x":2}`, don.CauseDuplicateKey},
		{"not JSON", `{"feedID":"` + idX + `",`, don.CauseMalformed},
		{"a time as a string", `{"feedID":"` + idX + `","observationsTimestamp":"2"}`, don.CauseMalformed},
		{"a time with a fraction", `{"feedID":"` + idX + `","observationsTimestamp":2.0}`, don.CauseMalformed},
		{"a time null", `{"feedID":"` + idX + `","observationsTimestamp":null}`, don.CauseMalformed},
		{"a feedID that is a number", `{"feedID":3}`, don.CauseMalformed},
		{"an array", `[{"feedID":"` + idX + `"}]`, don.CauseMalformed},
		{"a fullReport over the bound", `{"feedID":"` + idX + `","fullReport":"0x` + strings.Repeat("00", don.MaxReportSize+1) + `"}`, don.CauseOversize},
		{"a record over the bound", `{"feedID":"` + idX + `","pad":"` + strings.Repeat(" ", don.MaxRecordSize) + `"}`, don.CauseOversize},
	}
	for _, c := range cases {
		r, err := don.ReadRecord([]byte(c.rec))
		if got := don.CauseOf(err); got != c.cause {
			t.Errorf("%s: cause %q (%v), want %q", c.name, got, err, c.cause)
			continue
		}
		if err != nil {
			if don.Refused(err) != (c.cause == don.CauseDuplicateKey || c.cause == don.CauseOversize) {
				t.Errorf("%s: refused %v", c.name, don.Refused(err))
			}
			continue
		}
		if r.FeedID != idX || r.ObservationsTimestamp != 2 || r.ValidFromTimestamp != 1 || r.FullReport != "0x00" {
			t.Errorf("%s: read %+v", c.name, r)
		}
		// What Go's decoder reads of it, and a reader that keeps the
		// first of a key: the same.
		var goRead don.Record
		if err := json.Unmarshal([]byte(c.rec), &goRead); err != nil || goRead != r {
			t.Errorf("%s: Go reads %+v (%v)", c.name, goRead, err)
		}
		if first, ok := firstKeyRecord([]byte(c.rec)); !ok || first != r {
			t.Errorf("%s: first-key reader reads %+v", c.name, first)
		}
	}
}

// An answer or frame holding one report: "report" once, the record read
// as above; FrameKey files it under the record's own feedID and time.
func TestReadReport(t *testing.T) {
	rec := `{"feedID":"` + idX + `","validFromTimestamp":1,"observationsTimestamp":2,"fullReport":"0x00"}`
	cases := []struct {
		name, body string
		cause      don.Cause
		key        bool // FrameKey finds idX at 2
	}{
		{"as the upstream writes it", `{"report":` + rec + `}`, "", true},
		{"a key beside, before, holding another feedID", `{"x":{"feedID":"` + idY + `","observationsTimestamp":9},"report":` + rec + `}`, "", true},
		{"report twice", `{"report":` + strings.Replace(rec, idX, idY, 1) + `,"report":` + rec + `}`, don.CauseDuplicateKey, false},
		{"report in capitals", `{"Report":` + strings.Replace(rec, idX, idY, 1) + `,"report":` + rec + `}`, don.CauseDuplicateKey, false},
		{"a record repeating feedID", `{"report":{"feedID":"` + idX + `","feedID":"` + idY + `","observationsTimestamp":2}}`, don.CauseDuplicateKey, true},
		{"no report", `{"reports":[` + rec + `]}`, don.CauseMalformed, false},
		{"over the bound", `{"report":` + rec + `,"pad":"` + strings.Repeat(" ", don.MaxRecordSize) + `"}`, don.CauseOversize, true},
	}
	for _, c := range cases {
		r, raw, err := don.ReadReport([]byte(c.body))
		if got := don.CauseOf(err); got != c.cause {
			t.Errorf("%s: cause %q (%v), want %q", c.name, got, err, c.cause)
		}
		if err == nil && (string(raw) != rec || r.FeedID != idX) {
			t.Errorf("%s: %+v, %s", c.name, r, raw)
		}
		feed, ts, ok := don.FrameKey([]byte(c.body))
		if c.key && (!ok || string(feed) != idX || ts != 2) {
			t.Errorf("%s: FrameKey %s %d %v", c.name, feed, ts, ok)
		}
	}
	recs, raws, err := don.ReadReports([]byte(`{"reports":[` + rec + `,` + rec + `]}`))
	if err != nil || len(recs) != 2 || string(raws[1]) != rec {
		t.Errorf("a list of two: %v %d", err, len(recs))
	}
	if _, _, err := don.ReadReports([]byte(`{"reports":[],"reports":[` + rec + `]}`)); don.CauseOf(err) != don.CauseDuplicateKey {
		t.Errorf("reports twice: %v", err)
	}
	if recs, _, err := don.ReadReports([]byte(`{"reports":[]}`)); err != nil || recs == nil {
		t.Errorf("an empty list: %v", err)
	}
	if _, _, err := don.ReadReports([]byte(`{"reports":null}`)); don.CauseOf(err) != don.CauseMalformed {
		t.Errorf("a null list: %v", err)
	}
}

// firstKeyRecord reads a record as a parser that keeps the first of a
// repeated key (and matches keys case-insensitively, as Go's does).
func firstKeyRecord(b []byte) (don.Record, bool) {
	var r don.Record
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return r, false
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return r, false
		}
		key := strings.ToLower(tok.(string))
		var dst any
		switch key {
		case "feedid":
			dst = &r.FeedID
		case "fullreport":
			dst = &r.FullReport
		case "validfromtimestamp":
			dst = &r.ValidFromTimestamp
		case "observationstimestamp":
			dst = &r.ObservationsTimestamp
		}
		if dst == nil || seen[key] {
			dst = new(json.RawMessage)
		}
		seen[key] = true
		if err := dec.Decode(dst); err != nil {
			return r, false
		}
	}
	return r, true
}

// Only the canonical encoding of a report's envelope verifies: bytes
// appended are trailing_bytes (a word as a 20 MiB tail), an offset a
// canonical encoder would not write malformed, and a fullReport over
// MaxReportSize oversize, before it is decoded.
func TestCanonicalEnvelope(t *testing.T) {
	at := time.Date(2026, 3, 4, 15, 0, 0, 0, time.UTC)
	sim, v := simDON(t, at)
	for schema, feed := range someFeeds(t, sim) {
		r, _ := sim.Report(upstreamsim.Mainnet, feed, at.Unix()-1)
		full := unhex(t, r.FullReport)
		if res := v.Verify(full); !res.OK() {
			t.Fatalf("%s: genuine: %+v", schema, res)
		}
		for _, n := range []int{1, 32, 1000} {
			if res := v.Verify(append(bytes.Clone(full), make([]byte, n)...)); res.Cause != don.CauseTrailingBytes {
				t.Errorf("%s: %d bytes appended: %+v", schema, n, res)
			}
		}
		// The blob's offset moved one word on, a word inserted before it:
		// the decoder reads the same values, no encoder writes it so.
		moved := bytes.Clone(full[:32*4])
		moved[32*4-1] += 32
		moved = append(append(append(moved, full[32*4:32*7]...), make([]byte, 32)...), full[32*7:]...)
		moved[32*5-1] += 32 // rawRs' offset
		moved[32*6-1] += 32 // rawSs'
		if env, err := don.DecodeEnvelope(moved); err == nil || errors.Is(err, don.ErrTrailingBytes) {
			t.Errorf("%s: a non-canonical offset decodes: %v %v", schema, env != nil, err)
		}
		if res := v.Verify(moved); res.Cause != don.CauseMalformed {
			t.Errorf("%s: a non-canonical offset: %+v", schema, res)
		}
		r.FullReport += strings.Repeat("00", upstreamsim.OversizeBytes/1024)
		if res := v.VerifyRecord(don.Record(r)); res.Cause != don.CauseOversize {
			t.Errorf("%s: 20 KiB appended: %+v", schema, res)
		}
	}
}

// The size bounds hold every report of the schema table with room: the
// largest canonical fullReport (V14: seventeen words and a string of up
// to 32 bytes, 32 signatures) is 2976 bytes, less than half of
// MaxReportSize, and a record with a fullReport of MaxReportSize reads.
func TestSizeBoundsHoldTheSchemas(t *testing.T) {
	largest := 0
	for _, s := range don.Schemas {
		words := len(don.FieldNames(s))
		if s == don.SchemaV14 {
			words += 2 // the string's length and one word of it
		}
		const signers = 32
		size := 32*7 + 32 + 32*words + 2*(32+32*signers)
		largest = max(largest, size)
	}
	if largest != 2976 || 2*largest > don.MaxReportSize {
		t.Errorf("the largest report is %d bytes, MaxReportSize %d", largest, don.MaxReportSize)
	}
	rec := `{"feedID":"` + idX + `","validFromTimestamp":1758586188,"observationsTimestamp":1758586189,"fullReport":"0x` +
		hex.EncodeToString(make([]byte, don.MaxReportSize)) + `"}`
	if _, _, err := don.ReadReport([]byte(`{"report":` + rec + "}\n")); err != nil {
		t.Errorf("a report of MaxReportSize: %v", err)
	}
}
