package main

import (
	"context"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/archive"
	"streamgate/feedid"
	"streamgate/status"
)

// archiveToken is the admin listener's token in the archive command's test.
const archiveToken = "archive-test-token-0123456789"

// archiveAdmin serves archive.Admin over a Pebble store whose fills read
// a history of one real testnet report's bytes at every second.
func archiveAdmin(t *testing.T) (url string, stream feedid.ID, pages *atomic.Int64) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "don", "testdata", "real-testnet-reports.json"))
	require.NoError(t, err)
	var data struct {
		Reports []struct{ FeedID, FullReport string }
	}
	require.NoError(t, json.Unmarshal(b, &data))
	stream, err = feedid.Parse(data.Reports[0].FeedID)
	require.NoError(t, err)
	full, err := hex.DecodeString(strings.TrimPrefix(data.Reports[0].FullReport, "0x"))
	require.NoError(t, err)
	store, err := archive.OpenPebble(archive.PebbleOptions{Dir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	pages = &atomic.Int64{}
	page := func(ctx context.Context, network string, s feedid.ID, start uint32, limit int) ([]archive.Report, error) {
		pages.Add(1)
		var out []archive.Report
		for ts := start; len(out) < limit && ts < uint32(time.Now().Unix()); ts++ {
			out = append(out, archive.Report{Network: network, Stream: s, ValidFromTimestamp: ts, ObservationsTimestamp: ts, FullReport: full})
		}
		return out, nil
	}
	f := archive.NewFiller(store, store, page, archive.FillerOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	srv := httptest.NewServer(status.RequireToken(archiveToken, &archive.Admin{Store: store, Filler: f, Networks: []string{"testnet"}}))
	t.Cleanup(srv.Close)
	return srv.URL, stream, pages
}

// TestArchiveCommands: `streamgate archive fill -wait` fills a span
// through the admin listener and prints its progress to the end, `fills`
// lists it, `export` writes it as CSV, and a refused span prints the
// gateway's reason and exits 1.
func TestArchiveCommands(t *testing.T) {
	t.Parallel()
	admin, stream, pages := archiveAdmin(t)
	tokenEnv := []string{"STREAMGATE_ADMIN_TOKEN=" + archiveToken}
	_, stderr, code := runTool(t, nil, "archive", "fills", "-admin", admin)
	assert.Equal(t, 1, code, "without the admin token")
	assert.Contains(t, stderr, "401")
	to := time.Now().Add(-2 * time.Minute).Unix()
	from := to - 249
	span := []string{"-admin", admin, "-network", "testnet", "-feed", string(stream), "-from", strconv.FormatInt(from, 10), "-to", strconv.FormatInt(to, 10)}

	stdout, stderr, code := runTool(t, tokenEnv, append([]string{"archive", "fill", "-wait"}, span...)...)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "250 seconds")
	assert.Contains(t, stdout, "done, 250 of 250 seconds covered, 3 pages")
	assert.Equal(t, int64(3), pages.Load())

	stdout, stderr, code = runTool(t, tokenEnv, "archive", "fills", "-admin", admin)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "STATE")
	assert.Contains(t, stdout, "250/250")

	out := filepath.Join(t.TempDir(), "span.csv")
	_, stderr, code = runTool(t, tokenEnv, append([]string{"archive", "export", "-format", "csv", "-o", out}, span...)...)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stderr, "250 reports exported")
	f, err := os.Open(out)
	require.NoError(t, err)
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	require.NoError(t, err)
	require.Len(t, rows, 251)
	assert.Equal(t, "feedID", rows[0][0])
	assert.Equal(t, strconv.FormatInt(from, 10), rows[1][2])
	assert.Equal(t, strconv.FormatInt(to, 10), rows[250][2])

	_, stderr, code = runTool(t, tokenEnv, "archive", "fill", "-admin", admin, "-network", "mainnet", "-feed", string(stream), "-from", "1")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "400 Bad Request: parameter network must be one of testnet")

	_, stderr, code = runTool(t, tokenEnv, "archive", "nope")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "unknown command")
}
