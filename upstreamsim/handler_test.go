package upstreamsim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/auth"
	"streamgate/catalog"
)

// Streams the tests use, by name.
const (
	nameETH   = "ETH/USD-RefPrice-DS-Premium-Global-003"
	nameBTC   = "BTC/USD-RefPrice-DS-Premium-Global-003"
	nameSOL   = "SOL/USD-RefPrice-DS-Premium-Global-003"
	nameBUIDL = "BUIDL/USD-NAV-Datalink-001" // published with a delay
	nameMATIC = "MATIC/USD-RefPrice-DS-Premium-Global-003"
	nameHYPE  = "HYPE/USD-RefPrice-DS-Premium-Global-003" // hidden on mainnet
)

func ts(v int64) string { return strconv.FormatInt(v, 10) }

func TestStatusCodes(t *testing.T) {
	e := newEnv(t, nil)
	eth := findStream(t, e.sim, Mainnet, nameETH)
	btc := findStream(t, e.sim, Mainnet, nameBTC)
	sol := findStream(t, e.sim, Mainnet, nameSOL)
	buidl := findStream(t, e.sim, Mainnet, nameBUIDL)
	matic := findStream(t, e.sim, Mainnet, nameMATIC)
	hype := findStream(t, e.sim, Mainnet, nameHYPE)
	unknown := "0x0003" + strings.Repeat("ab", 30)
	now := t0.Unix()
	sig := func(c *creds, at time.Time) func(*http.Request) {
		return func(r *http.Request) { auth.Sign(r, c.id, []byte(c.secret), at) }
	}

	tests := []struct {
		name   string
		method string
		target string
		c      *creds
		mutate func(*http.Request) // applied after signing
		status int
		body   string // a substring of the error
	}{
		// Successes.
		{name: "latest", target: "/api/v1/reports/latest?feedID=" + eth, c: org, status: 200},
		{name: "report in window", target: "/api/v1/reports?feedID=" + eth + "&timestamp=" + ts(now-100), c: org, status: 200},
		{name: "report at the window's first second", target: "/api/v1/reports?feedID=" + eth + "&timestamp=" + ts(now-86400), c: org, status: 200},
		{name: "page", target: "/api/v1/reports/page?feedID=" + eth + "&startTimestamp=" + ts(now-100), c: org, status: 200},
		{name: "bulk", target: "/api/v1/reports/bulk?feedIDs=" + eth + "," + btc + "&timestamp=" + ts(now-5), c: org, status: 200},
		{name: "bulk partial at the current second", target: "/api/v1/reports/bulk?feedIDs=" + eth + "," + buidl + "&timestamp=" + ts(now), c: org, status: 206},
		{name: "hidden stream for the entitled key", target: "/api/v1/reports/latest?feedID=" + hype, c: org, status: 200},
		{name: "restricted key on its stream", target: "/api/v1/reports/latest?feedID=" + eth, c: restricted, status: 200},
		{name: "upper-case hex accepted", target: "/api/v1/reports/latest?feedID=0x" + strings.ToUpper(eth[2:]), c: org, status: 200},
		{name: "timestamp within skew", target: "/api/v1/reports/latest?feedID=" + eth, c: org, mutate: sig(org, t0.Add(4*time.Second)), status: 200},
		{name: "discovery anonymous", target: "/api/v1/discovery", status: 200},
		{name: "discovery signed", target: "/api/v1/discovery?hidden=true", c: org, status: 200},
		{name: "feeds", target: "/api/v1/feeds", c: org, status: 200},
		{name: "HEAD /", method: http.MethodHead, target: "/", status: 200},

		// 400: headers.
		{name: "no headers", target: "/api/v1/reports/latest?feedID=" + eth, status: 400, body: "missing authentication headers"},
		{name: "no signature header", target: "/api/v1/reports/latest?feedID=" + eth, c: org,
			mutate: func(r *http.Request) { r.Header.Del(auth.HeaderSignature) }, status: 400, body: "missing"},
		{name: "no timestamp header", target: "/api/v1/reports/latest?feedID=" + eth, c: org,
			mutate: func(r *http.Request) { r.Header.Del(auth.HeaderTimestamp) }, status: 400, body: "missing"},
		{name: "no key header", target: "/api/v1/reports/latest?feedID=" + eth, c: org,
			mutate: func(r *http.Request) { r.Header.Del(auth.HeaderAuthorization) }, status: 400, body: "missing"},
		{name: "timestamp header not a number", target: "/api/v1/reports/latest?feedID=" + eth, c: org,
			mutate: func(r *http.Request) { r.Header.Set(auth.HeaderTimestamp, "soon") }, status: 400, body: "malformed"},
		{name: "signature header not hex", target: "/api/v1/reports/latest?feedID=" + eth, c: org,
			mutate: func(r *http.Request) { r.Header.Set(auth.HeaderSignature, strings.Repeat("z", 64)) }, status: 400, body: "malformed"},
		{name: "feeds without credentials", target: "/api/v1/feeds", status: 400},
		{name: "discovery with partial credentials", target: "/api/v1/discovery", c: org,
			mutate: func(r *http.Request) { r.Header.Del(auth.HeaderSignature) }, status: 400},

		// 400: query.
		{name: "feedID missing", target: "/api/v1/reports/latest", c: org, status: 400, body: "missing parameter feedID"},
		{name: "feedID short", target: "/api/v1/reports/latest?feedID=0x0003ab", c: org, status: 400, body: "malformed parameter feedID"},
		{name: "feedID without 0x", target: "/api/v1/reports/latest?feedID=00" + eth[2:], c: org, status: 400, body: "malformed parameter feedID"},
		{name: "feedID not hex", target: "/api/v1/reports/latest?feedID=0x" + strings.Repeat("g", 64), c: org, status: 400, body: "malformed parameter feedID"},
		{name: "timestamp missing", target: "/api/v1/reports?feedID=" + eth, c: org, status: 400, body: "missing parameter timestamp"},
		{name: "timestamp not a number", target: "/api/v1/reports?feedID=" + eth + "&timestamp=abc", c: org, status: 400, body: "malformed parameter timestamp"},
		{name: "timestamp negative", target: "/api/v1/reports?feedID=" + eth + "&timestamp=-5", c: org, status: 400, body: "malformed parameter timestamp"},
		{name: "timestamp fractional", target: "/api/v1/reports?feedID=" + eth + "&timestamp=1.5", c: org, status: 400, body: "malformed parameter timestamp"},
		{name: "timestamp overflows", target: "/api/v1/reports?feedID=" + eth + "&timestamp=99999999999999999999", c: org, status: 400, body: "malformed parameter timestamp"},
		{name: "bulk feedIDs missing", target: "/api/v1/reports/bulk?timestamp=" + ts(now), c: org, status: 400, body: "missing parameter feedIDs"},
		{name: "bulk one feedID malformed", target: "/api/v1/reports/bulk?feedIDs=" + eth + ",0x12&timestamp=" + ts(now), c: org, status: 400, body: "malformed parameter feedIDs"},
		{name: "bulk empty item", target: "/api/v1/reports/bulk?feedIDs=" + eth + ",&timestamp=" + ts(now), c: org, status: 400, body: "feedIDs"},
		{name: "bulk timestamp missing", target: "/api/v1/reports/bulk?feedIDs=" + eth, c: org, status: 400, body: "missing parameter timestamp"},
		{name: "page startTimestamp missing", target: "/api/v1/reports/page?feedID=" + eth, c: org, status: 400, body: "missing parameter startTimestamp"},
		{name: "page limit zero", target: "/api/v1/reports/page?feedID=" + eth + "&startTimestamp=" + ts(now) + "&limit=0", c: org, status: 400, body: "limit"},
		{name: "page limit negative", target: "/api/v1/reports/page?feedID=" + eth + "&startTimestamp=" + ts(now) + "&limit=-3", c: org, status: 400, body: "limit"},
		{name: "page limit not a number", target: "/api/v1/reports/page?feedID=" + eth + "&startTimestamp=" + ts(now) + "&limit=ten", c: org, status: 400, body: "limit"},
		{name: "page limit empty", target: "/api/v1/reports/page?feedID=" + eth + "&startTimestamp=" + ts(now) + "&limit=", c: org, status: 400, body: "limit"},
		{name: "discovery bad hidden", target: "/api/v1/discovery?hidden=maybe", status: 400, body: "hidden"},
		{name: "discovery bad date", target: "/api/v1/discovery?created_after=2024-1-1", status: 400, body: "created_after"},
		{name: "feeds bad hidden", target: "/api/v1/feeds?hidden=2", c: org, status: 400, body: "hidden"},

		// 401.
		{name: "unknown key", target: "/api/v1/reports/latest?feedID=" + eth, c: &creds{"3c1e5f7a-0000-4000-8000-000000000000", "x"}, status: 401},
		{name: "bad signature", target: "/api/v1/reports/latest?feedID=" + eth, c: &creds{OrgKeyID, "wrong secret"}, status: 401, body: "signature"},
		{name: "signature of another target", target: "/api/v1/reports/latest?feedID=" + eth, c: org,
			mutate: func(r *http.Request) { r.URL.RawQuery = "feedID=" + btc }, status: 401, body: "signature"},
		{name: "timestamp too old", target: "/api/v1/reports/latest?feedID=" + eth, c: org, mutate: sig(org, t0.Add(-6*time.Second)), status: 401, body: "skew"},
		{name: "timestamp in the future", target: "/api/v1/reports/latest?feedID=" + eth, c: org, mutate: sig(org, t0.Add(6*time.Second)), status: 401, body: "skew"},
		{name: "stream the key may not read", target: "/api/v1/reports/latest?feedID=" + sol, c: restricted, status: 401},
		{name: "hidden stream not entitled", target: "/api/v1/reports/latest?feedID=" + hype, c: restricted, status: 401},
		{name: "unknown stream", target: "/api/v1/reports/latest?feedID=" + unknown, c: org, status: 401},
		{name: "bulk with one forbidden stream", target: "/api/v1/reports/bulk?feedIDs=" + eth + "," + sol + "&timestamp=" + ts(now-5), c: restricted, status: 401},
		{name: "page of unknown stream", target: "/api/v1/reports/page?feedID=" + unknown + "&startTimestamp=" + ts(now), c: org, status: 401},
		{name: "discovery bad signature", target: "/api/v1/discovery", c: &creds{OrgKeyID, "wrong"}, status: 401},
		{name: "testnet-only stream on mainnet", target: "/api/v1/reports/latest?feedID=" + findStream(t, e.sim, Testnet, "PEPE/USD-RefPrice-DS-Premium-Global-003"), c: org, status: 401},

		// 404.
		{name: "report before the window", target: "/api/v1/reports?feedID=" + eth + "&timestamp=" + ts(now-86401), c: org, status: 404, body: "no report"},
		{name: "report in the future", target: "/api/v1/reports?feedID=" + eth + "&timestamp=" + ts(now+1), c: org, status: 404, body: "no report"},
		{name: "report not yet published", target: "/api/v1/reports?feedID=" + buidl + "&timestamp=" + ts(now), c: org, status: 404},
		{name: "latest of a decommissioned stream", target: "/api/v1/reports/latest?feedID=" + matic, c: org, status: 404},
		{name: "unknown path", target: "/api/v1/nothing", status: 404},
		{name: "unknown path under reports", target: "/api/v1/reports/", c: org, status: 404},

		// 405, 426.
		{name: "POST reports", method: http.MethodPost, target: "/api/v1/reports/latest?feedID=" + eth, c: org, status: 405},
		{name: "PUT discovery", method: http.MethodPut, target: "/api/v1/discovery", status: 405},
		{name: "DELETE /", method: http.MethodDelete, target: "/", status: 405},
		{name: "websocket without the upgrade headers", target: "/api/v1/ws?feedIDs=" + eth, c: org, status: 426},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := e.request(t, Mainnet, tc.target, tc.c)
			if tc.method != "" {
				req.Method = tc.method
				if tc.c != nil {
					auth.Sign(req, tc.c.id, []byte(tc.c.secret), t0)
				}
			}
			if tc.mutate != nil {
				tc.mutate(req)
			}
			resp, body := e.do(t, req)
			require.Equal(t, tc.status, resp.StatusCode, string(body))
			if resp.Request.Method == http.MethodHead {
				return
			}
			assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			if tc.status >= 400 {
				errBody := decode[map[string]string](t, body)
				assert.NotEmpty(t, errBody["error"])
				if strings.HasPrefix(tc.target, "/api/v1/discovery") {
					assert.Len(t, errBody, 1, "catalog errors carry only error")
				} else {
					assert.Equal(t, errBody["error"], errBody["message"])
				}
				assert.Contains(t, errBody["error"], tc.body)
			}
			if tc.status == 405 {
				assert.NotEmpty(t, resp.Header.Get("Allow"))
			}
		})
	}
}

