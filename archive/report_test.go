package archive

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/auth"
	"streamgate/upstreamsim"
)

// The real testnet reports render as the upstream's record, byte for byte,
// and parse back to themselves.
func TestRealRecordBytes(t *testing.T) {
	for _, rr := range realRecords(t) {
		full, err := hex.DecodeString(strings.TrimPrefix(rr.FullReport, "0x"))
		require.NoError(t, err)
		r := Report{Network: "testnet", Stream: feedIDOf(t, rr.FeedID), ValidFromTimestamp: rr.validFrom,
			ObservationsTimestamp: rr.obs, FullReport: full}
		want := fmt.Sprintf(`{"feedID":"%s","validFromTimestamp":%d,"observationsTimestamp":%d,"fullReport":"%s"}`,
			rr.FeedID, rr.validFrom, rr.obs, rr.FullReport)
		assert.Equal(t, want, string(r.JSON()), rr.Name)
		back, err := ParseRecord("testnet", []byte(want))
		require.NoError(t, err)
		assert.Equal(t, r, back, rr.Name)
		assert.Len(t, back.FullReport, 736, "a V3 fullReport is 736 bytes")
	}
}

// The simulator's answers of /api/v1/reports, fetched over loopback with
// a signed request, parse and render back to the same bytes.
func TestSimulatorRecordBytes(t *testing.T) {
	cfg := upstreamsim.Default()
	cfg.RateLimit, cfg.Burst = 1000, 100
	sim, err := upstreamsim.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { sim.Close() })
	srv := httptest.NewServer(sim.Handler(upstreamsim.Testnet))
	t.Cleanup(srv.Close)
	ts := time.Now().Add(-time.Minute).Unix()
	n := 0
	for _, s := range sim.Streams(upstreamsim.Testnet) {
		if n == 5 {
			break
		}
		n++
		req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/api/v1/reports?feedID=%s&timestamp=%d", srv.URL, s.FeedID, ts), nil)
		require.NoError(t, err)
		auth.Sign(req, upstreamsim.OrgKeyID, []byte(upstreamsim.OrgKeySecret), time.Now())
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		body = bytes.TrimSpace(body)
		require.True(t, bytes.HasPrefix(body, []byte(`{"report":`)) && bytes.HasSuffix(body, []byte(`}`)), string(body))
		record := body[len(`{"report":`) : len(body)-1]
		r, err := ParseRecord("testnet", record)
		require.NoError(t, err, s.FeedID)
		assert.Equal(t, string(record), string(r.JSON()), "%s (%s)", s.FeedID, s.SchemaVersion)
		assert.Equal(t, uint32(ts), r.ObservationsTimestamp)
	}
	require.Equal(t, 5, n)
}

func TestParseRecordRefuses(t *testing.T) {
	id := "0x" + strings.Repeat("ab", 32)
	ok := `{"feedID":"` + id + `","validFromTimestamp":1,"observationsTimestamp":2,"fullReport":"0x00ff"}`
	_, err := ParseRecord("testnet", []byte(ok))
	require.NoError(t, err)
	r, err := ParseRecord("testnet", []byte(" {\n\"fullReport\" : \"0x00ff\", \"observationsTimestamp\":2,\"validFromTimestamp\":1,\"feedID\":\""+id+"\"}\n"))
	require.NoError(t, err, "any order, JSON whitespace between tokens")
	assert.Equal(t, ok, string(r.JSON()), "written back in the upstream's form")
	for name, rec := range map[string]string{
		"upper-case feedID": strings.Replace(ok, "abab", "ABAB", 1),
		"short feedID":      strings.Replace(ok, id, id[:64], 1),
		"upper-case report": strings.Replace(ok, "0x00ff", "0x00FF", 1),
		"odd report":        strings.Replace(ok, "0x00ff", "0x00f", 1),
		"empty report":      strings.Replace(ok, "0x00ff", "0x", 1),
		"no 0x":             strings.Replace(ok, "0x00ff", "00ff", 1),
		"key twice":         strings.Replace(ok, `"validFromTimestamp":1`, `"observationsTimestamp":1`, 1),
		"unknown key":       strings.Replace(ok, `}`, `,"extra":1}`, 1),
		"missing key":       strings.Replace(ok, `"validFromTimestamp":1,`, ``, 1),
		"negative":          strings.Replace(ok, `:1,`, `:-1,`, 1),
		"leading zero":      strings.Replace(ok, `:1,`, `:01,`, 1),
		"fraction":          strings.Replace(ok, `:1,`, `:1.0,`, 1),
		"exponent":          strings.Replace(ok, `:1,`, `:1e0,`, 1),
		"beyond uint32":     strings.Replace(ok, `:1,`, `:4294967296,`, 1),
		"string time":       strings.Replace(ok, `:1,`, `:"1",`, 1),
		"escape":            strings.Replace(ok, `"feedID"`, `"feed\u0049D"`, 1),
		"trailing":          ok + "x",
		"two records":       ok + ok,
		"wrapped":           `{"report":` + ok + `}`,
		"empty":             ``,
	} {
		_, err := ParseRecord("testnet", []byte(rec))
		assert.ErrorIs(t, err, ErrRecord, name)
	}
	_, err = ParseRecord("Test Net", []byte(ok))
	assert.ErrorIs(t, err, ErrRecord, "a network's name is the configuration's")
	r, err = ParseRecord("testnet", []byte(strings.Replace(ok, `:2,`, `:4294967295,`, 1)))
	require.NoError(t, err)
	assert.Equal(t, uint32(4294967295), r.ObservationsTimestamp)
}

// FuzzParseRecord: what ParseRecord accepts renders in the upstream's form
// and parses back to the same report; nothing panics.
func FuzzParseRecord(f *testing.F) {
	id := "0x" + strings.Repeat("0a", 32)
	f.Add([]byte(`{"feedID":"` + id + `","validFromTimestamp":1,"observationsTimestamp":2,"fullReport":"0x00ff"}`))
	f.Add([]byte(`{"fullReport":"0x00","observationsTimestamp":0,"feedID":"` + id + `","validFromTimestamp":4294967295}`))
	f.Add([]byte(`{"feedID":"` + id + `" , "validFromTimestamp" :01}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseRecord("testnet", b)
		if err != nil {
			return
		}
		out := r.JSON()
		back, err := ParseRecord("testnet", out)
		if err != nil {
			t.Fatalf("rendering %q gives %q, refused: %v", b, out, err)
		}
		if string(back.JSON()) != string(out) || back.Stream != r.Stream || !bytes.Equal(back.FullReport, r.FullReport) ||
			back.ObservationsTimestamp != r.ObservationsTimestamp || back.ValidFromTimestamp != r.ValidFromTimestamp {
			t.Fatalf("%q does not round-trip: %q", b, out)
		}
		if err := r.check(); err != nil {
			t.Fatalf("a parsed report is not storable: %v", err)
		}
	})
}
