package proxy_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/cache"
	"streamgate/config"
	"streamgate/server/servertest"
	"streamgate/upstreamsim"
)

// fakeClock is a settable clock for the gateway and its cache.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Now().UnixNano())
	return c
}

func (c *fakeClock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

// noReplay turns replay protection off: requests signed with a fake clock,
// or many identical ones sent at once, carry identical signatures.
func noReplay(c *config.Config)              { c.Auth.ReplayProtection = false }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// recorder keeps the request targets the upstream received.
type recorder struct {
	mu      sync.Mutex
	targets []string
}

func (rec *recorder) wrap(_ string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.mu.Lock()
		rec.targets = append(rec.targets, r.RequestURI)
		rec.mu.Unlock()
		h.ServeHTTP(w, r)
	})
}

func (rec *recorder) matching(prefix string) []string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var out []string
	for _, t := range rec.targets {
		if strings.HasPrefix(t, prefix) {
			out = append(out, t)
		}
	}
	return out
}

func TestCatalogFetchedOncePerView(t *testing.T) {
	clock := newFakeClock()
	env := servertest.Start(t, servertest.Options{Now: clock.Now, Config: noReplay})
	demo, research := servertest.Demo(), servertest.Research()
	demo.Now, research.Now = clock.Now, clock.Now
	anon := &servertest.Client{HTTP: http.DefaultClient}

	queries := []string{"", "?asset_class=Crypto", "?status=live&base_asset=btc,ETH", "?created_after=2023-01-01", "?feed_type=nope"}
	for _, q := range queries {
		for _, c := range []*servertest.Client{demo, anon} {
			resp, body := c.Get(t, env.Mainnet, "/api/v1/discovery"+q)
			require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		}
		resp, _ := demo.Get(t, env.Mainnet, "/api/v1/discovery?hidden=true&"+strings.TrimPrefix(q, "?"))
		require.Equal(t, http.StatusOK, resp.StatusCode)
		resp, _ = research.Get(t, env.Testnet, "/api/v1/discovery"+q)
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	resp, _ := demo.Get(t, env.Mainnet, "/api/v1/feeds")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	counts := env.Sim.Counters()
	// Three views on mainnet (anonymous, signed, hidden), one used on
	// testnet; the organisation's hidden view of each network was loaded
	// by the warm-up at start, before the counters were reset.
	assert.Equal(t, int64(2), counts.ByEndpoint(upstreamsim.Mainnet, upstreamsim.EndpointDiscovery))
	assert.Equal(t, int64(1), counts.ByEndpoint(upstreamsim.Testnet, upstreamsim.EndpointDiscovery))

	// Max-age counts down with the view's age.
	clock.Advance(100 * time.Second)
	resp, _ = demo.Get(t, env.Mainnet, "/api/v1/discovery")
	assert.Equal(t, "private, max-age=200", resp.Header.Get("Cache-Control"))
	assert.Equal(t, "HIT", resp.Header.Get("X-Cache"))
	assert.Equal(t, "100", resp.Header.Get("Age"))

	// From 80 % of the lifetime a refresh runs in the background; the client
	// still gets its answer at once, inside the lifetime.
	clock.Advance(150 * time.Second)
	resp, _ = demo.Get(t, env.Mainnet, "/api/v1/discovery")
	assert.Equal(t, "HIT", resp.Header.Get("X-Cache"))
	assert.Equal(t, "private, max-age=50", resp.Header.Get("Cache-Control"))
	require.Eventually(t, func() bool {
		return env.Sim.Counters().ByEndpoint(upstreamsim.Mainnet, upstreamsim.EndpointDiscovery) == 3
	}, 5*time.Second, 10*time.Millisecond, "one background refresh")
	require.Eventually(t, func() bool {
		env.Cache.Wait()
		resp, _ = demo.Get(t, env.Mainnet, "/api/v1/discovery")
		return resp.Header.Get("Cache-Control") == "private, max-age=300"
	}, 5*time.Second, 10*time.Millisecond, "the refreshed view has a new lifetime")
	assert.Equal(t, int64(3), env.Sim.Counters().ByEndpoint(upstreamsim.Mainnet, upstreamsim.EndpointDiscovery), "and no further fetch")
}

func TestCatalogStaleIfError(t *testing.T) {
	clock := newFakeClock()
	env := servertest.Start(t, servertest.Options{Now: clock.Now, Config: noReplay, Quiet: true})
	demo := servertest.Demo()
	demo.Now = clock.Now
	resp, body := demo.Get(t, env.Mainnet, "/api/v1/discovery?asset_class=Forex")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Eventually(t, func() bool { // the fill has retired
		resp, _ := demo.Get(t, env.Mainnet, "/api/v1/discovery?asset_class=Forex")
		return resp.Header.Get("X-Cache") == "HIT"
	}, 5*time.Second, 10*time.Millisecond)

	require.NoError(t, env.Sim.SetFaults(upstreamsim.Faults{ErrorRate: 1}))
	clock.Advance(10 * time.Minute)
	resp, stale := demo.Get(t, env.Mainnet, "/api/v1/discovery?asset_class=Forex")
	require.Equal(t, http.StatusOK, resp.StatusCode, "the last good copy is served while the upstream fails")
	assert.Equal(t, "STALE", resp.Header.Get("X-Cache"))
	assert.NotEmpty(t, resp.Header.Get("Warning"))
	assert.Equal(t, "private, max-age=0", resp.Header.Get("Cache-Control"))
	assert.JSONEq(t, string(body), string(stale))
}

func TestLatestCoalesced(t *testing.T) {
	env := servertest.Start(t, servertest.Options{
		Sim:    func(c *upstreamsim.Config) { c.Faults = upstreamsim.Faults{Latency: 150 * time.Millisecond} },
		Config: func(c *config.Config) { c.Cache.LatestTTL = time.Minute; noReplay(c) },
	})
	demo := servertest.Demo()
	feed := env.FeedID(t, upstreamsim.Mainnet, "ETH", "USD", "V3")
	resp, _ := demo.Get(t, env.Mainnet, "/api/v1/discovery?hidden=true") // catalog loaded first
	require.Equal(t, http.StatusOK, resp.StatusCode)

	const clients = 60
	var wg sync.WaitGroup
	labels := make([]string, clients)
	bodies := make([]string, clients)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, body := demo.Get(t, env.Mainnet, "/api/v1/reports/latest?feedID="+feed)
			assert.Equal(t, http.StatusOK, resp.StatusCode, string(body))
			labels[i], bodies[i] = resp.Header.Get("X-Cache"), string(body)
		}()
	}
	wg.Wait()
	assert.Equal(t, int64(1), env.Sim.Counters().ByEndpoint(upstreamsim.Mainnet, upstreamsim.EndpointLatest), "one upstream call for all")
	for i := range clients {
		assert.Contains(t, []string{"MISS", "COALESCED", "HIT"}, labels[i])
		assert.Equal(t, bodies[0], bodies[i], "everyone gets the same report")
	}
	assert.Contains(t, labels, "COALESCED")
	assert.Equal(t, 1, strings.Count(strings.Join(labels, " "), "MISS"))

	// The latest report is also the report at its own timestamp.
	var rb reportBody
	require.NoError(t, json.Unmarshal([]byte(bodies[0]), &rb))
	resp, body := demo.Get(t, env.Mainnet, "/api/v1/reports?feedID="+feed+"&timestamp="+strconv.FormatInt(rb.Report.ObservationsTimestamp, 10))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "HIT", resp.Header.Get("X-Cache"))
	assert.JSONEq(t, bodies[0], string(body))
	assert.Zero(t, env.Sim.Counters().ByEndpoint(upstreamsim.Mainnet, upstreamsim.EndpointReport))
}

