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

	"streamgate/auth"
	"streamgate/config"
	"streamgate/feedid"
	"streamgate/server/servertest"
	"streamgate/upstreamsim"
)

// reportBody is a report answer's body: a stream frame's shape.
type reportBody = servertest.Frame

type reportsBody struct {
	Reports []struct {
		FeedID                string `json:"feedID"`
		ObservationsTimestamp int64  `json:"observationsTimestamp"`
		FullReport            string `json:"fullReport"`
	} `json:"reports"`
}

type errorBody struct {
	Error   string `json:"error"`
	Message string `json:"message"`
}

// pastTS is a timestamp well inside the simulator's history window.
func pastTS() int64 { return time.Now().Add(-time.Hour).Unix() }

// TestEveryEndpoint calls each endpoint of the API on both networks through
// the gateway and checks the answer is the simulator's, in the API's shapes.
func TestEveryEndpoint(t *testing.T) {
	env := servertest.Start(t, servertest.Options{})
	c := servertest.Demo()
	for _, net := range []struct{ name, base string }{{upstreamsim.Mainnet, env.Mainnet}, {upstreamsim.Testnet, env.Testnet}} {
		t.Run(net.name, func(t *testing.T) {
			btc := env.FeedID(t, net.name, "BTC", "USD", "V3")
			ts := pastTS()

			resp, body := c.Get(t, net.base, "/api/v1/discovery")
			require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
			var disc struct {
				Feeds []struct {
					FeedID      string `json:"feedId"`
					NetworkType string `json:"networkType"`
				} `json:"feeds"`
			}
			require.NoError(t, json.Unmarshal(body, &disc))
			require.NotEmpty(t, disc.Feeds)
			for _, f := range disc.Feeds {
				assert.Equal(t, net.name, f.NetworkType, "a network's catalog never shows the other's streams")
			}
			assert.Regexp(t, `^private, max-age=\d+$`, resp.Header.Get("Cache-Control"), "a team's listing is its own")

			resp, body = c.Get(t, net.base, "/api/v1/feeds")
			require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
			var feeds struct {
				Feeds []struct {
					FeedID string `json:"feedID"`
				} `json:"feeds"`
			}
			require.NoError(t, json.Unmarshal(body, &feeds))
			assert.Len(t, feeds.Feeds, len(disc.Feeds), "the older list holds the same non-hidden streams")

			resp, body = c.Get(t, net.base, "/api/v1/reports/latest?feedID="+btc)
			require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
			var latest reportBody
			require.NoError(t, json.Unmarshal(body, &latest))
			assert.Equal(t, btc, latest.Report.FeedID)

			resp, body = c.Get(t, net.base, "/api/v1/reports?feedID="+btc+"&timestamp="+strconv.FormatInt(ts, 10))
			require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
			var at reportBody
			require.NoError(t, json.Unmarshal(body, &at))
			assert.Equal(t, ts, at.Report.ObservationsTimestamp)
			want, ok := env.Sim.Report(net.name, btc, ts)
			require.True(t, ok)
			assert.Equal(t, want.FullReport, at.Report.FullReport, "the gateway serves the upstream's bytes")

			resp, body = c.Get(t, net.base, "/api/v1/reports/page?feedID="+btc+"&startTimestamp="+strconv.FormatInt(ts, 10)+"&limit=5")
			require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
			var page reportsBody
			require.NoError(t, json.Unmarshal(body, &page))
			require.Len(t, page.Reports, 5)
			for i, r := range page.Reports {
				assert.Equal(t, ts+int64(i), r.ObservationsTimestamp, "ascending from startTimestamp inclusive")
			}

			eth := env.FeedID(t, net.name, "ETH", "USD", "V3")
			resp, body = c.Get(t, net.base, "/api/v1/reports/bulk?feedIDs="+btc+","+eth+"&timestamp="+strconv.FormatInt(ts, 10))
			require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
			var bulk reportsBody
			require.NoError(t, json.Unmarshal(body, &bulk))
			require.Len(t, bulk.Reports, 2)
			assert.Equal(t, btc, bulk.Reports[0].FeedID)
			assert.Equal(t, eth, bulk.Reports[1].FeedID)

			resp, _ = c.Get(t, net.base, "/api/v1/reports/bulk?feedIDs="+eth+"%2C"+btc+"&timestamp="+strconv.FormatInt(ts, 10))
			assert.Equal(t, http.StatusOK, resp.StatusCode, "%2C separates like a raw comma")
		})
	}
}

