package main

import (
	"encoding/csv"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/config"
	"streamgate/server/servertest"
	ledger "streamgate/usage"
)

// TestUsageCommand: `streamgate usage` prints the ledger of a running
// gateway as a table and as CSV, with the figures /usage.json gives;
// bad flags are a usage error (2) and the gateway's refusal an error (1)
// with its message.
func TestUsageCommand(t *testing.T) {
	p := start(t, testConfig{}.String(), []string{"mainnet", "testnet"})
	demo := servertest.Demo()
	// Each request signed at a millisecond of its own: the replay record
	// refuses a signature seen before, and the hit repeats the miss's target.
	var last time.Time
	demo.Now = func() time.Time {
		now := time.Now().Truncate(time.Millisecond)
		if !now.After(last) {
			now = last.Add(time.Millisecond)
		}
		last = now
		return now
	}
	feed := feedIDs(t, p.net["mainnet"], 1)[0]
	ts := strconv.FormatInt(time.Now().Unix()-120, 10)
	for _, target := range []string{
		"/api/v1/reports?feedID=" + feed + "&timestamp=" + ts,
		"/api/v1/reports?feedID=" + feed + "&timestamp=" + ts,
		"/api/v1/reports?feedID=" + feed + "&timestamp=later",
	} {
		demo.Get(t, p.net["mainnet"], target)
	}
	day := time.Now().UTC().Format(ledger.DayLayout)

	resp, err := http.Get(p.admin + "/usage.json?team=demo&from=" + day)
	require.NoError(t, err)
	var ans struct{ Rows []ledger.Row }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&ans))
	resp.Body.Close()
	require.Len(t, ans.Rows, 1, "one row: demo on mainnet")
	row := ans.Rows[0]
	require.EqualValues(t, 3, row.Requests)

	stdout, stderr, code := runTool(t, nil, "usage", "-admin", p.admin, "-team", "demo", "-from", day, "-format", "csv")
	require.Equal(t, 0, code, stderr)
	recs, err := csv.NewReader(strings.NewReader(stdout)).ReadAll()
	require.NoError(t, err, stdout)
	require.Len(t, recs, 2, stdout)
	header, rec := recs[0], recs[1]
	require.Equal(t, len(header), len(rec))
	field := func(name string) string {
		for i, h := range header {
			if h == name {
				return rec[i]
			}
		}
		t.Fatalf("no column %s in %v", name, header)
		return ""
	}
	assert.Equal(t, day, field("day"))
	assert.Equal(t, "mainnet", field("network"))
	assert.Equal(t, config.DemoTeam, field("team"))
	assert.Equal(t, "3", field("requests"))
	assert.Equal(t, "2", field("ok"))
	assert.Equal(t, "1", field("4xx"))
	assert.Equal(t, "2", field("reports"))
	assert.Equal(t, strconv.FormatInt(row.UpstreamCalls, 10), field("upstream_calls"))
	assert.Equal(t, "1", field("upstream_calls"), "a miss, then a hit, then a refusal")
	assert.Equal(t, strconv.FormatInt(row.RESTBytes, 10), field("rest_bytes"))
	assert.Equal(t, "2", field("req_reports_2xx"))
	assert.Equal(t, "1", field("req_reports_4xx"))

	stdout, stderr, code = runTool(t, nil, "usage", "-admin", p.admin, "-team", "demo")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "usage "+day+" to "+day+", this replica alone (no Redis: in memory, lost at restart)")
	assert.Regexp(t, `(?m)^ *day +network +team +requests +ok +4xx +429 +5xx +reports +frames +upstream_calls +rest_bytes +stream_bytes +bytes *$`, stdout)
	assert.Regexp(t, `(?m)^ *`+day+` +mainnet +demo +3 +2 +1 +0 +0 +2 +0 +1 +`+strconv.FormatInt(row.RESTBytes, 10)+` +0 +`+strconv.FormatInt(row.Bytes, 10)+` *$`, stdout)
	assert.Contains(t, stdout, "  "+day+" mainnet demo: reports 2xx=2, reports 4xx=1\n")

	// Bad flags: a usage error before any request.
	for _, args := range [][]string{
		{"usage"},
		{"usage", "-admin", p.admin, "-format", "xml"},
		{"usage", "-admin", p.admin, "-from", "2026-2-30"},
	} {
		_, stderr, code = runTool(t, []string{"STREAMGATE_ADMIN="}, args...)
		assert.Equal(t, 2, code, "%v: %s", args, stderr)
	}
	// The gateway's refusal: its message, exit 1.
	_, stderr, code = runTool(t, nil, "usage", "-admin", p.admin, "-team", "nobody")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, `400 Bad Request: team: no team named "nobody" is configured`)
}
