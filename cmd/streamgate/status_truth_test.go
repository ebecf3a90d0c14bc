package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/auth"
	"streamgate/config"
	"streamgate/internal/testing/redistest"
	"streamgate/status"
	"streamgate/upstreamsim"
)

// statusRig is a gateway process in front of a simulator on a loopback
// listener (REST and WebSocket) that the test can take down, with its
// limits in a real redis-server that the test can stop.
type statusRig struct {
	t     *testing.T
	sim   *upstreamsim.Simulator
	down  atomic.Bool // the upstream closes every connection at once
	redis *redistest.Server
	p     *proc
	demo  *signer
	ts    func() int64
}

func startStatusRig(t *testing.T) *statusRig {
	t.Setenv("STREAMGATE_STATUS_INTERVAL", "200ms")
	r := &statusRig{t: t, redis: redistest.New(t), demo: newSigner(config.DemoKeyID, config.DemoKeySecret), ts: pastTS()}
	cfg := upstreamsim.Default()
	cfg.RateLimit = 0
	cfg.WSTick = 50 * time.Millisecond
	sim, err := upstreamsim.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { sim.Close() })
	r.sim = sim
	h := sim.Handler(upstreamsim.Mainnet)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if r.down.Load() {
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				conn.Close() // no answer at all, as from a host that is down
			}
			return
		}
		h.ServeHTTP(w, req)
	}))
	t.Cleanup(up.Close)
	r.p = start(t, fmt.Sprintf(`server:
  admin_listen: "127.0.0.1:0"
networks:
  mainnet:
    listen: "127.0.0.1:0"
    upstream:
      url: %s
      ws_url: %s
      api_key: %s
      api_secret: %s
      timeout: 2s
      retries: 0
      budget: {rps: 500, burst: 500}
auth:
  anonymous_rate: {rps: 0}
realtime: {share: false}
ratelimit:
  backend: redis
  redis: {url: "%s", fail_mode: open}
teams:
  - name: demo
    networks: [mainnet]
    feeds: ["*"]
    keys: [{id: %s, secret: %s}]
`, up.URL, "ws"+strings.TrimPrefix(up.URL, "http"), upstreamsim.OrgKeyID, upstreamsim.OrgKeySecret, r.redis.URL(),
		config.DemoKeyID, config.DemoKeySecret), []string{"mainnet"})
	waitReady(t, r.p)
	return r
}

// outage takes the upstream down (REST and WebSocket, the open
// connections dropped) or brings it back.
func (r *statusRig) outage(on bool) {
	r.down.Store(on)
	if on {
		r.sim.DropWS(upstreamsim.WSDrop{Abrupt: true})
	}
}

// dialWS opens a client WebSocket of the demo team for feeds.
func (r *statusRig) dialWS(ctx context.Context, feeds ...string) *websocket.Conn {
	r.t.Helper()
	target := "/api/v1/ws?feedIDs=" + strings.Join(feeds, ",")
	req, err := http.NewRequest(http.MethodGet, r.p.net["mainnet"]+target, nil)
	require.NoError(r.t, err)
	r.demo.sign(req)
	h := http.Header{}
	for _, name := range []string{auth.HeaderAuthorization, auth.HeaderTimestamp, auth.HeaderSignature} {
		h.Set(name, req.Header.Get(name))
	}
	conn, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(r.p.net["mainnet"], "http")+target, &websocket.DialOptions{HTTPHeader: h})
	require.NoError(r.t, err)
	require.Equal(r.t, http.StatusSwitchingProtocols, resp.StatusCode)
	return conn
}

// get makes a signed request of the demo team and returns its status and
// X-Cache.
func (r *statusRig) get(target string) (int, string) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, _, err := fetch(ctx, http.DefaultClient, r.demo, r.p.net["mainnet"]+target)
	require.NoError(r.t, err, target)
	return resp.StatusCode, resp.Header.Get("X-Cache")
}

func (r *statusRig) snapshot() (status.Snapshot, []byte) {
	r.t.Helper()
	code, body := mustGet(r.t, nil, r.p.admin+"/status.json")
	require.Equal(r.t, http.StatusOK, code)
	var s status.Snapshot
	require.NoError(r.t, json.Unmarshal(body, &s), "%s", body)
	return s, body
}

// waitSnapshot waits (bounded) for a snapshot that satisfies ok.
func (r *statusRig) waitSnapshot(what string, ok func(status.Snapshot) bool) status.Snapshot {
	r.t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	for {
		s, body := r.snapshot()
		if ok(s) {
			return s
		}
		require.True(r.t, time.Now().Before(deadline), "/status.json never showed %s: %s", what, body)
		time.Sleep(100 * time.Millisecond)
	}
}