func TestLatestExpires(t *testing.T) {
	clock := newFakeClock()
	env := servertest.Start(t, servertest.Options{Now: clock.Now, Config: func(c *config.Config) {
		noReplay(c)
		c.Realtime.LatestFromStream = false // the cache alone: polling does not subscribe the stream
	}})
	demo := servertest.Demo()
	demo.Now = clock.Now
	feed := env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
	get := func() string {
		resp, body := demo.Get(t, env.Mainnet, "/api/v1/reports/latest?feedID="+feed)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		return resp.Header.Get("X-Cache")
	}
	assert.Equal(t, "MISS", get())
	env.Cache.Wait()
	clock.Advance(400 * time.Millisecond)
	assert.Equal(t, "HIT", get(), "within latest_ttl (500ms)")
	clock.Advance(200 * time.Millisecond)
	assert.Equal(t, "STALE", get(), "after latest_ttl: answered at once while the refresh is scheduled")
	require.Eventually(t, func() bool {
		return env.Sim.Counters().ByEndpoint(upstreamsim.Mainnet, upstreamsim.EndpointLatest) == 2
	}, 10*time.Second, 10*time.Millisecond, "one refresh")
	// The refresh is counted when the upstream answers, a moment before
	// its entry is stored.
	require.Eventually(t, func() bool {
		env.Cache.Wait()
		_, st := env.Cache.Get(cache.LatestKey(upstreamsim.Mainnet, "", feed))
		return st == cache.Fresh
	}, 10*time.Second, 10*time.Millisecond, "the refresh stored")
	assert.Equal(t, "HIT", get(), "refreshed")
	clock.Advance(5 * time.Second)
	assert.Equal(t, "MISS", get(), "past latest_ttl and latest_max_stale (3s) nothing is held: the request waits")
	assert.Equal(t, int64(3), env.Sim.Counters().ByEndpoint(upstreamsim.Mainnet, upstreamsim.EndpointLatest))
}