func TestHeadRoot(t *testing.T) {
	head := func(e *env, c *creds) (*http.Response, []byte) {
		req := e.request(t, Testnet, "/", nil)
		req.Method = http.MethodHead
		if c != nil {
			auth.Sign(req, c.id, []byte(c.secret), e.now())
		}
		return e.do(t, req)
	}

	// Without HA, no origin is advertised: the clients use one connection.
	e := newEnv(t, nil)
	for _, c := range []*creds{nil, org} {
		resp, body := head(e, c)
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		_, advertised := resp.Header[OriginsHeader]
		assert.False(t, advertised)
		assert.Empty(t, body)
	}

	e = newEnv(t, func(c *Config) { c.HAOrigins = []string{"001", "002"} })
	for _, c := range []*creds{nil, org} {
		resp, body := head(e, c)
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Equal(t, OriginsValue, resp.Header.Get("X-Cll-Available-Origins"))
		assert.Empty(t, body)
	}
	// Credentials, when sent, are checked.
	resp, _ := head(e, &creds{OrgKeyID, "wrong secret"})
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	assert.Empty(t, resp.Header.Get(OriginsHeader))
}

// TestHeadRootVector signs HEAD / as the official clients do, with the
// test vector of the WebSocket notes.
func TestHeadRootVector(t *testing.T) {
	const sig = "cd40b153da894b865b4a6ef422127ca86f50323d3491126bf809eff01944992e"
	require.Equal(t, sig, auth.SignatureHex([]byte("userSecret"), http.MethodHead, "/", auth.EmptyBodyHash, "clientId", "1718885772000"))
	e := newEnv(t, func(c *Config) {
		c.Now = func() time.Time { return time.UnixMilli(1718885772000) }
		c.Keys = append(c.Keys, Key{ID: "clientId", Secret: "userSecret"})
		c.HAOrigins = []string{"001", "002"}
	})
	req := e.request(t, Mainnet, "/", nil)
	req.Method = http.MethodHead
	req.Header.Set(auth.HeaderAuthorization, "clientId")
	req.Header.Set(auth.HeaderTimestamp, "1718885772000")
	req.Header.Set(auth.HeaderSignature, sig)
	resp, _ := e.do(t, req)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "{001,002}", resp.Header.Get(OriginsHeader))
}