// figures are the numbers the page shows, read from the page, from
// /status.json or from /metrics: the three must agree.
type figures struct {
	State                                    string
	Reasons                                  string // codes, sorted, comma-separated
	Lookups, Free                            int64
	Memory, Shared, Stream, Stale, Coalesced int64
	RESTCalls, RESTFailures                  int64
	WSUp, WSWanted, WSFailures               int64
	FeedsLive                                int64
	Answers1xx, Answers2xx                   int64
}

func reasonCodes(codes []string) string {
	slices.Sort(codes)
	return strings.Join(codes, ",")
}

func fromJSON(s status.Snapshot) figures {
	var codes []string
	for _, r := range s.Health.Reasons {
		codes = append(codes, r.Code)
	}
	f := figures{State: s.Health.State, Reasons: reasonCodes(codes),
		Lookups: s.Cache.Free.Lookups, Free: s.Cache.Free.Free, Memory: s.Cache.Free.Memory, Shared: s.Cache.Free.Shared,
		Stream: s.Cache.Free.Stream, Stale: s.Cache.Free.Stale, Coalesced: s.Cache.Free.Coalesced}
	for _, n := range s.Networks {
		if n.Name != "mainnet" {
			continue
		}
		f.RESTCalls, f.RESTFailures = n.Upstream.Calls, n.Upstream.Failures
		if n.WS != nil {
			f.WSUp, f.WSWanted, f.WSFailures = int64(n.WS.Up), int64(n.WS.Wanted), n.WS.Failures
		}
		if n.Hub != nil {
			f.FeedsLive = int64(n.Hub.FeedsLive)
		}
	}
	for _, t := range s.Teams {
		if t.Name == config.DemoTeam {
			f.Answers1xx, f.Answers2xx = t.Answers["1xx"], t.Answers["2xx"]
		}
	}
	return f
}

var (
	rePageState   = regexp.MustCompile(`data-state="(\w+)"`)
	rePageReason  = regexp.MustCompile(`<li class="reason" data-code="(\w+)">`)
	rePageShare   = regexp.MustCompile(`<td class="n free-share">[0-9.]+ % \((\d+)\)</td>`)
	rePageRest    = regexp.MustCompile(`<tr class="rest">.*?<td class="n calls">(\d+) calls</td><td class="n failures">(\d+)</td>`)
	rePageWS      = regexp.MustCompile(`(?s)<tr class="ws">.*?<td class="n conns">(\d+) up of (\d+) wanted</td><td class="n failures">(\d+)</td>`)
	rePageLive    = regexp.MustCompile(`(\d+) feeds live`)
	rePageDemoRow = regexp.MustCompile(`(?s)<tr class="team" id="team-demo">(.*?)</tr>`)
)

func pageCell(t *testing.T, page, class string) int64 {
	t.Helper()
	m := regexp.MustCompile(`<td class="n ` + class + `">(\d+)</td>`).FindStringSubmatch(page)
	require.NotNil(t, m, "the page's %s cell", class)
	return atoi(t, m[1])
}

func atoi(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	require.NoError(t, err)
	return n
}

func fromPage(t *testing.T, page string) figures {
	t.Helper()
	f := figures{}
	m := rePageState.FindStringSubmatch(page)
	require.NotNil(t, m, "the headline")
	f.State = m[1]
	var codes []string
	for _, m := range rePageReason.FindAllStringSubmatch(page, -1) {
		codes = append(codes, m[1])
	}
	f.Reasons = reasonCodes(codes)
	m = rePageShare.FindStringSubmatch(page)
	require.NotNil(t, m, "the share without an upstream call")
	f.Free = atoi(t, m[1])
	f.Lookups = pageCell(t, page, "lookups")
	f.Memory, f.Shared, f.Stream = pageCell(t, page, "free-memory"), pageCell(t, page, "free-shared"), pageCell(t, page, "free-stream")
	f.Stale, f.Coalesced = pageCell(t, page, "free-stale"), pageCell(t, page, "free-coalesced")
	section := page[strings.Index(page, `id="network-mainnet"`):]
	m = rePageRest.FindStringSubmatch(section)
	require.NotNil(t, m, "the REST row")
	f.RESTCalls, f.RESTFailures = atoi(t, m[1]), atoi(t, m[2])
	if m = rePageWS.FindStringSubmatch(section); m != nil {
		f.WSUp, f.WSWanted, f.WSFailures = atoi(t, m[1]), atoi(t, m[2]), atoi(t, m[3])
	}
	if m = rePageLive.FindStringSubmatch(section); m != nil {
		f.FeedsLive = atoi(t, m[1])
	}
	row := rePageDemoRow.FindStringSubmatch(page)
	require.NotNil(t, row, "the demo team's row")
	for _, class := range []string{"1xx", "2xx"} {
		if m := regexp.MustCompile(class + ` (\d+)`).FindStringSubmatch(row[1]); m != nil {
			if class == "1xx" {
				f.Answers1xx = atoi(t, m[1])
			} else {
				f.Answers2xx = atoi(t, m[1])
			}
		}
	}
	return f
}