func TestWaiterGivingUpDoesNotCancelTheFill(t *testing.T) {
	env := servertest.Start(t, servertest.Options{
		Sim:   func(c *upstreamsim.Config) { c.Faults = upstreamsim.Faults{Latency: 300 * time.Millisecond} },
		Quiet: true,
	})
	demo := servertest.Demo()
	resp, _ := demo.Get(t, env.Mainnet, "/api/v1/discovery?hidden=true")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	feed := env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
	target := "/api/v1/reports?feedID=" + feed + "&timestamp=" + strconv.FormatInt(pastTS(), 10)

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req, err := demo.Request(ctx, env.Mainnet, target)
	require.NoError(t, err)
	_, err = http.DefaultClient.Do(req)
	require.Error(t, err, "the client gave up")

	require.Eventually(t, func() bool {
		env.Cache.Wait()
		resp, _ := demo.Get(t, env.Mainnet, target)
		return resp.StatusCode == http.StatusOK && resp.Header.Get("X-Cache") == "HIT"
	}, 5*time.Second, 50*time.Millisecond, "the fill went on and filled the cache")
	assert.Equal(t, int64(1), env.Sim.Counters().ByEndpoint(upstreamsim.Mainnet, upstreamsim.EndpointReport))
}

func TestBulkFanOut(t *testing.T) {
	rec := &recorder{}
	env := servertest.Start(t, servertest.Options{
		Upstream: rec.wrap,
		Config: func(c *config.Config) {
			c.Networks["mainnet"].Upstream.MaxBulk = 2
		},
	})
	demo := servertest.Demo()
	var feeds []string
	for _, s := range env.Sim.Streams(upstreamsim.Mainnet) {
		if s.AssetClass == "Crypto" && s.Status == "live" && s.DecommissionedAt == nil && len(feeds) < 9 {
			if _, _, ok := env.Sim.Window(upstreamsim.Mainnet, s.FeedID); ok {
				feeds = append(feeds, s.FeedID)
			}
		}
	}
	require.Len(t, feeds, 9)
	ts := strconv.FormatInt(pastTS(), 10)
	// Four streams are cached through /reports.
	for _, f := range feeds[:4] {
		resp, _ := demo.Get(t, env.Mainnet, "/api/v1/reports?feedID="+f+"&timestamp="+ts)
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	env.Cache.Wait()

	resp, body := demo.Get(t, env.Mainnet, "/api/v1/reports/bulk?feedIDs="+strings.Join(feeds, ",")+"&timestamp="+ts)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	assert.Equal(t, "4/9", resp.Header.Get("X-Cache-Hits"))
	var rb reportsBody
	require.NoError(t, json.Unmarshal(body, &rb))
	require.Len(t, rb.Reports, 9)
	for i, r := range rb.Reports {
		assert.Equal(t, feeds[i], r.FeedID, "in the order asked")
		want, _ := env.Sim.Report(upstreamsim.Mainnet, feeds[i], pastTSFrom(ts))
		assert.Equal(t, want.FullReport, r.FullReport)
	}
	calls := rec.matching("/api/v1/reports/bulk")
	require.Len(t, calls, 3, "five missing streams in chunks of two")
	var asked []string
	for _, c := range calls {
		u, err := url.Parse(c)
		require.NoError(t, err)
		asked = append(asked, strings.Split(u.Query().Get("feedIDs"), ",")...)
	}
	assert.ElementsMatch(t, feeds[4:], asked, "only the missing streams go upstream")

	// Now all nine are cached, for bulk and for /reports alike.
	env.Cache.Wait()
	resp, _ = demo.Get(t, env.Mainnet, "/api/v1/reports/bulk?feedIDs="+strings.Join(feeds, "%2C")+"&timestamp="+ts)
	assert.Equal(t, "HIT", resp.Header.Get("X-Cache"))
	resp, _ = demo.Get(t, env.Mainnet, "/api/v1/reports?feedID="+feeds[8]+"&timestamp="+ts)
	assert.Equal(t, "HIT", resp.Header.Get("X-Cache"))
	assert.Len(t, rec.matching("/api/v1/reports/bulk"), 3)
	assert.Len(t, rec.matching("/api/v1/reports?"), 4)
}

func pastTSFrom(s string) int64 {
	v, _ := strconv.ParseInt(s, 10, 64)
	return v
}

func TestPageCaching(t *testing.T) {
	env := servertest.Start(t, servertest.Options{})
	demo := servertest.Demo()
	feed := env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
	_, last, ok := env.Sim.Window(upstreamsim.Mainnet, feed)
	require.True(t, ok)
	pages := func(start int64) (string, string) {
		target := "/api/v1/reports/page?feedID=" + feed + "&startTimestamp=" + strconv.FormatInt(start, 10) + "&limit=10"
		r1, _ := demo.Get(t, env.Mainnet, target)
		env.Cache.Wait()
		r2, _ := demo.Get(t, env.Mainnet, target)
		return r1.Header.Get("X-Cache"), r2.Header.Get("X-Cache")
	}
	first, second := pages(pastTS())
	assert.Equal(t, "MISS", first)
	assert.Equal(t, "HIT", second, "a full page in the past never changes")
	first, second = pages(last - 3)
	assert.Equal(t, "MISS", first)
	assert.Equal(t, "MISS", second, "a page still filling is not cached")

	// The reports of a page are also the reports at their timestamps.
	resp, _ := demo.Get(t, env.Mainnet, "/api/v1/reports?feedID="+feed+"&timestamp="+strconv.FormatInt(pastTS()+3, 10))
	assert.Equal(t, "HIT", resp.Header.Get("X-Cache"))
}

func TestNegativeEntries(t *testing.T) {
	clock := newFakeClock()
	env := servertest.Start(t, servertest.Options{Now: clock.Now, Config: noReplay})
	demo := servertest.Demo()
	demo.Now = clock.Now
	feed := env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
	target := "/api/v1/reports?feedID=" + feed + "&timestamp=" + strconv.FormatInt(time.Now().Unix()+3600, 10)
	resp, body := demo.Get(t, env.Mainnet, target)
	require.Equal(t, http.StatusNotFound, resp.StatusCode, string(body))
	env.Cache.Wait()
	resp, _ = demo.Get(t, env.Mainnet, target)
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	assert.Equal(t, "HIT", resp.Header.Get("X-Cache"), "no data yet, remembered for negative_ttl")
	clock.Advance(2 * time.Second)
	resp, _ = demo.Get(t, env.Mainnet, target)
	assert.Equal(t, "MISS", resp.Header.Get("X-Cache"), "asked again after negative_ttl")
	assert.Equal(t, int64(2), env.Sim.Counters().ByEndpoint(upstreamsim.Mainnet, upstreamsim.EndpointReport))
}

// lying swaps the stream ID of every report the upstream sends.
func lying(_ string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/api/v1/reports") {
			h.ServeHTTP(w, r)
			return
		}
		rec := &bufferedWriter{header: http.Header{}}
		h.ServeHTTP(rec, r)
		body := strings.ReplaceAll(string(rec.body), `"feedID":"0x0003`, `"feedID":"0x0007`)
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.status)
		w.Write([]byte(body))
	})
}

