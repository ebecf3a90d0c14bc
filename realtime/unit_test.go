package realtime

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"streamgate/feedid"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseFrame(t *testing.T) {
	id := "0x" + strings.Repeat("0a", 32)
	f := `{"report":{"feedID":"` + id + `","fullReport":"0x00","validFromTimestamp":1758586188,"observationsTimestamp":1758586189}}`
	got, ts, ok := parseFrame([]byte(f))
	require.True(t, ok)
	assert.Equal(t, id, string(got))
	assert.Equal(t, int64(1758586189), ts)
	// A stream ID in another case is the same stream, in canonical form.
	got, ts, ok = parseFrame([]byte(`{"report":{"feedID":"` + strings.ToUpper(id) + `","observationsTimestamp":1}}`))
	require.True(t, ok)
	assert.Equal(t, id, string(got))
	assert.Equal(t, int64(1), ts)
	// Filed under the record's own feedID and time, never under a
	// "feedID" found elsewhere in the frame.
	other := "0x" + strings.Repeat("0b", 32)
	got, ts, ok = parseFrame([]byte(`{"x":{"feedID":"` + other + `","observationsTimestamp":7},"report":{"extra":{"feedID":"` + other + `"},"feedID":"` + id + `","observationsTimestamp":2}}`))
	require.True(t, ok)
	assert.Equal(t, id, string(got))
	assert.Equal(t, int64(2), ts)
	for _, bad := range []string{
		``, `{}`, `{"report":{"feedID":"0x12","observationsTimestamp":1}}`,
		`{"report":{"feedID":"` + id + `","observationsTimestamp":-1}}`,
		`{"report":{"feedID":"` + id + `","observationsTimestamp":1}`,
		`{"report":{"feedID":"0y` + id[2:] + `","observationsTimestamp":1}}`,
		`{"report":{"feedID":"` + id + `"}}`,
		`{"report":{"feedID":"` + id + `","observationsTimestamp":"1"}}`,
		`{"report":{"feedID":"` + id + `","observationsTimestamp":12345678901234567890}}`,
	} {
		_, _, ok := parseFrame([]byte(bad))
		assert.False(t, ok, bad)
	}
}

func TestParseOrigins(t *testing.T) {
	assert.Equal(t, []string{"001", "002"}, parseOrigins("{001,002}"))
	assert.Equal(t, []string{"001", "002"}, parseOrigins(" {001, 002 ,001} "))
	assert.Nil(t, parseOrigins(""))
	assert.Nil(t, parseOrigins("{}"))
}

func TestNewValidates(t *testing.T) {
	_, err := New(Config{URL: "http://x", MaxConnections: -1, Pinned: []feedid.ID{"0xAB"}})
	require.Error(t, err)
	for _, want := range []string{"ws://", "APIKey", "negative", "pinned"} {
		assert.Contains(t, err.Error(), want)
	}
	// The sizes are the configuration's (package config declares their
	// defaults): required here, kept as given.
	_, err = New(Config{URL: "wss://ws.example:443/some/path", APIKey: "k", Secret: []byte("s")})
	require.ErrorContains(t, err, "MaxConnections, FeedsPerConnection and Grace are required")
	h, err := New(Config{URL: "wss://ws.example:443/some/path", APIKey: "k", Secret: []byte("s"),
		MaxConnections: 6, FeedsPerConnection: 50, Grace: 30 * time.Second})
	require.NoError(t, err)
	defer h.Close()
	assert.Equal(t, "wss://ws.example:443", h.up.base)
	assert.Equal(t, "https://ws.example:443/", h.up.disc.httpURL)
	assert.Equal(t, 6, h.cfg.MaxConnections)
	assert.Equal(t, 50, h.cfg.FeedsPerConnection)
	assert.Equal(t, 30*time.Second, h.cfg.Grace)
	assert.Equal(t, DefaultStallTimeout, h.cfg.StallTimeout)
	assert.Empty(t, h.Stats().Connections, "no connection without demand")
}

func TestMetricsRegistered(t *testing.T) {
	e := newEnv(t, nil)
	reg := prometheus.NewRegistry()
	h := e.hub(t, func(c *Config) { c.Metrics = NewMetrics(reg) })
	a := e.crypto(t, 1)[0]
	c := collect(t, subscribe(t, h, []feedid.ID{a}, SubscribeOptions{}))
	e.run(t, 30*time.Millisecond)
	require.Eventually(t, func() bool { return c.count(a) >= 2 }, wait, 5*time.Millisecond)
	h.Latest(a)
	mfs, err := reg.Gather()
	require.NoError(t, err)
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				assert.Contains(t, []string{"network", "origin", "state", "reason"}, l.GetName())
			}
		}
	}
	for _, n := range []string{"streamgate_ws_upstream_connections", "streamgate_ws_feeds_subscribed",
		"streamgate_ws_subscribers", "streamgate_ws_frames_received_total", "streamgate_ws_frames_delivered_total",
		"streamgate_ws_latest_served_total"} {
		assert.True(t, names[n], n)
	}
}

// TestSubscriptionMemory measures what a subscription costs the hub with
// the default queue, and keeps it well under the gateway's budget.
func TestSubscriptionMemory(t *testing.T) {
	e := newEnv(t, nil)
	h := e.hub(t, nil)
	feeds := e.crypto(t, 2)
	const n = 2000
	subs := make([]*Subscription, 0, n)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range n {
		subs = append(subs, subscribe(t, h, feeds, SubscribeOptions{}))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / n
	t.Logf("one subscription of %d feeds, queue %d: about %d bytes", len(feeds), DefaultQueue, per)
	assert.Less(t, per, int64(4096))
	for _, s := range subs {
		s.Close()
	}
	assert.Equal(t, 0, h.Stats().Subscribers)
}

// TestUpgradeSignature checks the upgrade's signature against the
// published vector for a raw comma.
func TestUpgradeSignature(t *testing.T) {
	h, err := New(Config{URL: "ws://ws.example", APIKey: "clientId", Secret: []byte("userSecret"),
		MaxConnections: 4, FeedsPerConnection: 50, Grace: 30 * time.Second,
		Clock: clockwork.NewFakeClockAt(time.UnixMilli(1718885772000))})
	require.NoError(t, err)
	defer h.Close()
	target := "/api/v1/ws?feedIDs=0x000359843a543ee2fe414dc14c7e7920ef10f4372990b79d6361cdc0dd1ba782,0x00037da06d56d083fe599397a4769a042d63aa73dc4ef57709d31e9971a5b439"
	req, err := h.up.upgradeRequest(target, "002")
	require.NoError(t, err)
	assert.Equal(t, target, req.URL.RequestURI())
	assert.Equal(t, "6bf268bf66d540528d4bad7d9dabb7809e8c25a0bed3b9b8b0453e0417ee1948", req.Header.Get("X-Authorization-Signature-SHA256"))
	assert.Equal(t, "002", req.Header.Get("X-Cll-Origin"))
}