// discover returns the feed IDs of a discovery response.
func discover(t *testing.T, e *env, network, query string, c *creds) ([]string, *http.Response, []byte) {
	t.Helper()
	resp, body := e.get(t, network, "/api/v1/discovery"+query, c)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	var out []string
	for _, s := range decode[catalog.FeedsResponse](t, body).Feeds {
		out = append(out, s.FeedID)
	}
	return out, resp, body
}

func TestDiscovery(t *testing.T) {
	e := newEnv(t, nil)
	hidden := e.sim.Hidden(Mainnet)
	require.NotEmpty(t, hidden)
	var public []string
	for _, s := range e.sim.Streams(Mainnet) {
		if !slices.Contains(hidden, s.FeedID) {
			public = append(public, s.FeedID)
		}
	}

	tests := []struct {
		name  string
		query string
		c     *creds
		want  []string
	}{
		{"anonymous sees the public listing", "", nil, public},
		{"anonymous cannot widen with hidden=true", "?hidden=true", nil, public},
		{"organisation key without hidden", "", org, public},
		{"organisation key with hidden=true", "?hidden=true", org, slices.Sorted(slices.Values(append(slices.Clone(public), hidden...)))},
		{"organisation key with hidden=false", "?hidden=false", org, public},
		{"restricted key has no hidden entitlement", "?hidden=TRUE", restricted, public},
		{"a filter that matches nothing", "?base_asset=NOPE", nil, nil},
		{"a network_type of the other network", "?network_type=testnet", nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, resp, body := discover(t, e, Mainnet, tc.query, tc.c)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, "public, max-age=300", resp.Header.Get("Cache-Control"))
			if tc.want == nil {
				assert.JSONEq(t, `{"feeds":[]}`, string(body))
			}
		})
	}

	t.Run("filters agree with the catalog package", func(t *testing.T) {
		for _, q := range []string{
			"?asset_class=crypto&status=testing",
			"?feed_type=Crypto-DEX,forex",
			"?created_after=2023-06-30&created_before=2024-07-01",
			"?expected_decommission_after=2026-01-01",
			"?decommissioned_before=2025-01-01",
			"?attribute_type=ExchangeRate&hidden=true",
		} {
			values, err := url.ParseQuery(q[1:])
			require.NoError(t, err)
			f, err := catalog.ParseFilter(values)
			require.NoError(t, err)
			var want []string
			for _, s := range e.sim.Streams(Mainnet) {
				if (!slices.Contains(hidden, s.FeedID) || f.Hidden) && f.Match(&s) {
					want = append(want, s.FeedID)
				}
			}
			require.NotEmpty(t, want, q)
			got, _, _ := discover(t, e, Mainnet, q, org)
			assert.Equal(t, want, got, q)
		}
	})

	t.Run("records are the full stream records", func(t *testing.T) {
		_, _, body := discover(t, e, Testnet, "", nil)
		feeds := decode[catalog.FeedsResponse](t, body).Feeds
		require.NotEmpty(t, feeds)
		byID := map[string]catalog.Stream{}
		for _, s := range e.sim.Streams(Testnet) {
			byID[s.FeedID] = s
		}
		for _, f := range feeds {
			assert.Equal(t, byID[f.FeedID], f)
			assert.Equal(t, Testnet, f.NetworkType)
		}
		assert.Contains(t, string(body), `"decommissionedAt":null`)
	})
}