type bufferedWriter struct {
	header http.Header
	status int
	body   []byte
}

func (b *bufferedWriter) Header() http.Header { return b.header }
func (b *bufferedWriter) WriteHeader(s int)   { b.status = s }
func (b *bufferedWriter) Write(p []byte) (int, error) {
	if b.status == 0 {
		b.status = http.StatusOK
	}
	b.body = append(b.body, p...)
	return len(p), nil
}

func TestIntegrity(t *testing.T) {
	env := servertest.Start(t, servertest.Options{Upstream: lying, Quiet: true})
	demo := servertest.Demo()
	feed := env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
	ts := strconv.FormatInt(pastTS(), 10)
	for _, target := range []string{
		"/api/v1/reports/latest?feedID=" + feed,
		"/api/v1/reports?feedID=" + feed + "&timestamp=" + ts,
		"/api/v1/reports/page?feedID=" + feed + "&startTimestamp=" + ts + "&limit=3",
		"/api/v1/reports/bulk?feedIDs=" + feed + "&timestamp=" + ts,
	} {
		for range 2 {
			resp, body := demo.Get(t, env.Mainnet, target)
			assert.Equal(t, http.StatusBadGateway, resp.StatusCode, "%s: %s", target, body)
			assert.NotContains(t, string(body), "0x0007", "a wrong report is never served")
		}
	}
	// Every refusal was an upstream call: nothing wrong was cached.
	assert.Equal(t, int64(8), env.Sim.Counters().Sum(func(c upstreamsim.Count) bool {
		return strings.HasPrefix(c.Endpoint, "/api/v1/reports")
	}))
	assert.Equal(t, 2.0, counterValue(t, env, "streamgate_upstream_integrity_failures_total", "latest", "mainnet"))
}

