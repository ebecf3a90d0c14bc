package don_test

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"testing"
	"time"

	"streamgate/don"
	"streamgate/upstreamsim"
)

// seeds returns genuine fullReports of every schema and the real report.
func seeds(f *testing.F) [][]byte {
	at := time.Date(2026, 3, 4, 15, 0, 0, 0, time.UTC)
	sim, _ := simDON(f, at)
	var out [][]byte
	for _, feed := range someFeeds(f, sim) {
		r, _ := sim.Report(upstreamsim.Mainnet, feed, at.Unix()-1)
		out = append(out, unhex(f, r.FullReport))
	}
	return append(out, unhex(f, loadReal(f).FullReport))
}

// FuzzDecode: no input makes the envelope or blob decoders, the verifier
// or the decoded view panic; a blob both decoders accept decodes to the
// same fields with the gateway's (go-ethereum's ABI) as with the
// simulator's independent one, and the decoded view is valid JSON.
func FuzzDecode(f *testing.F) {
	at := time.Date(2026, 3, 4, 15, 0, 0, 0, time.UTC)
	_, v := simDON(f, at)
	for _, s := range seeds(f) {
		f.Add(s)
		f.Add(append(bytes.Clone(s), make([]byte, 32)...)) // trailing bytes
		f.Add(append(bytes.Clone(s), 1))
		if env, err := don.DecodeEnvelope(s); err == nil {
			f.Add(env.ReportBlob) // blobs alone, for the differential check
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		res := v.Verify(b)
		sameBlob(t, b)
		env, err := don.DecodeEnvelope(b)
		if err != nil {
			if res.OK() {
				t.Fatalf("verified, but the envelope does not decode: %v", err)
			}
			return
		}
		// Only the canonical encoding decodes: anything appended is
		// trailing bytes, and a byte of it changed leaves it so.
		for _, tail := range [][]byte{{0}, make([]byte, 32), b[:min(len(b), 7)]} {
			if _, err := don.DecodeEnvelope(append(bytes.Clone(b), tail...)); !errors.Is(err, don.ErrTrailingBytes) && len(b)+len(tail) <= don.MaxReportSize {
				t.Fatalf("%d bytes appended: %v", len(tail), err)
			}
		}
		full := "0x" + hex.EncodeToString(b)
		rec, _ := json.Marshal(map[string]any{"feedID": "0x" + hex.EncodeToString(make([]byte, 32)), "fullReport": full})
		view, err := don.AppendDecodedRecord(nil, rec, func(r don.Record) don.Verification {
			return don.Verification{Mode: don.ModeEnforce, Result: v.VerifyRecord(r)}
		})
		if err != nil || !json.Valid(view) {
			t.Fatalf("decoded view %q (%v) is not JSON", view, err)
		}
		sameBlob(t, env.ReportBlob)
	})
}

// sameBlob checks that a blob both decoders accept decodes to the same
// fields, in the same order, with the same values, and that BlobHeader
// gives its header fields.
func sameBlob(t *testing.T, blob []byte) {
	schema, fields, err := don.DecodeBlob(blob)
	simFields, simErr := upstreamsim.DecodeReportBlob(blob)
	if err != nil || simErr != nil {
		return
	}
	if uint16(schema) != uint16(simFields.Schema) {
		t.Fatalf("schema %v, simulator %v", schema, simFields.Schema)
	}
	if len(fields) != len(simFields.Named) {
		t.Fatalf("%s: %d fields, simulator %d", schema, len(fields), len(simFields.Named))
	}
	for i, fd := range fields {
		sim := simFields.Named[i]
		if fd.Name != sim.Name || fieldString(fd) != sim.Value {
			t.Fatalf("%s field %d: %s = %s, simulator %s = %s", schema, i, fd.Name, fieldString(fd), sim.Name, sim.Value)
		}
		if fd.Scaled != sim.Wide {
			t.Fatalf("%s: %s scaled %v, simulator's 192-bit %v", schema, fd.Name, fd.Scaled, sim.Wide)
		}
	}
	h, err := don.BlobHeader(blob)
	if err != nil || h.Schema != schema || h.FeedID != simFields.FeedID {
		t.Fatalf("header %+v: %v", h, err)
	}
	if schema != don.SchemaV14 && (uint32(h.ObservationsTimestamp) != simFields.ObservationsTimestamp ||
		uint32(h.ValidFromTimestamp) != simFields.ValidFromTimestamp || h.HasValidFrom == (schema == don.SchemaV1)) {
		t.Fatalf("%s header %+v, simulator %d %d", schema, h, simFields.ValidFromTimestamp, simFields.ObservationsTimestamp)
	}
}

// fieldString is a field's value as the simulator's decoder states it.
func fieldString(fd don.Field) string {
	switch x := fd.Value.(type) {
	case *big.Int:
		return x.String()
	case uint8:
		return strconv.FormatUint(uint64(x), 10)
	case uint32:
		return strconv.FormatUint(uint64(x), 10)
	case uint64:
		return strconv.FormatUint(x, 10)
	case [32]byte:
		return "0x" + hex.EncodeToString(x[:])
	case string:
		return x
	}
	return fmt.Sprintf("%T", fd.Value)
}