func TestFeedsEndpoint(t *testing.T) {
	e := newEnv(t, nil)
	ids := func(body []byte) []string {
		var out []string
		for _, f := range decode[catalog.FeedRefsResponse](t, body).Feeds {
			out = append(out, f.FeedID)
		}
		return out
	}
	hidden := e.sim.Hidden(Testnet)
	var public, all []string
	for _, s := range e.sim.Streams(Testnet) {
		all = append(all, s.FeedID)
		if !slices.Contains(hidden, s.FeedID) {
			public = append(public, s.FeedID)
		}
	}

	resp, body := e.get(t, Testnet, "/api/v1/feeds", org)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.True(t, bytes.HasPrefix(body, []byte(`{"feeds":[{"feedID":"0x`)), string(body[:40]))
	assert.Equal(t, public, ids(body))

	_, body = e.get(t, Testnet, "/api/v1/feeds?hidden=true", org)
	assert.Equal(t, all, ids(body))

	_, body = e.get(t, Testnet, "/api/v1/feeds?hidden=true", restricted)
	assert.Equal(t, slices.Sorted(slices.Values(RestrictedStreams())), ids(body))
}

func TestReportEndpoints(t *testing.T) {
	e := newEnv(t, nil)
	eth := findStream(t, e.sim, Mainnet, nameETH)
	buidl := findStream(t, e.sim, Mainnet, nameBUIDL)
	now := t0.Unix()

	t.Run("report", func(t *testing.T) {
		resp, body := e.get(t, Mainnet, "/api/v1/reports?feedID="+eth+"&timestamp="+ts(now-42), org)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		// Timestamps are JSON numbers.
		assert.Contains(t, string(body), `"validFromTimestamp":`+ts(now-42)+`,"observationsTimestamp":`+ts(now-42))
		r := decode[reportEnvelope](t, body).Report
		require.NotNil(t, r)
		assert.Equal(t, mustReport(t, e.sim, Mainnet, eth, now-42), *r)
		assert.Equal(t, eth, r.FeedID)
		f := decodeReport(t, *r)
		assert.Equal(t, uint32(now-42), f.ObservationsTimestamp)
		assert.Equal(t, eth, "0x"+fmt.Sprintf("%x", f.FeedID[:]))
	})

	t.Run("latest is at now minus the stream's delay", func(t *testing.T) {
		_, body := e.get(t, Mainnet, "/api/v1/reports/latest?feedID="+eth, org)
		assert.Equal(t, now, decode[reportEnvelope](t, body).Report.ObservationsTimestamp)

		first, last, ok := e.sim.Window(Mainnet, buidl)
		require.True(t, ok)
		assert.Equal(t, now-86400, first)
		assert.Less(t, last, now, "a Datalink stream lags")
		_, body = e.get(t, Mainnet, "/api/v1/reports/latest?feedID="+buidl, org)
		assert.Equal(t, last, decode[reportEnvelope](t, body).Report.ObservationsTimestamp)
	})
}

