package don_test

import (
	"encoding/hex"
	"encoding/json"
	"math/big"
	"testing"
	"time"

	"streamgate/don"
	"streamgate/simulator"
)

// seeds returns genuine fullReports of every schema and the real report.
func seeds(f *testing.F) [][]byte {
	at := time.Date(2026, 3, 4, 15, 0, 0, 0, time.UTC)
	sim, _ := simDON(f, at)
	var out [][]byte
	for _, feed := range someFeeds(f, sim) {
		r, _ := sim.Report(simulator.Mainnet, feed, at.Unix()-1)
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
		if env, err := don.DecodeEnvelope(s); err == nil {
			f.Add(env.ReportBlob) // blobs alone, for the differential check
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v.Verify(b)
		sameBlob(t, b)
		env, err := don.DecodeEnvelope(b)
		if err != nil {
			return
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
// fields.
func sameBlob(t *testing.T, blob []byte) {
	schema, fields, err := don.DecodeBlob(blob)
	simFields, simErr := simulator.DecodeReportBlob(blob)
	if err != nil || simErr != nil {
		return
	}
	{
		if uint16(schema) != uint16(simFields.Schema) {
			t.Fatalf("schema %v, simulator %v", schema, simFields.Schema)
		}
		want := map[string]string{
			"validFromTimestamp": big.NewInt(int64(simFields.ValidFromTimestamp)).String(),
			"nativeFee":          simFields.NativeFee.String(),
			"linkFee":            simFields.LinkFee.String(),
			"expiresAt":          big.NewInt(int64(simFields.ExpiresAt)).String(),
		}
		switch schema {
		case don.SchemaV3:
			want["price"], want["bid"], want["ask"] = simFields.Price.String(), simFields.Bid.String(), simFields.Ask.String()
		case don.SchemaV7:
			want["exchangeRate"] = simFields.ExchangeRate.String()
		case don.SchemaV11:
			want["mid"], want["lastTradedPrice"] = simFields.Mid.String(), simFields.LastTradedPrice.String()
			want["bidVolume"], want["askVolume"] = simFields.BidVolume.String(), simFields.AskVolume.String()
			want["lastSeenTimestampNs"] = new(big.Int).SetUint64(simFields.LastSeenTimestampNs).String()
			want["marketStatus"] = big.NewInt(int64(simFields.MarketStatus)).String()
		}
		for _, fd := range fields {
			w, ok := want[fd.Name]
			if !ok {
				continue
			}
			var got string
			switch x := fd.Value.(type) {
			case *big.Int:
				got = x.String()
			case uint32:
				got = big.NewInt(int64(x)).String()
			case uint64:
				got = new(big.Int).SetUint64(x).String()
			}
			if got != w {
				t.Fatalf("%s: %s, simulator %s", fd.Name, got, w)
			}
		}
	}
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
