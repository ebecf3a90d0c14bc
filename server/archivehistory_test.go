package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/candles"
	"streamgate/config"
	"streamgate/server/servertest"
	"streamgate/upstreamsim"
)

// sumMetric sums a counter over the series whose labels match keep.
func sumMetric(t *testing.T, env *servertest.Env, name string, keep func(labels map[string]string) bool) float64 {
	t.Helper()
	mfs, err := env.Registry.Gather()
	require.NoError(t, err)
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			if keep(labels) {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// TestArchiveHistoryFillIsBoundedPerRequest: one bars request over six
// hours the archive does not hold (216 pages of 100) makes the gateway
// fetch at most candles.MaxFillPages upstream pages, each waiting for
// the fills' share of the upstream budget (its own budget key,
// "backfill"); what is not filled is named missing; and the team is
// charged for it exactly as for a request that fetched nothing: the
// pages are bounded per request and by the fill share, not by the
// team's quota. A page the archive does not hold whole costs one
// upstream call, charged as a page from memory.
func TestArchiveHistoryFillIsBoundedPerRequest(t *testing.T) {
	sim, err := upstreamsim.New(func() upstreamsim.Config { c := upstreamsim.Default(); c.RateLimit = 0; return c }())
	require.NoError(t, err)
	t.Cleanup(func() { sim.Close() })
	env := servertest.Start(t, servertest.Options{Simulator: sim, Quiet: true, Config: func(c *config.Config) {
		c.Auth.ReplayProtection = false
		c.Team(config.DemoTeam).DailyQuota = 1000
		c.Archive.Backend, c.Archive.Path = config.ArchiveBackendPebble, t.TempDir()
		c.Networks["testnet"].Upstream.Budget = config.Rate{RPS: 10, Burst: 10} // the default: fills at 5 pages a second
	}})
	require.Eventually(t, func() bool { return env.Server.ArchiveHealth() == "" }, 30*time.Second, 10*time.Millisecond)
	feed := env.FeedID(t, upstreamsim.Testnet, "ETH", "USD", "V3")
	c := servertest.Demo()
	pageCalls := func() int64 {
		return sim.Counters().Sum(func(c upstreamsim.Count) bool { return c.Endpoint == upstreamsim.EndpointPage })
	}
	// The team's daily quota left after a request, from its RateLimit
	// field ("daily";r=N;t=…).
	left := func(resp *http.Response) int {
		t.Helper()
		v := resp.Header.Get("RateLimit")
		_, r, ok := strings.Cut(v, ";r=")
		require.True(t, ok, "RateLimit %q", v)
		r, _, _ = strings.Cut(r, ";")
		n, err := strconv.Atoi(r)
		require.NoError(t, err, "RateLimit %q", v)
		return n
	}
	fillWaits := func() float64 {
		return sumMetric(t, env, "streamgate_upstream_budget_waits_total", func(l map[string]string) bool {
			return strings.HasPrefix(l["endpoint"], "backfill")
		})
	}
	history := func(from, to int64) ([]map[string]int64, int) {
		t.Helper()
		resp, body := c.Get(t, env.Testnet, fmt.Sprintf("/api/v1/history?feedID=%s&resolution=60&from=%d&to=%d", feed, from, to))
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		var m struct{ Missing []map[string]int64 }
		require.NoError(t, json.Unmarshal(body, &m))
		return m.Missing, left(resp)
	}
	now := time.Now().Unix()
	// A request in the future fills nothing: its charge is the baseline
	// (and the entitlement's catalog view is fetched before the counts).
	_, l0 := history(now+3600, now+3600)
	_, l1 := history(now+3600, now+3600)
	require.Equal(t, 1, l0-l1, "a request is charged one of the team's daily quota")

	end := now - now%60 - 3600
	from := end - 6*3600
	calls, paged, waits := env.UpstreamCalls(), pageCalls(), fillWaits()
	missing, l2 := history(from, end-1)
	pages := pageCalls() - paged
	t.Logf("one request: %d upstream pages, %v waits for the fill share, missing %v", pages, fillWaits()-waits, missing)
	assert.Positive(t, pages, "the request filled from the upstream")
	assert.LessOrEqual(t, pages, int64(candles.MaxFillPages), "at most candles.MaxFillPages pages a request")
	assert.Equal(t, pages, env.UpstreamCalls()-calls, "the fill's pages are its only upstream calls")
	assert.NotEmpty(t, missing, "what the bound left is named missing")
	if pages > 1 {
		assert.Positive(t, fillWaits()-waits, "the pages waited for the fills' share of the budget")
	}
	assert.Equal(t, 1, l1-l2, "charged to the team as a request that fetched nothing")

	// A page the archive does not hold whole is the upstream's, in one
	// call (the archive never answers part of it), charged as the same
	// page answered from memory.
	pageT := fmt.Sprintf("/api/v1/reports/page?feedID=%s&startTimestamp=%d&limit=100", feed, from-7200)
	paged = pageCalls()
	resp, body := c.Get(t, env.Testnet, pageT)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	assert.Equal(t, "MISS", resp.Header.Get("X-Cache"))
	assert.Equal(t, int64(1), pageCalls()-paged, "one upstream page")
	assert.Equal(t, 1, l2-left(resp), "charged one")
	l3 := left(resp)
	resp, body = c.Get(t, env.Testnet, pageT)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	assert.Equal(t, "HIT", resp.Header.Get("X-Cache"))
	assert.Equal(t, 1, l3-left(resp), "charged as the page from memory")
}