func TestAuthentication(t *testing.T) {
	env := servertest.Start(t, servertest.Options{Config: func(c *config.Config) {
		// A key in rotation: both secrets verify.
		c.Teams[0].Keys = append(c.Teams[0].Keys, config.Key{ID: "rotating", SecretList: []config.Secret{"new-secret-0123456789", "old-secret-0123456789"}})
		c.Auth.ReplayGrace = 0 // every repeat is a replay (the grace is tested in auth)
	}})
	btc := env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
	target := "/api/v1/reports/latest?feedID=" + btc
	send := func(t *testing.T, mutate func(*http.Request)) (*http.Response, errorBody) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, env.Mainnet+target, nil)
		require.NoError(t, err)
		auth.Sign(req, config.DemoKeyID, []byte(config.DemoKeySecret), time.Now())
		mutate(req)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var eb errorBody
		if resp.StatusCode != http.StatusOK {
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&eb))
			assert.Equal(t, eb.Error, eb.Message, "error and message carry the same text")
			assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
		}
		return resp, eb
	}
	tests := []struct {
		name   string
		mutate func(*http.Request)
		status int
	}{
		{"valid", func(*http.Request) {}, http.StatusOK},
		{"no headers", func(r *http.Request) { r.Header = http.Header{} }, http.StatusBadRequest},
		{"no signature", func(r *http.Request) { r.Header.Del(auth.HeaderSignature) }, http.StatusBadRequest},
		{"timestamp not a number", func(r *http.Request) { r.Header.Set(auth.HeaderTimestamp, "yesterday") }, http.StatusBadRequest},
		{"signature not hex", func(r *http.Request) { r.Header.Set(auth.HeaderSignature, strings.Repeat("z", 64)) }, http.StatusBadRequest},
		{"unknown key", func(r *http.Request) {
			auth.Sign(r, "no-such-key", []byte(config.DemoKeySecret), time.Now())
		}, http.StatusUnauthorized},
		{"wrong secret", func(r *http.Request) {
			auth.Sign(r, config.DemoKeyID, []byte("not-the-secret-at-all"), time.Now())
		}, http.StatusUnauthorized},
		{"stale timestamp", func(r *http.Request) {
			auth.Sign(r, config.DemoKeyID, []byte(config.DemoKeySecret), time.Now().Add(-time.Minute))
		}, http.StatusUnauthorized},
		{"future timestamp", func(r *http.Request) {
			auth.Sign(r, config.DemoKeyID, []byte(config.DemoKeySecret), time.Now().Add(time.Minute))
		}, http.StatusUnauthorized},
		{"rotated key, new secret", func(r *http.Request) { auth.Sign(r, "rotating", []byte("new-secret-0123456789"), time.Now()) }, http.StatusOK},
		{"rotated key, old secret", func(r *http.Request) { auth.Sign(r, "rotating", []byte("old-secret-0123456789"), time.Now()) }, http.StatusOK},
		{"query changed after signing", func(r *http.Request) { r.URL.RawQuery += "&x=1" }, http.StatusUnauthorized},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := env.UpstreamCalls()
			resp, eb := send(t, tc.mutate)
			assert.Equal(t, tc.status, resp.StatusCode, eb.Message)
			if tc.status != http.StatusOK {
				assert.Equal(t, before, env.UpstreamCalls(), "a refused request costs no upstream call")
			}
		})
	}

	t.Run("replay", func(t *testing.T) {
		req, err := http.NewRequest(http.MethodGet, env.Mainnet+target, nil)
		require.NoError(t, err)
		auth.Sign(req, config.DemoKeyID, []byte(config.DemoKeySecret), time.Now())
		for i, want := range []int{http.StatusOK, http.StatusUnauthorized} {
			resp, err := http.DefaultClient.Do(req.Clone(req.Context()))
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, want, resp.StatusCode, "attempt %d", i+1)
		}
	})

	t.Run("anonymous", func(t *testing.T) {
		anon := &servertest.Client{HTTP: http.DefaultClient}
		resp, _ := anon.Get(t, env.Mainnet, "/api/v1/discovery")
		assert.Equal(t, http.StatusOK, resp.StatusCode, "the catalog is open")
		resp, _ = anon.Get(t, env.Mainnet, target)
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "reports need headers")
		resp, _ = anon.Get(t, env.Mainnet, "/api/v1/feeds")
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	})
}