// fromMetrics computes the figures from the families they come from; the
// headline is not a metric, so it is taken from want.
func fromMetrics(t *testing.T, text []byte, want figures) figures {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(text)))
	require.NoError(t, err)
	sum := func(name string, keep func(map[string]string) bool) int64 {
		var v float64
		if fam := fams[name]; fam != nil {
			for _, m := range fam.GetMetric() {
				l := labelsOf(m)
				if keep == nil || keep(l) {
					v += m.GetCounter().GetValue() + m.GetGauge().GetValue()
				}
			}
		}
		return int64(v)
	}
	result := func(rs ...string) func(map[string]string) bool {
		return func(l map[string]string) bool {
			for _, r := range rs {
				if l["result"] == r {
					return true
				}
			}
			return false
		}
	}
	mainnet := func(extra func(map[string]string) bool) func(map[string]string) bool {
		return func(l map[string]string) bool { return l["network"] == "mainnet" && (extra == nil || extra(l)) }
	}
	f := figures{State: want.State, Reasons: want.Reasons}
	f.Lookups = sum("streamgate_cache_results_total", nil)
	f.Memory = sum("streamgate_cache_results_total", result("hit", "negative"))
	f.Stream = sum("streamgate_cache_results_total", result("stream"))
	f.Stale = sum("streamgate_cache_results_total", result("stale"))
	f.Coalesced = sum("streamgate_cache_results_total", result("coalesced"))
	f.Shared = min(sum("streamgate_cache_shared_fills_saved_total", nil), sum("streamgate_cache_results_total", result("miss")))
	f.Free = f.Memory + f.Shared + f.Stream + f.Stale + f.Coalesced
	unanswered := sum("streamgate_upstream_errors_total", mainnet(func(l map[string]string) bool {
		return l["reason"] != "canceled" && l["reason"] != "budget" && l["reason"] != "integrity"
	}))
	f.RESTCalls = sum("streamgate_upstream_requests_total", mainnet(nil)) + unanswered
	f.RESTFailures = sum("streamgate_upstream_requests_total", mainnet(func(l map[string]string) bool { return !strings.HasPrefix(l["code"], "2") })) +
		sum("streamgate_upstream_errors_total", mainnet(func(l map[string]string) bool { return l["reason"] != "canceled" && l["reason"] != "budget" }))
	f.WSUp = sum("streamgate_ws_upstream_connections", mainnet(func(l map[string]string) bool { return l["state"] == "up" }))
	f.WSWanted = sum("streamgate_ws_upstream_connections", mainnet(nil))
	f.WSFailures = sum("streamgate_ws_reconnects_total", mainnet(nil))
	f.FeedsLive = want.FeedsLive // not a metric: the hub's connections (checked against the page)
	f.Answers1xx = sum("streamgate_requests_total", func(l map[string]string) bool {
		return l["team"] == config.DemoTeam && strings.HasPrefix(l["code"], "1")
	})
	f.Answers2xx = sum("streamgate_requests_total", func(l map[string]string) bool {
		return l["team"] == config.DemoTeam && strings.HasPrefix(l["code"], "2")
	})
	return f
}

// agree reads /status.json, /metrics, the page and /status.json again
// until nothing moved in between (bounded), then checks that the page and
// the metrics show the figures of the JSON. It returns them.
func (r *statusRig) agree() figures {
	r.t.Helper()
	var a, b, pg, mt figures
	for range 100 {
		s1, _ := r.snapshot()
		_, metrics := mustGet(r.t, nil, r.p.admin+"/metrics")
		_, page := mustGet(r.t, nil, r.p.admin+"/")
		s2, _ := r.snapshot()
		a, b = fromJSON(s1), fromJSON(s2)
		pg, mt = fromPage(r.t, string(page)), fromMetrics(r.t, metrics, a)
		if a == b && pg == a && mt == a {
			return a
		}
		time.Sleep(50 * time.Millisecond)
	}
	assert.Equal(r.t, a, pg, "the page shows the JSON's figures")
	assert.Equal(r.t, a, mt, "the JSON's figures are the metrics'")
	r.t.FailNow()
	return a
}