func TestBulk(t *testing.T) {
	e := newEnv(t, nil)
	eth := findStream(t, e.sim, Mainnet, nameETH)
	btc := findStream(t, e.sim, Mainnet, nameBTC)
	buidl := findStream(t, e.sim, Mainnet, nameBUIDL)
	matic := findStream(t, e.sim, Mainnet, nameMATIC)
	at := ts(t0.Unix() - 30)

	feedsOf := func(body []byte) []string {
		var out []string
		for _, r := range decode[reportsEnvelope](t, body).Reports {
			out = append(out, r.FeedID)
		}
		return out
	}

	t.Run("raw comma and %2C give the same answer", func(t *testing.T) {
		r1, b1 := e.get(t, Mainnet, "/api/v1/reports/bulk?feedIDs="+btc+","+eth+"&timestamp="+at, org)
		r2, b2 := e.get(t, Mainnet, "/api/v1/reports/bulk?feedIDs="+btc+"%2C"+eth+"&timestamp="+at, org)
		r3, b3 := e.get(t, Mainnet, "/api/v1/reports/bulk?feedIDs="+btc+"%2c"+eth+"&timestamp="+at, org)
		for _, r := range []*http.Response{r1, r2, r3} {
			assert.Equal(t, http.StatusOK, r.StatusCode)
		}
		assert.Equal(t, b1, b2)
		assert.Equal(t, b1, b3)
		assert.Equal(t, []string{btc, eth}, feedsOf(b1), "order requested")
	})

	t.Run("duplicates answered once", func(t *testing.T) {
		_, b := e.get(t, Mainnet, "/api/v1/reports/bulk?feedIDs="+eth+","+btc+","+eth+",0x"+strings.ToUpper(eth[2:])+"&timestamp="+at, org)
		assert.Equal(t, []string{eth, btc}, feedsOf(b))
	})

	t.Run("206 leaves out what is not yet published", func(t *testing.T) {
		r, b := e.get(t, Mainnet, "/api/v1/reports/bulk?feedIDs="+buidl+","+eth+"&timestamp="+ts(t0.Unix()), org)
		assert.Equal(t, http.StatusPartialContent, r.StatusCode)
		assert.Equal(t, []string{eth}, feedsOf(b))
	})

	t.Run("nothing available is 206 with an empty list", func(t *testing.T) {
		r, b := e.get(t, Mainnet, "/api/v1/reports/bulk?feedIDs="+matic+"&timestamp="+at, org)
		assert.Equal(t, http.StatusPartialContent, r.StatusCode)
		assert.JSONEq(t, `{"reports":[]}`, string(b))
	})

	t.Run("a cap on stream IDs", func(t *testing.T) {
		e := newEnv(t, func(c *Config) { c.MaxBulkFeeds = 1 })
		r, _ := e.get(t, Mainnet, "/api/v1/reports/bulk?feedIDs="+eth+"&timestamp="+at, org)
		assert.Equal(t, http.StatusOK, r.StatusCode)
		r, b := e.get(t, Mainnet, "/api/v1/reports/bulk?feedIDs="+eth+","+btc+"&timestamp="+at, org)
		assert.Equal(t, http.StatusBadRequest, r.StatusCode)
		assert.Contains(t, string(b), "too many")
	})
}

