package don_test

import (
	"encoding/binary"
	"encoding/hex"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"streamgate/don"
	"streamgate/upstreamsim"
)

// word returns an ABI word holding v.
func word(v uint64) []byte {
	w := make([]byte, 32)
	binary.BigEndian.PutUint64(w[24:], v)
	return w
}

// ReadHeader reads the stream and times of every schema: the real report's
// as the official SDK decoded them, a V1 blob's (no validFromTimestamp),
// and refuses a blob too short or a time wider than 64 bits.
func TestReadHeader(t *testing.T) {
	r := loadReal(t)
	env, err := don.DecodeEnvelope(unhex(t, r.FullReport))
	if err != nil {
		t.Fatal(err)
	}
	h, err := don.ReadHeader(env.ReportBlob)
	if err != nil {
		t.Fatal(err)
	}
	if "0x"+hex.EncodeToString(h.FeedID[:]) != r.Decoded.FeedID || !h.HasValidFrom ||
		int64(h.ValidFromTimestamp) != r.Decoded.ValidFromTimestamp || int64(h.ObservationsTimestamp) != r.Decoded.ObservationsTimestamp {
		t.Fatalf("header %+v of the real report, want %+v", h, r.Decoded)
	}
	rec := don.Record{FeedID: r.FeedID, ValidFromTimestamp: r.Decoded.ValidFromTimestamp, ObservationsTimestamp: r.Decoded.ObservationsTimestamp, FullReport: r.FullReport}
	if !h.Repeats(rec) {
		t.Fatal("the real record does not repeat its blob")
	}
	for name, change := range map[string]func(*don.Record){
		"observationsTimestamp": func(r *don.Record) { r.ObservationsTimestamp -= 3600 },
		"validFromTimestamp":    func(r *don.Record) { r.ValidFromTimestamp++ },
		"feedID":                func(r *don.Record) { r.FeedID = r.FeedID[:65] + "f" },
		"negative":              func(r *don.Record) { r.ObservationsTimestamp = -1 },
	} {
		bad := rec
		change(&bad)
		if h.Repeats(bad) {
			t.Errorf("a record with another %s repeats the blob", name)
		}
	}

	// V1: feedId, observationsTimestamp, then its own fields.
	feed := make([]byte, 32)
	feed[1] = 0x01
	v1 := append(append(append([]byte{}, feed...), word(1700000000)...), make([]byte, 7*32)...)
	h, err = don.ReadHeader(v1)
	if err != nil || h.HasValidFrom || h.ObservationsTimestamp != 1700000000 || h.FeedID[1] != 1 {
		t.Fatalf("V1 header %+v, %v", h, err)
	}
	if !h.Repeats(don.Record{FeedID: "0x" + hex.EncodeToString(feed), ValidFromTimestamp: 42, ObservationsTimestamp: 1700000000}) {
		t.Error("a V1 record: its validFromTimestamp has nothing to repeat")
	}

	if _, err := don.ReadHeader(v1[:63]); err == nil {
		t.Error("a V1 blob of 63 bytes has a header")
	}
	v3 := append(append(append([]byte{0, 3}, make([]byte, 30)...), word(1)...), word(2)...)
	if _, err := don.ReadHeader(v3[:95]); err == nil {
		t.Error("a V3 blob of 95 bytes has a header")
	}
	v3[64] = 1 // observationsTimestamp of 2^255 + 2
	if _, err := don.ReadHeader(v3); err == nil {
		t.Error("a time wider than 64 bits was read")
	}
}

// A genuine report relabelled (ForgeRelabel: an hour older, its record
// dated the second asked) passes every signature but not the record check.
func TestRelabelledReport(t *testing.T) {
	at := time.Date(2026, 3, 4, 15, 0, 0, 0, time.UTC)
	sim, v := simDON(t, at)
	if err := sim.SetFaults(upstreamsim.Faults{Forge: upstreamsim.ForgeRelabel}); err != nil {
		t.Fatal(err)
	}
	for schema, feed := range someFeeds(t, sim) {
		r, _ := sim.Report(upstreamsim.Mainnet, feed, at.Unix()-1)
		if res := v.VerifyHex(r.FullReport, r.FeedID); !res.OK() {
			t.Fatalf("%s: the relabelled report's signatures: %+v", schema, res)
		}
		if res := v.VerifyRecord(don.Record(r)); res.Cause != don.CauseRecordMismatch {
			t.Errorf("%s: relabelled record: %+v", schema, res)
		}
		r.ObservationsTimestamp -= upstreamsim.RelabelAge
		r.ValidFromTimestamp -= upstreamsim.RelabelAge
		if res := v.VerifyRecord(don.Record(r)); !res.OK() {
			t.Errorf("%s: the record put back: %+v", schema, res)
		}
	}
}

// FuzzHeader: ReadHeader never panics, and a header it reads is repeated
// by the record made of it.
func FuzzHeader(f *testing.F) {
	for _, s := range seeds(f) {
		if env, err := don.DecodeEnvelope(s); err == nil {
			f.Add(env.ReportBlob)
		}
	}
	f.Add(append([]byte{0, 1}, make([]byte, 62)...))
	f.Fuzz(func(t *testing.T, blob []byte) {
		h, err := don.ReadHeader(blob)
		if err != nil {
			return
		}
		if h.ObservationsTimestamp > 1<<62 || h.ValidFromTimestamp > 1<<62 {
			return // beyond an int64 record
		}
		rec := don.Record{FeedID: "0x" + hex.EncodeToString(h.FeedID[:]), ValidFromTimestamp: int64(h.ValidFromTimestamp), ObservationsTimestamp: int64(h.ObservationsTimestamp)}
		if !h.Repeats(rec) {
			t.Fatalf("header %+v not repeated by %+v", h, rec)
		}
	})
}

// Set reports a stricter rule set: enforce where it was not, a trusted
// configuration removed or changed; not a looser one or the same.
func TestGateSetStricter(t *testing.T) {
	a, b, c := common.HexToAddress("0x01"), common.HexToAddress("0x02"), common.HexToAddress("0x03")
	cfgA := don.Config{Digest: [32]byte{1}, F: 1, Signers: []common.Address{a, b, c}}
	cfgB := don.Config{Digest: [32]byte{2}, F: 0, Signers: []common.Address{a}}
	verifier := func(cs ...don.Config) *don.Verifier {
		v, err := don.NewVerifier(cs)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	g := don.NewGate("mainnet", nil, nil)
	steps := []struct {
		name     string
		mode     string
		v        *don.Verifier
		stricter bool
	}{
		{"off to report", don.ModeReport, verifier(cfgA), false},
		{"report to enforce", don.ModeEnforce, verifier(cfgA), true},
		{"the same again", don.ModeEnforce, verifier(cfgA), false},
		{"a configuration added", don.ModeEnforce, verifier(cfgA, cfgB), false},
		{"a configuration removed", don.ModeEnforce, verifier(cfgA), true},
		{"a signer removed", don.ModeEnforce, verifier(don.Config{Digest: cfgA.Digest, F: 1, Signers: []common.Address{a, b}}), true},
		{"to report", don.ModeReport, verifier(cfgA), false},
		{"to off", don.ModeOff, nil, false},
		{"off to enforce", don.ModeEnforce, verifier(cfgA), true},
	}
	for _, s := range steps {
		if got := g.Set(s.mode, s.v); got != s.stricter {
			t.Errorf("%s: stricter %v, want %v", s.name, got, s.stricter)
		}
	}
}
