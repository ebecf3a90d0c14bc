package don_test

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"streamgate/don"
	"streamgate/upstreamsim"
)

// TestGateRemembersTheSameBytesOnly: a report checked again under the
// same rules is not verified again (counted remembered, and still counted
// verified at its entry); bytes that differ in any field, even ones that
// hash to the same stream of bytes if the fields were only joined, are
// verified anew and refused; after a reload to other rules the memo is
// gone, and the stricter rule refuses what passed before.
func TestGateRemembersTheSameBytesOnly(t *testing.T) {
	at := time.Date(2026, 3, 4, 15, 0, 0, 0, time.UTC)
	sim, v := simDON(t, at)
	reg := prometheus.NewRegistry()
	m := don.NewMetrics(reg)
	g := don.NewGate("mainnet", m, nil)
	g.Set(don.ModeEnforce, v)
	count := func(name string, labels ...string) float64 {
		t.Helper()
		mf, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var sum float64
		for _, f := range mf {
			if f.GetName() != name {
				continue
			}
		metric:
			for _, mt := range f.GetMetric() {
				for i := 0; i+1 < len(labels); i += 2 {
					found := false
					for _, lp := range mt.GetLabel() {
						if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
							found = true
						}
					}
					if !found {
						continue metric
					}
				}
				sum += mt.GetCounter().GetValue()
			}
		}
		return sum
	}
	const remembered = "streamgate_report_verifications_remembered_total"
	const verified = "streamgate_reports_verified_total"

	r, ok := sim.Report(upstreamsim.Mainnet, feedV3, at.Unix()-1)
	if !ok {
		t.Fatal("no report")
	}
	rec := don.Record(r)
	if _, ok := g.Check(don.EntryUpstream, rec); !ok {
		t.Fatal("the genuine report refused")
	}
	if n := count(remembered); n != 0 {
		t.Fatalf("remembered %v after the first check", n)
	}
	for i := 1; i <= 3; i++ {
		if _, ok := g.Check(don.EntryArchive, rec); !ok {
			t.Fatal("the genuine report refused when read again")
		}
		if n := count(remembered, "entry", don.EntryArchive); n != float64(i) {
			t.Fatalf("read %d: remembered %v, want %d: the signatures were recovered again", i, n, i)
		}
	}
	if n := count(verified, "entry", don.EntryArchive); n != 3 {
		t.Fatalf("verified at entry archive %v, want 3", n)
	}

	// A signature byte altered: other bytes, verified anew and refused.
	b := []byte(rec.FullReport)
	i := len(b) - 70 // inside the last word of rawSs
	if b[i] == '0' {
		b[i] = '1'
	} else {
		b[i] = '0'
	}
	tampered := rec
	tampered.FullReport = string(b)
	if _, ok := g.Check(don.EntryArchive, tampered); ok {
		t.Fatal("a tampered report admitted")
	}
	// Other fields whose bytes, merely joined with a zero byte between
	// feedID and the times, repeat the genuine record's: a feedID one zero
	// byte longer, the times shifted by a byte, the fullReport one shorter.
	var n [17]byte
	binary.BigEndian.PutUint64(n[:8], uint64(rec.ValidFromTimestamp))
	binary.BigEndian.PutUint64(n[8:16], uint64(rec.ObservationsTimestamp))
	n[16] = rec.FullReport[0]
	if n[0] != 0 {
		t.Fatal("the construction needs a time below 2^56")
	}
	shifted := don.Record{FeedID: rec.FeedID + "\x00", FullReport: rec.FullReport[1:],
		ValidFromTimestamp:    int64(binary.BigEndian.Uint64(n[1:9])),
		ObservationsTimestamp: int64(binary.BigEndian.Uint64(n[9:17]))}
	if _, ok := g.Check(don.EntryArchive, shifted); ok {
		t.Fatal("a record whose fields join to the genuine one's bytes admitted")
	}
	if n := count(remembered, "entry", don.EntryArchive); n != 3 {
		t.Fatalf("remembered %v after other bytes, want 3", n)
	}

	// A reload to another DON only: stricter, and nothing remembered.
	other, err := upstreamsim.New(upstreamsim.Config{Now: func() time.Time { return at }, DONSeed: "another"})
	if err != nil {
		t.Fatal(err)
	}
	vOther, err := don.NewVerifier(FromSimulator(t, other.DON(upstreamsim.Mainnet)))
	if err != nil {
		t.Fatal(err)
	}
	if !g.Set(don.ModeEnforce, vOther) {
		t.Fatal("a reload to another DON only is not stricter")
	}
	if res, ok := g.Check(don.EntryArchive, rec); ok {
		t.Fatalf("admitted under the stricter rule: %+v", res)
	}
	if n := count(remembered, "entry", don.EntryArchive); n != 3 {
		t.Fatalf("remembered %v after the reload, want 3: a result of the old rules was used", n)
	}
}