func TestAnonymousCatalogOff(t *testing.T) {
	env := servertest.Start(t, servertest.Options{Config: func(c *config.Config) { c.Auth.AnonymousCatalog = false }})
	resp, _ := (&servertest.Client{HTTP: http.DefaultClient}).Get(t, env.Mainnet, "/api/v1/discovery")
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Zero(t, env.UpstreamCalls())
}

func TestEntitlements(t *testing.T) {
	env := servertest.Start(t, servertest.Options{})
	research := servertest.Research()
	demo := servertest.Demo()
	allowed := upstreamsim.RestrictedStreams()[0]
	other := ""
	restricted := map[string]bool{}
	for _, id := range upstreamsim.RestrictedStreams() {
		restricted[id] = true
	}
	for _, s := range env.Sim.Streams(upstreamsim.Testnet) {
		if !restricted[s.FeedID] {
			other = s.FeedID
			break
		}
	}
	require.NotEmpty(t, other)
	unknown := "0x0003" + strings.Repeat("ab", 30)
	ts := strconv.FormatInt(pastTS(), 10)

	tests := []struct {
		name   string
		client *servertest.Client
		base   string
		target string
		status int
	}{
		{"research reads its stream", research, env.Testnet, "/api/v1/reports/latest?feedID=" + allowed, http.StatusOK},
		{"research reads another stream", research, env.Testnet, "/api/v1/reports/latest?feedID=" + other, http.StatusUnauthorized},
		{"research on mainnet", research, env.Mainnet, "/api/v1/reports/latest?feedID=" + allowed, http.StatusUnauthorized},
		{"research bulk with one forbidden stream", research, env.Testnet, "/api/v1/reports/bulk?feedIDs=" + allowed + "," + other + "&timestamp=" + ts, http.StatusUnauthorized},
		{"research page of another stream", research, env.Testnet, "/api/v1/reports/page?feedID=" + other + "&startTimestamp=" + ts, http.StatusUnauthorized},
		{"unknown stream", demo, env.Testnet, "/api/v1/reports?feedID=" + unknown + "&timestamp=" + ts, http.StatusUnauthorized},
		{"unknown stream in bulk", demo, env.Testnet, "/api/v1/reports/bulk?feedIDs=" + allowed + "," + unknown + "&timestamp=" + ts, http.StatusUnauthorized},
	}
	// Load the catalog first, so that refusals can be counted exactly.
	resp, _ := demo.Get(t, env.Testnet, "/api/v1/discovery?hidden=true")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := env.UpstreamCalls()
			resp, body := tc.client.Get(t, tc.base, tc.target)
			assert.Equal(t, tc.status, resp.StatusCode, string(body))
			if tc.status != http.StatusOK {
				assert.Equal(t, before, env.UpstreamCalls(), "refused before any upstream call")
			}
		})
	}

	t.Run("catalog restricted to the team", func(t *testing.T) {
		resp, body := research.Get(t, env.Testnet, "/api/v1/discovery?hidden=true")
		require.Equal(t, http.StatusOK, resp.StatusCode)
		var disc struct {
			Feeds []struct {
				FeedID string `json:"feedId"`
			} `json:"feeds"`
		}
		require.NoError(t, json.Unmarshal(body, &disc))
		var got []string
		for _, f := range disc.Feeds {
			got = append(got, f.FeedID)
		}
		assert.ElementsMatch(t, upstreamsim.RestrictedStreams(), got)
	})

	t.Run("hidden streams only with hidden=true", func(t *testing.T) {
		hidden := env.Sim.Hidden(upstreamsim.Testnet)
		require.NotEmpty(t, hidden)
		ids := func(target string) map[string]bool {
			resp, body := demo.Get(t, env.Testnet, target)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			var disc struct {
				Feeds []struct {
					FeedID string `json:"feedId"`
				} `json:"feeds"`
			}
			require.NoError(t, json.Unmarshal(body, &disc))
			out := map[string]bool{}
			for _, f := range disc.Feeds {
				out[f.FeedID] = true
			}
			return out
		}
		plain, withHidden := ids("/api/v1/discovery"), ids("/api/v1/discovery?hidden=true")
		for _, h := range hidden {
			assert.False(t, plain[h], "hidden stream listed without hidden=true")
			assert.True(t, withHidden[h], "hidden stream missing with hidden=true")
		}
		anon := &servertest.Client{HTTP: http.DefaultClient}
		resp, body := anon.Get(t, env.Testnet, "/api/v1/discovery?hidden=true")
		require.Equal(t, http.StatusOK, resp.StatusCode)
		for _, h := range hidden {
			assert.NotContains(t, string(body), h, "a parameter never widens what an anonymous caller sees")
		}
		// A hidden stream is readable by a "*" team.
		resp, _ = demo.Get(t, env.Testnet, "/api/v1/reports/latest?feedID="+hidden[0])
		assert.Equal(t, http.StatusOK, resp.StatusCode)
	})
}

