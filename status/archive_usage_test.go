package status

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestArchiveAndUsageOnThePage: the ledger's figures of today per team
// and the archive's state (its gauges, its fills) reach /status.json and
// the page; without them, neither section is shown.
func TestArchiveAndUsageOnThePage(t *testing.T) {
	f := newFixture()
	reports := prometheus.NewGauge(prometheus.GaugeOpts{Name: metricArchiveReports})
	disk := prometheus.NewGauge(prometheus.GaugeOpts{Name: metricArchiveDisk})
	spans := prometheus.NewGauge(prometheus.GaugeOpts{Name: metricArchiveSpans})
	f.reg.MustRegister(reports, disk, spans)
	reports.Set(1234)
	disk.Set(3 << 20)
	spans.Set(7)
	var facts Facts
	s := New(Options{Gatherer: f.reg, Interval: 10 * time.Second, Now: func() time.Time { return f.now },
		Facts: func() Facts { return facts }})
	facts = Facts{Teams: []TeamInfo{
		{Name: "demo", Today: &UsageToday{Requests: 12, Reports: 30, Frames: 400, UpstreamCalls: 2, Bytes: 5 << 10}},
		{Name: "research"},
	}, ArchiveState: &ArchiveState{Backend: "pebble", Open: true, Fills: []ArchiveFill{{ID: "testnet-1-2-3",
		Network: "testnet", FeedID: "0x0003", From: 100, To: 349, State: "running", Covered: 100, Seconds: 250, Pages: 1, Reports: 100}}}}
	s.Sample()

	srv := httptest.NewServer(Handler(s, ""))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/status.json")
	require.NoError(t, err)
	var snap Snapshot
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&snap))
	resp.Body.Close()
	require.NotNil(t, snap.Archive)
	assert.Equal(t, int64(1234), snap.Archive.Reports)
	assert.Equal(t, int64(3<<20), snap.Archive.BytesOnDisk)
	assert.Equal(t, int64(7), snap.Archive.Spans)
	require.Len(t, snap.Archive.Fills, 1)
	assert.Equal(t, "running", snap.Archive.Fills[0].State)
	byName := map[string]Team{}
	for _, tm := range snap.Teams {
		byName[tm.Name] = tm
	}
	require.NotNil(t, byName["demo"].Today)
	assert.Equal(t, int64(400), byName["demo"].Today.Frames)
	assert.Nil(t, byName["research"].Today, "a team the ledger could not be read for shows none")

	resp, err = http.Get(srv.URL + "/")
	require.NoError(t, err)
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Contains(t, string(page), `id="usage-demo"`)
	assert.NotContains(t, string(page), `id="usage-research"`)
	assert.Contains(t, string(page), "1234 reports")
	assert.Contains(t, string(page), "100 / 250 s")

	facts = Facts{Teams: []TeamInfo{{Name: "demo"}}}
	f.now = f.now.Add(10 * time.Second)
	s.Sample()
	resp, err = http.Get(srv.URL + "/")
	require.NoError(t, err)
	page, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.NotContains(t, string(page), `<h2>Archive</h2>`, "no archive section when it is off")
	assert.NotContains(t, string(page), `id="usage-demo"`)
}