func TestPage(t *testing.T) {
	e := newEnv(t, nil)
	eth := findStream(t, e.sim, Mainnet, nameETH)
	buidl := findStream(t, e.sim, Mainnet, nameBUIDL)
	now := t0.Unix()

	page := func(feed string, start int64, limit string) []int64 {
		target := "/api/v1/reports/page?feedID=" + feed + "&startTimestamp=" + ts(start)
		if limit != "" {
			target += "&limit=" + limit
		}
		resp, body := e.get(t, Mainnet, target, org)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		require.Contains(t, string(body), `"reports":[`, "never null")
		var out []int64
		for _, r := range decode[reportsEnvelope](t, body).Reports {
			assert.Equal(t, feed, r.FeedID)
			out = append(out, r.ObservationsTimestamp)
		}
		return out
	}
	seq := func(from, n int64) []int64 {
		var out []int64
		for i := range n {
			out = append(out, from+i)
		}
		return out
	}

	tests := []struct {
		name  string
		feed  string
		start int64
		limit string
		want  []int64
	}{
		{"default limit is 10, ascending from start inclusive", eth, now - 500, "", seq(now-500, 10)},
		{"explicit limit", eth, now - 500, "3", seq(now-500, 3)},
		{"limit above 100 is clamped", eth, now - 500, "150", seq(now-500, 100)},
		{"limit 100", eth, now - 500, "100", seq(now-500, 100)},
		{"start before the window begins at its first report", eth, 0, "2", seq(now-86400, 2)},
		{"the page stops at the newest report", eth, now - 2, "10", seq(now-2, 3)},
		{"the page stops at the publication point", buidl, now - 5, "10", seq(now-5, 6-(now-mustLast(t, e, buidl)))},
		{"nothing at or after start", eth, now + 1, "", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, page(tc.feed, tc.start, tc.limit))
		})
	}

	t.Run("next page starts after the last", func(t *testing.T) {
		first := page(eth, now-50, "5")
		second := page(eth, first[len(first)-1]+1, "5")
		assert.Equal(t, seq(now-50, 10), append(first, second...))
	})
}

