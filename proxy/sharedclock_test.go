package proxy_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/cache"
	"streamgate/config"
	"streamgate/internal/testing/redistest"
	"streamgate/server/servertest"
	"streamgate/upstreamsim"
)

// TestSharedTierBoundsTheWritersTimes: a latest entry or a catalog view
// written to the shared tier by a replica whose clock is an hour ahead, or
// whose lifetimes are an hour long, is not served by this replica as fresh
// for the writer's lifetime: the reader bounds it by its own clock and
// lifetimes and by the report's observation time, and fetches afresh.
func TestSharedTierBoundsTheWritersTimes(t *testing.T) {
	srv := redistest.New(t)
	env := servertest.Start(t, servertest.Options{Quiet: true, Config: func(c *config.Config) {
		sharedTier(srv)(c)
		c.Realtime.LatestFromStream = false
	}})
	c := servertest.Demo()
	now := time.Now()
	maxAge := func(resp *http.Response) int {
		v, ok := strings.CutPrefix(resp.Header.Get("Cache-Control"), "private, max-age=")
		require.True(t, ok, resp.Header.Get("Cache-Control"))
		n, err := strconv.Atoi(v)
		require.NoError(t, err)
		return n
	}
	for _, tc := range []struct {
		name                   string
		base                   string
		observed               time.Time // the planted report's
		stored, expires, stale time.Time
	}{
		{"writer's clock an hour ahead", "BTC", now.Add(-10 * time.Second),
			now.Add(time.Hour - 10*time.Second), now.Add(2 * time.Hour), now.Add(2 * time.Hour)},
		{"writer's latest_ttl an hour long", "ETH", now.Add(-30 * time.Second),
			now.Add(-30 * time.Second), now.Add(time.Hour), now.Add(time.Hour)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			feed := env.FeedID(t, upstreamsim.Mainnet, tc.base, "USD", "V3")
			rep, ok := env.Sim.Report(upstreamsim.Mainnet, feed, tc.observed.Unix())
			require.True(t, ok)
			body, err := json.Marshal(map[string]any{"report": rep})
			require.NoError(t, err)
			plant(t, srv, cache.LatestKey(upstreamsim.Mainnet, "", feed),
				&cache.Entry{Status: http.StatusOK, Body: body, Stored: tc.stored, Expires: tc.expires, StaleUntil: tc.stale})

			for range 2 { // the fill, then memory
				resp, got := c.Get(t, env.Mainnet, "/api/v1/reports/latest?feedID="+feed)
				require.Equal(t, http.StatusOK, resp.StatusCode, string(got))
				var doc struct {
					Report struct {
						ObservationsTimestamp int64 `json:"observationsTimestamp"`
					} `json:"report"`
				}
				require.NoError(t, json.Unmarshal(got, &doc))
				assert.Greater(t, doc.Report.ObservationsTimestamp, tc.observed.Unix(), "the writer's old report is not served as fresh")
				assert.LessOrEqual(t, maxAge(resp), 1, "fresh for this replica's latest_ttl at most")
				age, _ := strconv.Atoi(resp.Header.Get("Age"))
				assert.LessOrEqual(t, int64(age), time.Now().Unix()-doc.Report.ObservationsTimestamp+1, "Age within the report's own age")
			}
		})
	}

	t.Run("catalog view of a writer whose catalog_ttl is longer", func(t *testing.T) {
		// env (catalog_ttl 300s) fills the views and writes them to the
		// tier; this replica's catalog_ttl is 10s.
		targets := []string{"/api/v1/feeds", "/api/v1/discovery"}
		for _, target := range targets {
			resp, body := c.Get(t, env.Mainnet, target)
			require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
			require.Greater(t, maxAge(resp), 10, "%s: the writer's lifetime", target)
		}
		reader := servertest.Start(t, servertest.Options{Quiet: true, Simulator: env.Sim, Config: func(c *config.Config) {
			sharedTier(srv)(c)
			c.Cache.CatalogTTL = 10 * time.Second
		}})
		calls := env.UpstreamCalls()
		for _, target := range targets {
			resp, body := c.Get(t, reader.Mainnet, target)
			require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
			assert.LessOrEqual(t, maxAge(resp), 10, "%s: fresh for this replica's catalog_ttl at most", target)
		}
		assert.Equal(t, calls, env.UpstreamCalls(), "the views came from the tier")
	})
}
