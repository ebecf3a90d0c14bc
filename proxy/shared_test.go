package proxy_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/cache"
	"streamgate/cache/shared"
	"streamgate/config"
	"streamgate/internal/testing/redistest"
	"streamgate/server/servertest"
	"streamgate/upstreamsim"
)

// sharedTier configures a gateway's shared cache tier in srv.
func sharedTier(srv *redistest.Server) func(*config.Config) {
	return func(c *config.Config) {
		c.Cache.Shared = config.SharedCache{Backend: config.SharedRedis, URL: srv.URL(),
			TTL: time.Hour, MaxEntryBytes: config.MiB, Lease: 2 * time.Second}
	}
}

// plant writes e under key as a replica would: a valid encoding, so only
// the call site's Check can refuse what it holds.
func plant(t *testing.T, srv *redistest.Server, key string, e *cache.Entry) {
	t.Helper()
	opt, err := redis.ParseURL(srv.URL())
	require.NoError(t, err)
	rc := redis.NewClient(opt)
	defer rc.Close()
	tier, err := shared.New(shared.Config{Client: rc})
	require.NoError(t, err)
	tier.Set(context.Background(), key, e)
	n, err := rc.Exists(context.Background(), tier.Key(key)).Result()
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "planted")
}

// TestSharedTierBetweenGateways: a report one gateway fetched, another
// answers without calling its upstream; each has a simulator of its own.
func TestSharedTierBetweenGateways(t *testing.T) {
	srv := redistest.New(t)
	a := servertest.Start(t, servertest.Options{Quiet: true, Config: sharedTier(srv)})
	b := servertest.Start(t, servertest.Options{Quiet: true, Config: sharedTier(srv)})
	c := servertest.Demo()
	feed := a.FeedID(t, upstreamsim.Mainnet, "ETH", "USD", "V3")
	ts := time.Now().Add(-time.Hour).Unix()
	for _, target := range []string{
		"/api/v1/reports?feedID=" + feed + "&timestamp=" + strconv.FormatInt(ts, 10),
		"/api/v1/reports/page?feedID=" + feed + "&startTimestamp=" + strconv.FormatInt(ts-100, 10) + "&limit=3",
		"/api/v1/discovery?base_asset=BTC",
	} {
		resp, body := c.Get(t, a.Mainnet, target)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		before := b.UpstreamCalls()
		resp, got := c.Get(t, b.Mainnet, target)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(got))
		assert.JSONEq(t, string(body), string(got), target)
		assert.Equal(t, before, b.UpstreamCalls(), "%s: answered from the shared tier", target)
	}
	assert.GreaterOrEqual(t, metricValue(t, b.Registry, "streamgate_cache_shared_fills_saved_total", nil), 3.0)
}

// TestSharedTierChecksEntries: an entry whose encoding holds but whose
// content is not what its key names (another stream's report, a page out
// of order, a catalog that does not parse) is dropped and counted, and the
// gateway asks its upstream instead.
func TestSharedTierChecksEntries(t *testing.T) {
	srv := redistest.New(t)
	env := servertest.Start(t, servertest.Options{Quiet: true, Config: sharedTier(srv)})
	c := servertest.Demo()
	feed := env.FeedID(t, upstreamsim.Mainnet, "ETH", "USD", "V3")
	other := env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
	ts := time.Now().Add(-time.Hour).Unix()
	now := time.Now()

	// A genuine report of the other stream, as the gateway stores reports.
	resp, otherReport := c.Get(t, env.Mainnet, "/api/v1/reports?feedID="+other+"&timestamp="+strconv.FormatInt(ts, 10))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, otherPage := c.Get(t, env.Mainnet, "/api/v1/reports/page?feedID="+other+"&startTimestamp="+strconv.FormatInt(ts-50, 10)+"&limit=3")
	require.Equal(t, http.StatusOK, resp.StatusCode)

	cases := []struct {
		name   string
		key    string
		entry  *cache.Entry
		target string
		check  func(t *testing.T, body []byte)
	}{
		{
			name:   "report at a timestamp of another stream",
			key:    cache.ReportKey(upstreamsim.Mainnet, "", feed, ts),
			entry:  &cache.Entry{Status: 200, Body: otherReport, Stored: now},
			target: "/api/v1/reports?feedID=" + feed + "&timestamp=" + strconv.FormatInt(ts, 10),
			check:  reportOf(feed),
		},
		{
			name:   "latest of another stream",
			key:    cache.LatestKey(upstreamsim.Mainnet, "", feed),
			entry:  &cache.Entry{Status: 200, Body: otherReport, Stored: now, Expires: now.Add(time.Minute)},
			target: "/api/v1/reports/latest?feedID=" + feed,
			check:  reportOf(feed),
		},
		{
			name:   "page of another stream",
			key:    cache.PageKey(upstreamsim.Mainnet, "", feed, ts-50, 3),
			entry:  &cache.Entry{Status: 200, Body: otherPage, Stored: now},
			target: "/api/v1/reports/page?feedID=" + feed + "&startTimestamp=" + strconv.FormatInt(ts-50, 10) + "&limit=3",
			check: func(t *testing.T, body []byte) {
				var doc struct {
					Reports []struct {
						FeedID string `json:"feedID"`
					} `json:"reports"`
				}
				require.NoError(t, json.Unmarshal(body, &doc))
				require.Len(t, doc.Reports, 3)
				for _, r := range doc.Reports {
					assert.Equal(t, feed, r.FeedID)
				}
			},
		},
		{
			name:   "catalog view that does not parse",
			key:    cache.CatalogKey(upstreamsim.Mainnet, "", "signed"),
			entry:  &cache.Entry{Status: 200, Body: []byte(`{"feeds": 5}`), Stored: now, Expires: now.Add(time.Minute)},
			target: "/api/v1/discovery",
			check: func(t *testing.T, body []byte) {
				var doc struct {
					Feeds []json.RawMessage `json:"feeds"`
				}
				require.NoError(t, json.Unmarshal(body, &doc))
				assert.NotEmpty(t, doc.Feeds)
			},
		},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			plant(t, srv, tc.key, tc.entry)
			before := env.UpstreamCalls()
			resp, body := c.Get(t, env.Mainnet, tc.target)
			require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
			tc.check(t, body)
			assert.Greater(t, env.UpstreamCalls(), before, "asked the upstream instead")
			assert.EqualValues(t, i+1, metricValue(t, env.Registry, "streamgate_cache_shared_lookups_total", map[string]string{"result": "corrupt"}))
		})
	}
}

func reportOf(feed string) func(t *testing.T, body []byte) {
	return func(t *testing.T, body []byte) {
		var doc struct {
			Report struct {
				FeedID string `json:"feedID"`
			} `json:"report"`
		}
		require.NoError(t, json.Unmarshal(body, &doc))
		assert.Equal(t, feed, doc.Report.FeedID)
	}
}