func mustLast(t *testing.T, e *env, feed string) int64 {
	_, last, ok := e.sim.Window(Mainnet, feed)
	require.True(t, ok)
	return last
}

func TestDeterminism(t *testing.T) {
	a, b := newEnv(t, nil), newEnv(t, nil)
	eth := findStream(t, a.sim, Testnet, nameETH)
	for _, target := range []string{
		"/api/v1/discovery?hidden=true",
		"/api/v1/feeds",
		"/api/v1/reports/latest?feedID=" + eth,
		"/api/v1/reports/page?feedID=" + eth + "&startTimestamp=" + ts(t0.Unix()-1000) + "&limit=100",
		"/api/v1/reports/bulk?feedIDs=" + eth + "&timestamp=" + ts(t0.Unix()-7),
	} {
		_, ba := a.get(t, Testnet, target, org)
		_, bb := b.get(t, Testnet, target, org)
		assert.Equal(t, ba, bb, target)
		assert.Greater(t, len(ba), 20)
	}
	// The same report again, from the memo or not, is the same.
	r1 := mustReport(t, a.sim, Testnet, eth, t0.Unix()-3)
	for i := range cacheSlots + 1 { // push it out of the memo
		mustReport(t, a.sim, Testnet, eth, t0.Unix()-10000-int64(i))
	}
	assert.Equal(t, r1, mustReport(t, a.sim, Testnet, eth, t0.Unix()-3))
	assert.NotEqual(t, r1, mustReport(t, a.sim, Testnet, eth, t0.Unix()-4))
}

func TestRateLimit(t *testing.T) {
	clk := clockwork.NewFakeClockAt(t0)
	e := newEnv(t, func(c *Config) { c.RateLimit, c.Burst, c.Now = 10, 10, clk.Now })
	eth := findStream(t, e.sim, Mainnet, nameETH)
	latest := "/api/v1/reports/latest?feedID=" + eth

	for i := range 10 {
		resp, _ := e.get(t, Mainnet, latest, org)
		require.Equal(t, http.StatusOK, resp.StatusCode, "request %d", i)
	}
	resp, body := e.get(t, Mainnet, latest, org)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))
	assert.Contains(t, string(body), `"message":"rate limit exceeded"`)

	// Per endpoint, per key, per network; anonymous catalog requests are
	// not limited.
	resp, _ = e.get(t, Mainnet, "/api/v1/reports/page?feedID="+eth+"&startTimestamp="+ts(t0.Unix()-5), org)
	assert.Equal(t, http.StatusOK, resp.StatusCode, "another endpoint")
	resp, _ = e.get(t, Mainnet, latest, restricted)
	assert.Equal(t, http.StatusOK, resp.StatusCode, "another key")
	resp, _ = e.get(t, Testnet, latest, org)
	assert.Equal(t, http.StatusOK, resp.StatusCode, "another network")
	for range 20 {
		resp, _ = e.get(t, Mainnet, "/api/v1/discovery", nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, "anonymous catalog")
	}

	// Tokens come back with time.
	clk.Advance(time.Second)
	for i := range 10 {
		resp, _ := e.get(t, Mainnet, latest, org)
		require.Equal(t, http.StatusOK, resp.StatusCode, "request %d after a second", i)
	}
	resp, _ = e.get(t, Mainnet, latest, org)
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
}

func TestHandlerPanicsOnUnknownNetwork(t *testing.T) {
	s := newTestSim(t, nil)
	assert.PanicsWithValue(t, `simulator: unknown network "devnet" (want "mainnet" or "testnet")`, func() { s.Handler("devnet") })
}

