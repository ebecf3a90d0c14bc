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
	"streamgate/don"
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
		rec, err := don.ReadRecord([]byte(want))
		require.NoError(t, err)
		back, err := FromRecord("testnet", rec, []byte(want))
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
		rec, raw, err := don.ReadReport(body)
		require.NoError(t, err, s.FeedID)
		require.Equal(t, string(record), string(raw))
		r, err := FromRecord("testnet", rec, raw)
		require.NoError(t, err, s.FeedID)
		assert.Equal(t, string(record), string(r.JSON()), "%s (%s)", s.FeedID, s.SchemaVersion)
		assert.Equal(t, uint32(ts), r.ObservationsTimestamp)
	}
	require.Equal(t, 5, n)
}

// FromRecord takes what the don package read only when the archive can
// write it back byte for byte, with times, a stream ID and a fullReport it
// can store.
func TestFromRecordRefuses(t *testing.T) {
	id := "0x" + strings.Repeat("ab", 32)
	ok := `{"feedID":"` + id + `","validFromTimestamp":1,"observationsTimestamp":2,"fullReport":"0x00ff"}`
	read := func(raw string) (Report, error) {
		rec, err := don.ReadRecord([]byte(raw))
		require.NoError(t, err, raw)
		return FromRecord("testnet", rec, []byte(raw))
	}
	r, err := read(ok)
	require.NoError(t, err)
	assert.Equal(t, ok, string(r.JSON()))
	assert.Equal(t, don.Record{FeedID: id, ValidFromTimestamp: 1, ObservationsTimestamp: 2, FullReport: "0x00ff"}, r.Record())
	for name, rec := range map[string]string{
		"upper-case feedID": strings.Replace(ok, "abab", "ABAB", 1),
		"upper-case report": strings.Replace(ok, "0x00ff", "0x00FF", 1),
		"spaces":            strings.Replace(ok, `,"fullReport"`, `, "fullReport"`, 1),
		"another key order": `{"validFromTimestamp":1,"feedID":"` + id + `","observationsTimestamp":2,"fullReport":"0x00ff"}`,
	} {
		_, err := read(rec)
		assert.ErrorIs(t, err, ErrRecord, name)
	}
	for name, rec := range map[string]don.Record{
		"short feedID":  {FeedID: id[:64], FullReport: "0x00"},
		"odd report":    {FeedID: id, FullReport: "0x00f"},
		"empty report":  {FeedID: id, FullReport: "0x"},
		"no 0x":         {FeedID: id, FullReport: "00ff"},
		"not hex":       {FeedID: id, FullReport: "0xzz"},
		"negative":      {FeedID: id, FullReport: "0x00", ValidFromTimestamp: -1},
		"beyond uint32": {FeedID: id, FullReport: "0x00", ObservationsTimestamp: 1 << 32},
	} {
		_, err := FromRecord("testnet", rec, nil)
		assert.ErrorIs(t, err, ErrRecord, name)
	}
	_, err = FromRecord("Test Net", don.Record{FeedID: id, FullReport: "0x00"}, nil)
	assert.ErrorIs(t, err, ErrRecord, "a network's name is the configuration's")
	r, err = FromRecord("testnet", don.Record{FeedID: id, FullReport: "0x00", ObservationsTimestamp: 1<<32 - 1}, nil)
	require.NoError(t, err)
	assert.Equal(t, uint32(4294967295), r.ObservationsTimestamp)
}

// FuzzFromRecord: what the don package reads and FromRecord takes renders
// as the same bytes, and is storable; nothing panics.
func FuzzFromRecord(f *testing.F) {
	id := "0x" + strings.Repeat("0a", 32)
	f.Add([]byte(`{"feedID":"` + id + `","validFromTimestamp":1,"observationsTimestamp":2,"fullReport":"0x00ff"}`))
	f.Add([]byte(`{"fullReport":"0x00","observationsTimestamp":0,"feedID":"` + id + `","validFromTimestamp":4294967295}`))
	f.Add([]byte(`{"feedID":"` + id + `" , "validFromTimestamp" :01}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		rec, err := don.ReadRecord(b)
		if err != nil {
			return
		}
		r, err := FromRecord("testnet", rec, b)
		if err != nil {
			return
		}
		if out := r.JSON(); !bytes.Equal(out, b) {
			t.Fatalf("%q taken, written back as %q", b, out)
		}
		if err := r.check(); err != nil {
			t.Fatalf("a report taken is not storable: %v", err)
		}
	})
}
