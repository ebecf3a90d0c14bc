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

// TestArchiveHistoryFillIsBoundedPerRequest: one bars request over six
// hours the archive does not hold (216 pages of 100) makes the gateway
// fetch no more upstream pages than the fills' share of the budget
// allows within the request's bound (candles.FillWait; and at most
// candles.MaxFillPages, TestHistoryFillsMissingBars): with a budget of
// one call a second, the page endpoint's own would let 11 pages go in
// 10 s, the fills' share (half, burst 1) 6, and one more may be in
// flight as the answer goes; what is not filled is named missing; and
// the team is charged for it exactly as for a request that fetched
// nothing. A page the archive does not hold whole costs one upstream
// call, charged as a page from memory.
func TestArchiveHistoryFillIsBoundedPerRequest(t *testing.T) {
	sim := unlimitedSim(t)
	env := servertest.Start(t, servertest.Options{Simulator: sim, Quiet: true, Config: func(c *config.Config) {
		c.Auth.ReplayProtection = false
		c.Team(config.DemoTeam).DailyQuota = 1000
		c.Archive.Backend, c.Archive.Path = config.ArchiveBackendPebble, t.TempDir()
		c.Networks["testnet"].Upstream.Budget = config.Rate{RPS: 1, Burst: 1} // the fills' share: a page every 2 s
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
	calls, paged := env.UpstreamCalls(), pageCalls()
	missing, l2 := history(from, end-1)
	pages := pageCalls() - paged
	t.Logf("one request: %d upstream pages, missing %v", pages, missing)
	share := 1 + int64(candles.FillWait/time.Second)/2 // the burst, then one every 2 s
	assert.Positive(t, pages, "the request filled from the upstream")
	assert.LessOrEqual(t, pages, share+1, "no more than the fill share lets go within the request's bound (and one in flight)")
	assert.Equal(t, pages, env.UpstreamCalls()-calls, "the fill's pages are its only upstream calls")
	assert.NotEmpty(t, missing, "what the bound left is named missing")
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