// FuzzQuery sends arbitrary queries, signed, to every endpoint: the
// handler never panics, answers one of the documented statuses, and
// always with JSON.
func FuzzQuery(f *testing.F) {
	s := newTestSim(f, nil)
	h := s.Handler(Mainnet)
	eth := findStream(f, s, Mainnet, nameETH)
	for _, seed := range []string{
		"feedID=" + eth, "feedID=" + eth + "&timestamp=" + ts(t0.Unix()-5),
		"feedIDs=" + eth + "%2C" + eth + "&timestamp=1", "feedID=" + eth + "&startTimestamp=0&limit=1000",
		"hidden=TRUE&created_after=2024-01-01", "feedID=0x&timestamp=-1", "limit=%zz",
	} {
		for i := range 5 {
			f.Add(uint8(i), seed)
		}
	}
	paths := []string{EndpointDiscovery, EndpointFeeds, EndpointReport, EndpointLatest, EndpointBulk, EndpointPage}
	allowed := map[int]bool{200: true, 206: true, 400: true, 401: true, 404: true}
	f.Fuzz(func(t *testing.T, which uint8, query string) {
		target := paths[int(which)%len(paths)] + "?" + query
		req, err := http.NewRequest(http.MethodGet, "http://sim"+target, nil)
		if err != nil {
			return
		}
		req.RequestURI = req.URL.RequestURI()
		auth.Sign(req, OrgKeyID, []byte(OrgKeySecret), t0)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if !allowed[w.Code] {
			t.Fatalf("%s: status %d", target, w.Code)
		}
		if !json.Valid(w.Body.Bytes()) {
			t.Fatalf("%s: body is not JSON: %q", target, w.Body.String())
		}
	})
}

// TestRateModes: each counting mode, on a settable clock, accepts and
// refuses what it says. The same ten requests at 100 ms intervals fit
// every mode; what tells them apart is a burst, and where a second begins.
func TestRateModes(t *testing.T) {
	second := t0 // a whole second
	type req struct {
		at   time.Duration // from second
		want int
	}
	tests := []struct {
		name  string
		mode  RateMode
		burst int
		reqs  []req
	}{
		{name: "bucket burst 1 refuses two requests closer than 1/rate", mode: RateBucket, burst: 1, reqs: []req{
			{0, 200}, {99 * time.Millisecond, 429}, {100 * time.Millisecond, 200}, {250 * time.Millisecond, 200}, {300 * time.Millisecond, 429},
		}},
		{name: "bucket burst 10 takes ten at once", mode: RateBucket, burst: 10, reqs: []req{
			{0, 200}, {0, 200}, {0, 200}, {0, 200}, {0, 200}, {0, 200}, {0, 200}, {0, 200}, {0, 200}, {0, 200}, {0, 429},
			{100 * time.Millisecond, 200}, {100 * time.Millisecond, 429},
		}},
		{name: "calendar takes ten at once and ten more in the next second", mode: RateCalendar, reqs: []req{
			{900 * time.Millisecond, 200}, {900 * time.Millisecond, 200}, {900 * time.Millisecond, 200}, {900 * time.Millisecond, 200}, {900 * time.Millisecond, 200},
			{900 * time.Millisecond, 200}, {900 * time.Millisecond, 200}, {900 * time.Millisecond, 200}, {900 * time.Millisecond, 200}, {999 * time.Millisecond, 200},
			{999 * time.Millisecond, 429},
			{time.Second, 200}, {time.Second, 200},
		}},
		{name: "sliding counts the second before each request", mode: RateSliding, reqs: []req{
			{900 * time.Millisecond, 200}, {900 * time.Millisecond, 200}, {900 * time.Millisecond, 200}, {900 * time.Millisecond, 200}, {900 * time.Millisecond, 200},
			{900 * time.Millisecond, 200}, {900 * time.Millisecond, 200}, {900 * time.Millisecond, 200}, {900 * time.Millisecond, 200}, {999 * time.Millisecond, 200},
			// A calendar counter would take this one.
			{1100 * time.Millisecond, 429},
			// Those of 0.9 s are a second old at 1.9 s.
			{1899 * time.Millisecond, 429}, {1900 * time.Millisecond, 200}, {1900 * time.Millisecond, 200},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := clockwork.NewFakeClockAt(second)
			e := newEnv(t, func(c *Config) { c.RateLimit, c.RateMode, c.Burst, c.Now = 10, tc.mode, tc.burst, clk.Now })
			eth := findStream(t, e.sim, Mainnet, nameETH)
			latest := "/api/v1/reports/latest?feedID=" + eth
			for i, r := range tc.reqs {
				clk.Advance(second.Add(r.at).Sub(clk.Now()))
				resp, _ := e.get(t, Mainnet, latest, org)
				require.Equal(t, r.want, resp.StatusCode, "request %d at +%v", i, r.at)
			}
		})
	}
}

func TestParseRateMode(t *testing.T) {
	for _, m := range []RateMode{RateBucket, RateCalendar, RateSliding} {
		got, err := ParseRateMode(m.String())
		require.NoError(t, err)
		assert.Equal(t, m, got)
	}
	_, err := ParseRateMode("leaky")
	assert.Error(t, err)
	_, err = New(Config{RateMode: RateMode(7)})
	assert.ErrorContains(t, err, "RateMode(7)")
}