func TestValidation(t *testing.T) {
	env := servertest.Start(t, servertest.Options{})
	c := servertest.Demo()
	btc := env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
	tests := []struct {
		name, target string
		status       int
	}{
		{"report without feedID", "/api/v1/reports?timestamp=1700000000", 400},
		{"report without timestamp", "/api/v1/reports?feedID=" + btc, 400},
		{"feedID too short", "/api/v1/reports/latest?feedID=0x0003abcd", 400},
		{"feedID not hex", "/api/v1/reports/latest?feedID=0x" + strings.Repeat("g", 64), 400},
		{"feedID without 0x", "/api/v1/reports/latest?feedID=" + btc[2:] + "00", 400},
		{"timestamp not a number", "/api/v1/reports?feedID=" + btc + "&timestamp=now", 400},
		{"timestamp negative", "/api/v1/reports?feedID=" + btc + "&timestamp=-5", 400},
		{"timestamp in milliseconds", "/api/v1/reports?feedID=" + btc + "&timestamp=1700000000000000", 400},
		{"page limit zero", "/api/v1/reports/page?feedID=" + btc + "&startTimestamp=1700000000&limit=0", 400},
		{"page limit not a number", "/api/v1/reports/page?feedID=" + btc + "&startTimestamp=1700000000&limit=ten", 400},
		{"page without start", "/api/v1/reports/page?feedID=" + btc, 400},
		{"bulk without feedIDs", "/api/v1/reports/bulk?timestamp=1700000000", 400},
		{"bulk with an empty item", "/api/v1/reports/bulk?feedIDs=" + btc + ",,&timestamp=1700000000", 400},
		{"bulk with a bad item", "/api/v1/reports/bulk?feedIDs=" + btc + ",0x12&timestamp=1700000000", 400},
		{"bulk too long", "/api/v1/reports/bulk?feedIDs=" + strings.Repeat(btc+",", 1000) + btc + "&timestamp=1700000000", 400},
		{"catalog date not a date", "/api/v1/discovery?created_after=2024-13-01", 400},
		{"catalog hidden not a boolean", "/api/v1/discovery?hidden=maybe", 400},
		{"unknown path outside the API", "/metrics", 404},
	}
	// A query url.ParseQuery refuses is named as such, not as the
	// parameter its bad escape hid.
	malformed := []struct{ name, target string }{
		{"bad escape in feedID", "/api/v1/reports/latest?feedID=" + btc + "%zz"},
		{"bad escape beside a good query", "/api/v1/reports?feedID=" + btc + "&timestamp=1700000000&x=%zz"},
		{"bad escape in feeds", "/api/v1/feeds?hidden=%zz"},
	}
	for _, tc := range malformed {
		t.Run(tc.name, func(t *testing.T) {
			before := env.UpstreamCalls()
			resp, body := c.Get(t, env.Mainnet, tc.target)
			assert.Equal(t, http.StatusBadRequest, resp.StatusCode, string(body))
			var eb errorBody
			require.NoError(t, json.Unmarshal(body, &eb), "errors are JSON")
			assert.Contains(t, eb.Error, `malformed query: invalid escape "%zz"`)
			assert.Equal(t, before, env.UpstreamCalls(), "bad input costs no upstream call")
		})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := env.UpstreamCalls()
			resp, body := c.Get(t, env.Mainnet, tc.target)
			assert.Equal(t, tc.status, resp.StatusCode, string(body))
			var eb errorBody
			require.NoError(t, json.Unmarshal(body, &eb), "errors are JSON")
			assert.NotEmpty(t, eb.Error)
			assert.Equal(t, before, env.UpstreamCalls(), "bad input costs no upstream call")
		})
	}
	for _, m := range []struct{ method, path string }{
		{http.MethodPost, "/api/v1/reports/latest?feedID=" + btc},
		{http.MethodHead, "/api/v1/reports/latest?feedID=" + btc},
		{http.MethodDelete, "/"},
	} {
		t.Run("method "+m.method+" "+m.path[:min(len(m.path), 24)], func(t *testing.T) {
			before := env.UpstreamCalls()
			req, _ := http.NewRequest(m.method, env.Mainnet+m.path, strings.NewReader("x"))
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
			assert.NotEmpty(t, resp.Header.Get("Allow"), "a 405 says which methods are allowed")
			assert.Equal(t, before, env.UpstreamCalls())
		})
	}
}

