package don_test

import (
	"crypto/ecdsa"
	"encoding/hex"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"streamgate/don"
	"streamgate/upstreamsim"
)

// decodedView returns the decoded view of a record as a map, and the
// names of its "decoded" members in order.
func decodedView(t *testing.T, rec []byte, v *don.Verifier) (map[string]json.RawMessage, []string) {
	t.Helper()
	out, err := don.AppendDecodedRecord(nil, rec, func(r don.Record) don.Verification {
		return don.Verification{Mode: don.ModeEnforce, Result: v.VerifyHex(r.FullReport, r.FeedID)}
	})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	var order []string
	dec := json.NewDecoder(strings.NewReader(string(m["decoded"])))
	dec.Token()
	for dec.More() {
		k, _ := dec.Token()
		var v any
		dec.Decode(&v)
		order = append(order, k.(string))
	}
	return m, order
}

// Every schema's report decodes in the view: its fields in the table's
// order, each a string, marketStatus and ripcord followed by their names,
// the scaled fields with the point placed, verified.
func TestDecodedViewEverySchema(t *testing.T) {
	at := time.Date(2026, 3, 4, 15, 0, 0, 0, time.UTC)
	sim, v := simDON(t, at)
	for schema, feed := range someFeeds(t, sim) {
		r, _ := sim.Report(upstreamsim.Mainnet, feed, at.Unix()-1)
		rec, _ := json.Marshal(r)
		m, order := decodedView(t, rec, v)
		var decoded map[string]any
		var decimal map[string]string
		var ver struct{ Verified bool }
		json.Unmarshal(m["decoded"], &decoded)
		json.Unmarshal(m["decimal"], &decimal)
		json.Unmarshal(m["verification"], &ver)
		if decoded["schema"] != schema || !ver.Verified {
			t.Fatalf("%s: %s %s", schema, m["decoded"], m["verification"])
		}
		s := don.SchemaOf(unhex(t, feed))
		var want []string
		for _, name := range don.FieldNames(s) {
			want = append(want, name)
			switch name {
			case "marketStatus":
				want = append(want, "marketStatusName")
			case "ripcord":
				want = append(want, "ripcordName")
			}
		}
		if got := strings.Join(order[1:], ","); got != strings.Join(want, ",") {
			t.Fatalf("%s: fields %s, want %s", schema, got, strings.Join(want, ","))
		}
		for k, val := range decoded {
			if _, ok := val.(string); !ok {
				t.Errorf("%s: %s is %T, not a string", schema, k, val)
			}
		}
		_, fields, _ := don.DecodeBlob(mustBlob(t, r.FullReport))
		n := 0
		for _, f := range fields {
			if f.Scaled {
				n++
				d := decimal[f.Name]
				if i := strings.IndexByte(d, '.'); i < 0 || len(d)-i-1 != 18 {
					t.Errorf("%s: %s decimal %q", schema, f.Name, d)
				}
			}
		}
		if n != len(decimal) || n == 0 {
			t.Errorf("%s: %d scaled fields, decimal has %d", schema, n, len(decimal))
		}
		if name, ok := decoded["marketStatusName"].(string); ok && strings.HasPrefix(name, "status-") {
			t.Errorf("%s: market status %s outside its schema's mapping", schema, name)
		}
	}
}

func mustBlob(t *testing.T, full string) []byte {
	env, err := don.DecodeEnvelope(unhex(t, full))
	if err != nil {
		t.Fatal(err)
	}
	return env.ReportBlob
}

// A report of a schema not in the table is shown as "unknown schema", with
// its version, verified or not: never a decode error.
func TestUnknownSchemaShown(t *testing.T) {
	k1, _ := crypto.GenerateKey()
	k2, _ := crypto.GenerateKey()
	blob := make([]byte, 5*32)
	blob[1] = 0x0f // V15
	copy(blob[2:32], []byte("a stream of a future schema"))
	var ctx [3][32]byte
	ctx[0][0], ctx[0][1], ctx[0][31] = 0x00, 0x09, 0x42
	full := upstreamsim.FullReport{ReportContext: ctx, ReportBlob: blob}
	h := don.SignedHash(ctx, blob)
	for _, k := range []*ecdsa.PrivateKey{k1, k2} {
		sig, err := crypto.Sign(h[:], k)
		if err != nil {
			t.Fatal(err)
		}
		var r, s [32]byte
		copy(r[:], sig[:32])
		copy(s[:], sig[32:64])
		full.RawVs[len(full.RawRs)] = sig[64]
		full.RawRs, full.RawSs = append(full.RawRs, r), append(full.RawSs, s)
	}
	fullHex := "0x" + hex.EncodeToString(full.Encode())
	feed := "0x" + hex.EncodeToString(blob[:32])
	rec, _ := json.Marshal(map[string]any{"feedID": feed, "validFromTimestamp": 1, "observationsTimestamp": 1, "fullReport": fullHex})
	signers := []common.Address{crypto.PubkeyToAddress(k1.PublicKey), crypto.PubkeyToAddress(k2.PublicKey)}
	trusted, err := don.NewVerifier([]don.Config{{Digest: ctx[0], F: 1, Signers: signers}})
	if err != nil {
		t.Fatal(err)
	}
	other, _ := don.NewVerifier(nil)
	for name, v := range map[string]*don.Verifier{"verified": trusted, "not verified": other} {
		m, _ := decodedView(t, rec, v)
		if _, bad := m["decodeError"]; bad {
			t.Fatalf("%s: %s", name, m["decodeError"])
		}
		if got := string(m["decoded"]); got != `{"schema":"unknown schema","version":"V15"}` {
			t.Fatalf("%s: decoded %s", name, got)
		}
		var ver struct {
			Verified bool
			Cause    string
		}
		json.Unmarshal(m["verification"], &ver)
		if ver.Verified != (name == "verified") {
			t.Fatalf("%s: %s", name, m["verification"])
		}
	}
	if _, err := don.BlobHeader(blob); err == nil {
		t.Error("the header of an unknown schema was read")
	}
}

// Every cause has its row in README.md's table of causes, and every
// schema its row in the schema table.
func TestCausesAndSchemasDocumented(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	for _, c := range don.Causes {
		if !strings.Contains(readme, "\n| `"+string(c)+"` | ") {
			t.Errorf("README.md has no row for cause %s", c)
		}
	}
	for _, s := range don.Schemas {
		if !strings.Contains(readme, "\n| "+s.String()+" | ") {
			t.Errorf("README.md has no row for schema %s", s)
		}
		for _, name := range don.FieldNames(s) {
			if !strings.Contains(readme, "`"+name+"`") {
				t.Errorf("README.md never names %s's field %s", s, name)
			}
		}
	}
}