// The real report decodes to the values the official SDK gave (testdata).
func TestRealReportDecodes(t *testing.T) {
	r := loadReal(t)
	schema, fields, err := don.DecodeFullReport(r.FullReport)
	if err != nil {
		t.Fatal(err)
	}
	if schema != don.SchemaV3 {
		t.Fatalf("schema %v", schema)
	}
	got := map[string]string{}
	for _, f := range fields {
		switch x := f.Value.(type) {
		case *big.Int:
			got[f.Name] = x.String()
		case uint32:
			got[f.Name] = big.NewInt(int64(x)).String()
		case [32]byte:
			got[f.Name] = "0x" + hex.EncodeToString(x[:])
		}
	}
	d := r.Decoded
	want := map[string]string{
		"feedId": d.FeedID, "validFromTimestamp": big.NewInt(d.ValidFromTimestamp).String(),
		"observationsTimestamp": big.NewInt(d.ObservationsTimestamp).String(), "nativeFee": d.NativeFee,
		"linkFee": d.LinkFee, "expiresAt": big.NewInt(d.ExpiresAt).String(), "price": d.Price, "bid": d.Bid, "ask": d.Ask,
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: %s, want %s", k, got[k], w)
		}
	}
	price, _ := new(big.Int).SetString(d.Price, 10)
	if s := string(don.AppendDecimal(nil, price, 18)); s != "4204.150104000000000000" {
		t.Errorf("price with 18 decimals: %s", s)
	}
	if s := string(don.AppendDecimal(nil, big.NewInt(-5), 18)); s != "-0.000000000000000005" {
		t.Errorf("-5e-18: %s", s)
	}
}

// FuzzReadReport: no input makes the record readers panic; a frame or
// record they accept reads the same with Go's decoder (which keeps the
// last of a repeated key) and with one that keeps the first, so that no
// client reads another stream or time than the gateway checked; FrameKey
// files an accepted frame under its record's feedID and time.
func FuzzReadReport(f *testing.F) {
	at := time.Date(2026, 3, 4, 15, 0, 0, 0, time.UTC)
	sim, _ := simDON(f, at)
	for _, feed := range someFeeds(f, sim) {
		r, _ := sim.Report(upstreamsim.Mainnet, feed, at.Unix()-1)
		rec, _ := json.Marshal(r)
		f.Add([]byte(`{"report":` + string(rec) + `}`))
		f.Add(rec)
		dup := `{"feedID":"` + idY + `",` + string(rec[1:])
		f.Add([]byte(`{"report":` + dup + `}`))
		f.Add([]byte(`{"report":` + string(rec[:len(rec)-1]) + `,"feedID":"` + idY + `"}}`))
		f.Add([]byte(`{"report":` + string(rec[:len(rec)-1]) + `,"FEEDID":"` + idY + `"}}`))
		f.Add([]byte(`{"report":` + string(rec[:len(rec)-1]) + `,"feed\u0049D":"` + idY + `"}}`))
		f.Add([]byte(`{"x":{"feedID":"` + idY + `"},"report":` + string(rec) + `,"report":` + dup + `}`))
		f.Add([]byte(`{"reports":[` + string(rec) + `,` + dup + `]}`))
		break
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, err := don.ReadRecord(b); err == nil {
			sameReading(t, b, r)
		}
		// A frame FrameKey accepted reads the same without its syntax
		// checked again (the hub's clients' reading), and any bytes give
		// AcceptedFrameKey an answer, never a panic.
		afeed, ats, aok := don.AcceptedFrameKey(b)
		if feed, ts, ok := don.FrameKey(b); ok && (!aok || string(afeed) != string(feed) || ats != ts) {
			t.Fatalf("FrameKey %s %d, AcceptedFrameKey %s %d %v", feed, ts, afeed, ats, aok)
		}
		r, raw, err := don.ReadReport(b)
		if err == nil {
			sameReading(t, raw, r)
			var doc struct{ Report don.Record }
			if err := json.Unmarshal(b, &doc); err != nil || doc.Report != r {
				t.Fatalf("Go reads the answer's report as %+v (%v), the reader %+v", doc.Report, err, r)
			}
			if feed, ts, ok := don.FrameKey(b); ok && (string(feed) != r.FeedID || ts != r.ObservationsTimestamp) {
				t.Fatalf("FrameKey %s %d, the reader %+v", feed, ts, r)
			}
		}
		if recs, raws, err := don.ReadReports(b); err == nil {
			for i := range recs {
				sameReading(t, raws[i], recs[i])
			}
		}
	})
}

// sameReading checks that Go's decoder and a first-key reader read rec as
// r.
func sameReading(t *testing.T, rec []byte, r don.Record) {
	var goRead don.Record
	if err := json.Unmarshal(rec, &goRead); err != nil || goRead != r {
		t.Fatalf("Go reads %s as %+v (%v), the reader %+v", rec, goRead, err, r)
	}
	if first, ok := firstKeyRecord(rec); !ok || first != r {
		t.Fatalf("a first-key reader reads %s as %+v, the reader %+v", rec, first, r)
	}
}