// TestCredentialsStayApart checks that the client's own credentials never go
// upstream and the organisation's never come back.
func TestCredentialsStayApart(t *testing.T) {
	env := servertest.Start(t, servertest.Options{})
	c := servertest.Demo()
	btc := env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
	for _, target := range []string{
		"/api/v1/discovery", "/api/v1/feeds", "/api/v1/reports/latest?feedID=" + btc,
		"/api/v1/reports/bulk?feedIDs=" + btc + "&timestamp=" + strconv.FormatInt(pastTS(), 10),
		"/api/v1/ws?feedIDs=" + btc, "/api/v1/something-new",
	} {
		resp, body := c.Get(t, env.Mainnet, target)
		for name, vals := range resp.Header {
			for _, v := range vals {
				assert.NotContains(t, v, upstreamsim.OrgKeyID, "header %s", name)
				assert.NotContains(t, v, upstreamsim.OrgKeySecret, "header %s", name)
			}
		}
		assert.NotContains(t, string(body), upstreamsim.OrgKeyID)
		assert.NotContains(t, string(body), upstreamsim.OrgKeySecret)
	}
	counts := env.Sim.Counters()
	assert.Zero(t, counts.ByKey(config.DemoKeyID), "a client's key never reaches the upstream")
	assert.Positive(t, counts.ByKey(upstreamsim.OrgKeyID))
	assert.Zero(t, counts.ByKey(upstreamsim.KeyUnknown), "every upstream call verified")
}

func TestPassThrough(t *testing.T) {
	env := servertest.Start(t, servertest.Options{Sim: func(c *upstreamsim.Config) { c.HAOrigins = []string{"001", "002"} }})
	req, err := http.NewRequest(http.MethodHead, env.Mainnet+"/", nil)
	require.NoError(t, err)
	auth.Sign(req, config.DemoKeyID, []byte(config.DemoKeySecret), time.Now())
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "{001,002}", resp.Header.Get("X-Cll-Available-Origins"),
		"the gateway advertises its own HA origins (realtime.client_origins), never the upstream's")
	assert.Zero(t, env.Sim.Counters().ByEndpoint(upstreamsim.Mainnet, upstreamsim.EndpointRoot), "answered by the gateway")

	// A WebSocket is never passed through: the gateway answers a plain GET
	// of /api/v1/ws itself (ws_test.go has the stream).
	btc := env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
	resp2, body := servertest.Demo().Get(t, env.Mainnet, "/api/v1/ws?feedIDs="+btc)
	assert.Equal(t, http.StatusUpgradeRequired, resp2.StatusCode, string(body))
	assert.Zero(t, env.Sim.Counters().WSTotal("").Accepted+env.Sim.Counters().ByEndpoint(upstreamsim.Mainnet, upstreamsim.EndpointWS))
}

