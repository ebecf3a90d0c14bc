package main

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/archive"
)

// TestArchiveFillSpanBounded: a gateway whose archive keeps everything
// (retention 0) refuses, on its admin listener, a fill longer than
// archive.MaxFillDays with a 400 naming the bound, and `streamgate archive
// fill` prints that reason and exits 1; a fill of exactly the bound is
// queued.
func TestArchiveFillSpanBounded(t *testing.T) {
	t.Parallel()
	p := start(t, testConfig{extra: "archive:\n  backend: pebble\n  path: archive\n  retention: 0s\n"}.String(), []string{"mainnet", "testnet"})
	feed := feedIDs(t, p.net["testnet"], 1)[0]
	to := time.Now().Add(-time.Hour).Unix()
	longest := to - archive.MaxFillDays*86400
	want := "a fill spans at most 31 days (to - from <= 2678400 seconds): split it into several fills"

	for _, from := range []int64{longest - 1, 1} {
		q := "?network=testnet&feedID=" + feed + "&from=" + strconv.FormatInt(from, 10) + "&to=" + strconv.FormatInt(to, 10)
		resp, err := http.Post(p.admin+archive.PathFill+q, "", nil)
		require.NoError(t, err)
		var e struct{ Error, Message string }
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
		resp.Body.Close()
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, e.Message)
		assert.Contains(t, e.Message, want)

		_, stderr, code := runTool(t, nil, "archive", "fill", "-admin", p.admin, "-network", "testnet", "-feed", feed,
			"-from", strconv.FormatInt(from, 10), "-to", strconv.FormatInt(to, 10))
		assert.Equal(t, 1, code)
		assert.Contains(t, stderr, "400 Bad Request: the span from "+strconv.FormatInt(from, 10))
		assert.Contains(t, stderr, want)
	}
	stdout, stderr, code := runTool(t, nil, "archive", "fills", "-admin", p.admin)
	require.Equal(t, 0, code, stderr)
	assert.NotContains(t, stdout, "testnet", "nothing refused was queued")

	stdout, stderr, code = runTool(t, nil, "archive", "fill", "-admin", p.admin, "-network", "testnet", "-feed", feed,
		"-from", strconv.FormatInt(longest, 10), "-to", strconv.FormatInt(to, 10))
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "2678401 seconds", "the longest fill is queued")
}
