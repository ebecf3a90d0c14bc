package archive

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/don"
)

// realReports stores the real testnet reports of don/testdata, each at its
// own observationsTimestamp and at two later seconds (same bytes: the
// export reads the store, it does not verify).
func realReports(t *testing.T, s Store) []Report {
	t.Helper()
	var out []Report
	for _, rr := range realRecords(t) {
		full, err := hex.DecodeString(strings.TrimPrefix(rr.FullReport, "0x"))
		require.NoError(t, err)
		for k := uint32(0); k < 3; k++ {
			out = append(out, Report{Network: "testnet", Stream: feedIDOf(t, rr.FeedID),
				ValidFromTimestamp: rr.validFrom + k, ObservationsTimestamp: rr.obs + k, FullReport: full})
		}
	}
	_, err := s.Write(context.Background(), out)
	require.NoError(t, err)
	return out
}

// TestExportJSONLines: each line is the record as the upstream wrote it
// with the decoded view of /api/v1/reports?decode=true inside, in time
// order, only the span asked for.
func TestExportJSONLines(t *testing.T) {
	s := openTestPebble(t, t.TempDir())
	defer s.Close()
	realReports(t, s)
	for _, rr := range realRecords(t) {
		var buf bytes.Buffer
		n, err := Export(context.Background(), s, "testnet", feedIDOf(t, rr.FeedID), rr.obs+1, rr.obs+5, ExportJSONLines, &buf)
		require.NoError(t, err)
		require.Equal(t, 2, n, "the two reports inside the span")
		lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
		require.Len(t, lines, 2)
		schema, fields, err := don.DecodeFullReport(rr.FullReport)
		require.NoError(t, err)
		for i, line := range lines {
			var got map[string]json.RawMessage
			require.NoError(t, json.Unmarshal([]byte(line), &got), line)
			assert.JSONEq(t, `"`+rr.FeedID+`"`, string(got["feedID"]))
			assert.Equal(t, `"`+rr.FullReport+`"`, string(got["fullReport"]), "the upstream's fullReport, signatures included")
			assert.Equal(t, string(mustJSON(t, rr.obs+1+uint32(i))), string(got["observationsTimestamp"]))
			want := "{" + string(don.AppendFields(nil, schema, fields)) + "}"
			var view map[string]json.RawMessage
			require.NoError(t, json.Unmarshal([]byte(want), &view))
			assert.JSONEq(t, string(view["decoded"]), string(got["decoded"]))
			assert.JSONEq(t, string(view["decimal"]), string(got["decimal"]))
		}
	}
}

func mustJSON(t *testing.T, v any) []byte {
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

// TestExportCSV: a header naming the schema's fields (a scaled one twice:
// its integer and its decimal), then a row per report, every row as long
// as the header, the values those of the decoded view.
func TestExportCSV(t *testing.T) {
	s := openTestPebble(t, t.TempDir())
	defer s.Close()
	realReports(t, s)
	for _, rr := range realRecords(t) {
		var buf bytes.Buffer
		n, err := Export(context.Background(), s, "testnet", feedIDOf(t, rr.FeedID), rr.obs, rr.obs+2, ExportCSV, &buf)
		require.NoError(t, err)
		require.Equal(t, 3, n)
		rows, err := csv.NewReader(&buf).ReadAll()
		require.NoError(t, err, "every row as long as the header")
		require.Len(t, rows, 4)
		header := rows[0]
		schema, fields, err := don.DecodeFullReport(rr.FullReport)
		require.NoError(t, err)
		col := map[string]int{}
		for i, h := range header {
			col[h] = i
		}
		for _, f := range fields {
			if recordColumn(f.Name) {
				assert.NotContains(t, col, f.Name+"_decimal")
				continue
			}
			require.Contains(t, col, f.Name)
			assert.Equal(t, fieldText(f.Value), rows[1][col[f.Name]], f.Name)
			if f.Scaled {
				require.Contains(t, col, f.Name+"_decimal")
				assert.Contains(t, rows[1][col[f.Name+"_decimal"]], ".", f.Name)
			}
		}
		assert.Equal(t, schema.String(), rows[1][col["schema"]])
		for i, row := range rows[1:] {
			assert.Equal(t, rr.obs+uint32(i), mustUint(t, row[col["observationsTimestamp"]]))
			assert.Equal(t, rr.FullReport, row[len(row)-1])
		}
	}
}

func mustUint(t *testing.T, s string) uint32 {
	var v uint32
	require.NoError(t, json.Unmarshal([]byte(s), &v))
	return v
}

// TestExportRefuses: an unknown format or a stream ID that is not one.
func TestExportRefuses(t *testing.T) {
	s := openTestPebble(t, t.TempDir())
	defer s.Close()
	_, err := Export(context.Background(), s, "testnet", stream(1), 0, 10, "xml", &bytes.Buffer{})
	assert.ErrorContains(t, err, "xml")
	_, err = Export(context.Background(), s, "testnet", "0xnope", 0, 10, ExportCSV, &bytes.Buffer{})
	assert.Error(t, err)
}

// TestExportPages: an export longer than one read of the store holds
// every report once, in order.
func TestExportPages(t *testing.T) {
	s := openTestPebble(t, t.TempDir())
	defer s.Close()
	var rs []Report
	for ts := uint32(1000); ts < 1000+2*ExportPage+7; ts++ {
		rs = append(rs, report(t, "testnet", 1, ts, byte(ts)))
	}
	_, err := s.Write(context.Background(), rs)
	require.NoError(t, err)
	var buf bytes.Buffer
	n, err := Export(context.Background(), s, "testnet", stream(1), 1000, 1000+2*ExportPage+6, ExportJSONLines, &buf)
	require.NoError(t, err)
	assert.Equal(t, len(rs), n)
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	require.Len(t, lines, len(rs))
	for i, line := range lines {
		var got struct {
			Obs uint32 `json:"observationsTimestamp"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &got))
		assert.Equal(t, rs[i].ObservationsTimestamp, got.Obs)
	}
}