// counterValue returns the value of one series of a counter vector, its
// label values given in the label names' alphabetical order.
func counterValue(t *testing.T, env *servertest.Env, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := env.Registry.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var vals []string
			for _, lp := range m.GetLabel() {
				vals = append(vals, lp.GetValue())
			}
			if slices.Equal(vals, labels) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestCatalogDifferential runs 2000 random filter combinations against the
// simulator directly and through the gateway: the gateway filters its
// cached views locally and must give the upstream's answer, for anonymous
// callers, signed ones, and with hidden=true.
func TestCatalogDifferential(t *testing.T) {
	// Identical random queries may be signed in the same millisecond; the
	// anonymous queries come faster than the per-address limit allows.
	env := servertest.Start(t, servertest.Options{Config: func(c *config.Config) {
		c.Auth.ReplayProtection = false
		c.Auth.AnonymousRate = config.Rate{}
	}})
	demo := servertest.Demo()
	org := &servertest.Client{Key: upstreamsim.OrgKeyID, Secret: upstreamsim.OrgKeySecret, HTTP: http.DefaultClient}
	anon := &servertest.Client{HTTP: http.DefaultClient}
	values := map[string][]string{}
	for _, net := range []string{upstreamsim.Mainnet, upstreamsim.Testnet} {
		for _, s := range env.Sim.Streams(net) {
			values["base_asset"] = append(values["base_asset"], s.BaseAsset)
			values["quote_asset"] = append(values["quote_asset"], s.QuoteAsset)
			values["asset_class"] = append(values["asset_class"], s.AssetClass)
			values["feed_type"] = append(values["feed_type"], s.FeedType)
			values["attribute_type"] = append(values["attribute_type"], s.AttributeType)
		}
	}
	values["status"] = []string{"live", "testing", "LIVE", "retired"}
	values["network_type"] = []string{"mainnet", "testnet", "Mainnet", "devnet"}
	dates := []string{"created_after", "created_before", "expected_decommission_after", "expected_decommission_before", "decommissioned_after", "decommissioned_before"}
	rng := rand.New(rand.NewPCG(1, 2))
	randomCase := func(s string) string {
		b := []byte(s)
		for i := range b {
			if rng.IntN(3) == 0 {
				b[i] = byte(strings.ToUpper(string(b[i]))[0])
			} else if rng.IntN(3) == 0 {
				b[i] = byte(strings.ToLower(string(b[i]))[0])
			}
		}
		return string(b)
	}
	query := func() string {
		q := url.Values{}
		for name, vals := range values {
			if rng.IntN(4) != 0 {
				continue
			}
			var list []string
			for range 1 + rng.IntN(3) {
				v := vals[rng.IntN(len(vals))]
				if rng.IntN(10) == 0 {
					v += "x" // misspelt
				}
				list = append(list, randomCase(v))
			}
			q.Set(name, strings.Join(list, ","))
		}
		for _, d := range dates {
			if rng.IntN(5) == 0 {
				q.Set(d, time.Date(2019+rng.IntN(9), time.Month(1+rng.IntN(12)), 1+rng.IntN(28), 0, 0, 0, 0, time.UTC).Format("2006-01-02"))
			}
		}
		switch rng.IntN(8) {
		case 0:
			q.Set("hidden", "true")
		case 1:
			q.Set("hidden", "FALSE")
		case 2:
			q.Set("hidden", "1")
		case 3:
			q.Set("hidden", "yes") // not a boolean: 400
		case 4:
			q.Set("created_after", "2024-1-5") // not a plain date: 400
		}
		if rng.IntN(6) == 0 {
			q.Set("unknown_param", "x")
		}
		return q.Encode()
	}
	const rounds = 2000
	before := discoveryCalls(env)
	for i := range rounds {
		target := "/api/v1/discovery?" + query()
		net := []struct{ gw, up string }{{env.Mainnet, env.UpMainnet}, {env.Testnet, env.UpTestnet}}[i%2]
		for _, pair := range []struct{ via, direct *servertest.Client }{{demo, org}, {anon, anon}} {
			wantResp, want := pair.direct.Get(t, net.up, target)
			gotResp, got := pair.via.Get(t, net.gw, target)
			require.Equal(t, wantResp.StatusCode, gotResp.StatusCode, "%s: %s", target, got)
			if wantResp.StatusCode != http.StatusOK {
				continue
			}
			var w, g struct {
				Feeds []json.RawMessage `json:"feeds"`
			}
			require.NoError(t, json.Unmarshal(want, &w))
			require.NoError(t, json.Unmarshal(got, &g))
			require.NotNil(t, g.Feeds, "[] never null")
			require.Equal(t, len(w.Feeds), len(g.Feeds), target)
			for j := range w.Feeds {
				require.JSONEq(t, string(w.Feeds[j]), string(g.Feeds[j]), target)
			}
		}
	}
	// Besides the test's own direct calls (two a round), the gateway
	// fetched at most the three views of each network, whatever the queries.
	viaGateway := discoveryCalls(env) - before - 2*rounds
	assert.LessOrEqual(t, viaGateway, int64(6))
	t.Logf("upstream catalog fetches by the gateway: %d; ", viaGateway)
	t.Logf("%d random queries on both networks, as anonymous and signed callers", rounds)
}

func discoveryCalls(env *servertest.Env) int64 {
	return env.Sim.Counters().Sum(func(c upstreamsim.Count) bool { return c.Endpoint == upstreamsim.EndpointDiscovery })
}