// TestStatusPageAgreesWithJSONAndMetrics drives a WebSocket client, latest
// answered from the stream, cache hits, an upstream outage and a Redis
// outage, and checks at each step that the page, /status.json and the
// metrics they come from show the same figures, and that the headline
// tells each trouble.
func TestStatusPageAgreesWithJSONAndMetrics(t *testing.T) {
	r := startStatusRig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	feeds := feedIDs(t, r.p.net["mainnet"], 2)

	// A WebSocket client on the first stream: a 101, and reports. It
	// reads on, as a client does (and answers the gateway's pings).
	conn := r.dialWS(ctx, feeds[0])
	defer conn.CloseNow()
	_, _, err := conn.Read(ctx)
	require.NoError(t, err, "a report from the stream")
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		for {
			if _, _, err := conn.Read(ctx); err != nil {
				return
			}
		}
	}()

	// Latest of the streamed stream: from the stream, no upstream call.
	xcache := map[string]int{}
	for range 5 {
		code, xc := r.get("/api/v1/reports/latest?feedID=" + feeds[0])
		require.Equal(t, http.StatusOK, code)
		xcache[xc]++
	}
	require.Positive(t, xcache["STREAM"], "latest answered from the stream: %v", xcache)
	// A report fetched, then a cache hit.
	ts := r.ts()
	for _, want := range []string{"MISS", "HIT"} {
		code, xc := r.get(reportURL("", feeds[1], ts))
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, want, xc)
	}

	// The client leaves: its upgrade is counted (as every request, when
	// it ends) with its status, 101.
	require.NoError(t, conn.Close(websocket.StatusNormalClosure, "done"))
	<-readDone
	s := r.waitSnapshot("the stream's answers and the WebSocket upgrade", func(s status.Snapshot) bool {
		f := fromJSON(s)
		return f.Stream == int64(xcache["STREAM"]) && f.Answers1xx == 1 && f.WSUp >= 1
	})
	assert.Equal(t, status.StateWell, s.Health.State, "%+v", s.Health.Reasons)
	f := r.agree()
	assert.Equal(t, status.StateWell, f.State)
	assert.EqualValues(t, xcache["STREAM"], f.Stream)
	assert.GreaterOrEqual(t, f.Memory, int64(1), "the report's hit")
	assert.EqualValues(t, 1, f.Answers1xx, "the upgrade is in the team's answers")
	assert.Positive(t, f.FeedsLive)
	assert.Greater(t, float64(f.Free)/float64(f.Lookups), s.Cache.HitRatio,
		"the stream's answers count as answers without an upstream call; the old hit ratio left them out")

	// The upstream goes down: REST and WebSocket.
	r.outage(true)
	code, _ := r.get(reportURL("", feeds[1], r.ts()))
	require.GreaterOrEqual(t, code, 500, "a report the cache does not hold")
	r.waitSnapshot("the outage", func(s status.Snapshot) bool {
		f := fromJSON(s)
		return strings.Contains(f.Reasons, status.ReasonUpstreamDown) && strings.Contains(f.Reasons, status.ReasonStreamDown) && f.WSFailures > 0
	})
	f = r.agree()
	assert.Equal(t, status.StateDegraded, f.State)
	assert.Contains(t, f.Reasons, status.ReasonUpstreamDown)
	assert.Contains(t, f.Reasons, status.ReasonStreamDown)
	assert.Zero(t, f.WSUp, "no upstream WebSocket connection up")
	assert.Zero(t, f.FeedsLive, "no feed is live while every connection is down")
	assert.Positive(t, f.RESTFailures)
	assert.GreaterOrEqual(t, f.RESTCalls, f.RESTFailures, "every failure was a call")

	// Back: the stream reconnects, a REST call succeeds, all is well.
	r.outage(false)
	r.waitSnapshot("the stream back", func(s status.Snapshot) bool { f := fromJSON(s); return f.WSUp >= 1 && f.WSUp == f.WSWanted })
	code, _ = r.get(reportURL("", feeds[1], r.ts()))
	require.Equal(t, http.StatusOK, code)
	r.waitSnapshot("all well again", func(s status.Snapshot) bool { return s.Health.State == status.StateWell })
	assert.Equal(t, status.StateWell, r.agree().State)

	// Redis stops: the breaker opens after failed calls (the limits fall
	// back to the replica's own, fail_mode open).
	r.redis.Stop()
	r.waitSnapshot("the Redis breaker open", func(s status.Snapshot) bool {
		r.get("/api/v1/feeds")
		return strings.Contains(fromJSON(s).Reasons, status.ReasonRedisBreaker)
	})
	f = r.agree()
	assert.Equal(t, status.StateDegraded, f.State)
	assert.Equal(t, status.ReasonRedisBreaker, f.Reasons)
}