func TestUpstreamFailures(t *testing.T) {
	env := servertest.Start(t, servertest.Options{Config: func(c *config.Config) {
		for _, n := range c.Networks {
			n.Upstream.Retries = 2
			n.Upstream.Timeout = 300 * time.Millisecond
		}
	}})
	c := servertest.Demo()
	btc := env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
	// Load the catalog before faults start.
	resp, _ := c.Get(t, env.Mainnet, "/api/v1/discovery?hidden=true")
	require.Equal(t, http.StatusOK, resp.StatusCode)

	tests := []struct {
		name     string
		faults   upstreamsim.Faults
		status   []int
		attempts int64 // upstream calls for one request
	}{
		{"errors are retried then passed through", upstreamsim.Faults{ErrorRate: 1}, []int{500, 502, 503}, 0},
		{"a 429 is not retried, answered 503 by the gateway", upstreamsim.Faults{Force429: 1}, []int{503}, 1},
		{"a hang times out per attempt and is retried", upstreamsim.Faults{Hang: 1}, []int{503}, 3},
	}
	base := pastTS()
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, env.Sim.SetFaults(tc.faults))
			defer env.Sim.SetFaults(upstreamsim.Faults{})
			before := env.Sim.Counters().ByEndpoint(upstreamsim.Mainnet, upstreamsim.EndpointReport)
			ts := strconv.FormatInt(base-int64(i), 10)
			resp, body := c.Get(t, env.Mainnet, "/api/v1/reports?feedID="+btc+"&timestamp="+ts)
			assert.Contains(t, tc.status, resp.StatusCode, string(body))
			if tc.faults.Force429 > 0 {
				assert.Equal(t, "1", resp.Header.Get("Retry-After"), "the upstream's Retry-After is passed on")
				assert.NotContains(t, string(body), "rate limit exceeded", "the gateway's own answer")
			}
			calls := env.Sim.Counters().ByEndpoint(upstreamsim.Mainnet, upstreamsim.EndpointReport) - before
			if tc.attempts > 0 {
				assert.Equal(t, tc.attempts, calls)
			} else {
				assert.GreaterOrEqual(t, calls, int64(1))
				assert.LessOrEqual(t, calls, int64(3), "at most 1 + retries attempts")
			}
			// A failure is never cached: the same request later succeeds.
			require.NoError(t, env.Sim.SetFaults(upstreamsim.Faults{}))
			resp, body = c.Get(t, env.Mainnet, "/api/v1/reports?feedID="+btc+"&timestamp="+ts)
			assert.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		})
	}
}

func TestBulkPartial(t *testing.T) {
	env := servertest.Start(t, servertest.Options{})
	c := servertest.Demo()
	// A crypto stream publishes at once; a NAV stream some seconds late.
	fast := env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
	var slow string
	for _, s := range env.Sim.Streams(upstreamsim.Mainnet) {
		if s.AssetClass == "NAV" && s.Status == "live" && s.DecommissionedAt == nil {
			if _, last, ok := env.Sim.Window(upstreamsim.Mainnet, s.FeedID); ok && last < time.Now().Unix() {
				slow = s.FeedID
				break
			}
		}
	}
	require.NotEmpty(t, slow, "a stream that publishes late")
	_, lastFast, _ := env.Sim.Window(upstreamsim.Mainnet, fast)
	resp, body := c.Get(t, env.Mainnet, "/api/v1/reports/bulk?feedIDs="+fast+","+slow+"&timestamp="+strconv.FormatInt(lastFast, 10))
	require.Equal(t, http.StatusPartialContent, resp.StatusCode, string(body))
	var rb reportsBody
	require.NoError(t, json.Unmarshal(body, &rb))
	require.Len(t, rb.Reports, 1)
	assert.Equal(t, fast, rb.Reports[0].FeedID)
}

func TestOwnUpstreamCredentials(t *testing.T) {
	restricted, err := feedid.ParseAll(upstreamsim.RestrictedStreams())
	require.NoError(t, err)
	env := servertest.Start(t, servertest.Options{Config: func(c *config.Config) {
		c.Teams = append(c.Teams, config.Team{
			Name: "isolated", Networks: []string{"mainnet"}, Feeds: restricted,
			Upstream: map[string]*config.Credentials{"mainnet": {APIKey: upstreamsim.RestrictedKeyID, APISecret: upstreamsim.RestrictedKeySecret}},
			Keys:     []config.Key{{ID: "isolated-key", Secret: "isolated-secret-0123456789"}},
		})
	}})
	feed := upstreamsim.RestrictedStreams()[0]
	ts := strconv.FormatInt(pastTS(), 10)
	target := "/api/v1/reports?feedID=" + feed + "&timestamp=" + ts
	isolated := &servertest.Client{Key: "isolated-key", Secret: "isolated-secret-0123456789", HTTP: http.DefaultClient}

	resp, body := isolated.Get(t, env.Mainnet, target)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	assert.Positive(t, env.Sim.Counters().ByKey(upstreamsim.RestrictedKeyID), "signed with the team's own credential")

	resp, _ = servertest.Demo().Get(t, env.Mainnet, target)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "MISS", resp.Header.Get("X-Cache"), "what one team fetched with its own credential is not served to another")

	resp, _ = isolated.Get(t, env.Mainnet, target)
	assert.Equal(t, "HIT", resp.Header.Get("X-Cache"), "but is served again to the same team")
}
