package main

import (
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/config"
	"streamgate/internal/testing/testport"
	"streamgate/upstreamsim"
)

// scrape reads the admin /metrics of p.
func scrape(t testing.TB, p *proc) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(p.admin + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return fams
}

// labelsOf returns a metric's labels as a map.
func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, lp := range m.GetLabel() {
		out[lp.GetName()] = lp.GetValue()
	}
	return out
}

// value is a metric's counter or gauge value, or its histogram's count.
func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Histogram != nil:
		return float64(m.GetHistogram().GetSampleCount())
	}
	return 0
}

// sample returns the value of the family's metric that has (at least) the
// given labels; ok is false when there is none.
func sample(fams map[string]*dto.MetricFamily, name string, labels map[string]string) (v float64, ok bool) {
	for _, m := range fams[name].GetMetric() {
		got := labelsOf(m)
		match := true
		for k, want := range labels {
			match = match && got[k] == want
		}
		if match {
			v, ok = v+value(m), true
		}
	}
	return v, ok
}

// waitReady polls /readyz until it answers 200.
func waitReady(t testing.TB, p *proc) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(p.admin + "/readyz")
		require.NoError(t, err)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return
		}
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		require.True(t, time.Now().Before(deadline), "/readyz never turned 200")
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMetricsAfterTraffic makes every kind of request the issue names and
// checks the admin listener's metrics: names, types, label names, the
// samples the traffic caused, and that no label holds a credential or a
// stream ID.
func TestMetricsAfterTraffic(t *testing.T) {
	p := start(t, testConfig{}.String(), []string{"mainnet", "testnet"})
	base := p.net["mainnet"]

	resp, err := http.Get(p.admin + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "/healthz")
	waitReady(t, p)

	demo := newSigner(config.DemoKeyID, config.DemoKeySecret)
	feeds := feedIDs(t, base, 2) // the anonymous catalog
	code, _ := mustGet(t, nil, p.net["testnet"]+"/api/v1/discovery")
	require.Equal(t, http.StatusOK, code)
	code, _ = mustGet(t, demo, base+"/api/v1/feeds") // the team's catalog
	require.Equal(t, http.StatusOK, code)

	// A report twice: a miss, then (once the cache holds it) a hit.
	ts := time.Now().Add(-90 * time.Minute).Unix()
	for i := 0; ; i++ {
		resp, body, err := fetch(t.Context(), http.DefaultClient, demo, reportURL(base, feeds[0], ts))
		require.NoError(t, validAnswer(resp, body, err))
		if resp.Header.Get("X-Cache") == "HIT" {
			break
		}
		require.Less(t, i, 50, "the report never came from the cache")
		time.Sleep(10 * time.Millisecond)
	}
	// Latest reports, concurrently: coalesced fills.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			resp, body, err := fetch(t.Context(), http.DefaultClient, demo, base+"/api/v1/reports/latest?feedID="+feeds[1])
			assert.NoError(t, validAnswer(resp, body, err))
		})
	}
	wg.Wait()
	// An authentication failure: the demo key, signed with another secret.
	code, _ = mustGet(t, newSigner(config.DemoKeyID, "not-the-demo-secret-at-all"), base+"/api/v1/feeds")
	require.Equal(t, http.StatusUnauthorized, code)
	// A rate-limit rejection: the tiny team's second request.
	tiny := newSigner(tinyKeyID, tinyKeySecret)
	mustGet(t, tiny, base+"/api/v1/feeds")
	code, _ = mustGet(t, tiny, base+"/api/v1/feeds")
	require.Equal(t, http.StatusTooManyRequests, code)

	fams := scrape(t, p)
	want := []struct {
		name   string
		typ    dto.MetricType
		labels []string // sorted
	}{
		{"streamgate_requests_total", dto.MetricType_COUNTER, []string{"code", "endpoint", "network", "team"}},
		{"streamgate_request_duration_seconds", dto.MetricType_HISTOGRAM, []string{"endpoint", "network"}},
		{"streamgate_cache_results_total", dto.MetricType_COUNTER, []string{"kind", "network", "result"}},
		{"streamgate_upstream_requests_total", dto.MetricType_COUNTER, []string{"code", "endpoint", "network"}},
		{"streamgate_upstream_duration_seconds", dto.MetricType_HISTOGRAM, []string{"endpoint", "network"}},
		{"streamgate_upstream_calls_saved_total", dto.MetricType_COUNTER, []string{"kind", "network"}},
		{"streamgate_coalesced_waiters", dto.MetricType_HISTOGRAM, nil},
		{"streamgate_ratelimit_rejections_total", dto.MetricType_COUNTER, []string{"limit", "team"}},
		{"streamgate_auth_failures_total", dto.MetricType_COUNTER, []string{"network", "reason"}},
		{"streamgate_client_clock_skew_seconds", dto.MetricType_HISTOGRAM, nil},
		{"streamgate_cache_bytes", dto.MetricType_GAUGE, nil},
		{"streamgate_ready", dto.MetricType_GAUGE, nil},
	}
	for _, w := range want {
		fam := fams[w.name]
		if !assert.NotNil(t, fam, "metric %s", w.name) {
			continue
		}
		assert.Equal(t, w.typ, fam.GetType(), "type of %s", w.name)
		for _, m := range fam.GetMetric() {
			names := make([]string, 0)
			for name := range labelsOf(m) {
				names = append(names, name)
			}
			sort.Strings(names)
			assert.Equal(t, fmt.Sprint(w.labels), fmt.Sprint(names), "labels of %s", w.name)
		}
	}

	// The samples the traffic caused.
	for _, c := range []struct {
		name   string
		labels map[string]string
	}{
		{"streamgate_requests_total", map[string]string{"network": "mainnet", "endpoint": "reports", "code": "200", "team": "demo"}},
		{"streamgate_requests_total", map[string]string{"network": "mainnet", "endpoint": "discovery", "code": "200", "team": "anonymous"}},
		{"streamgate_requests_total", map[string]string{"network": "testnet", "endpoint": "discovery", "code": "200"}},
		{"streamgate_requests_total", map[string]string{"network": "mainnet", "endpoint": "feeds", "code": "401"}},
		{"streamgate_requests_total", map[string]string{"network": "mainnet", "endpoint": "feeds", "code": "429", "team": "tiny"}},
		{"streamgate_request_duration_seconds", map[string]string{"network": "mainnet", "endpoint": "latest"}},
		{"streamgate_cache_results_total", map[string]string{"kind": "report", "result": "miss"}},
		{"streamgate_cache_results_total", map[string]string{"kind": "report", "result": "hit"}},
		{"streamgate_cache_results_total", map[string]string{"kind": "catalog"}},
		{"streamgate_cache_results_total", map[string]string{"kind": "latest"}},
		{"streamgate_upstream_requests_total", map[string]string{"network": "mainnet", "endpoint": "reports", "code": "200"}},
		{"streamgate_upstream_requests_total", map[string]string{"network": "mainnet", "endpoint": "latest", "code": "200"}},
		{"streamgate_upstream_duration_seconds", map[string]string{"network": "mainnet", "endpoint": "reports"}},
		{"streamgate_upstream_calls_saved_total", map[string]string{"network": "mainnet", "kind": "report"}},
		{"streamgate_coalesced_waiters", nil},
		{"streamgate_ratelimit_rejections_total", map[string]string{"team": "tiny", "limit": "team"}},
		{"streamgate_auth_failures_total", map[string]string{"network": "mainnet", "reason": "bad_signature"}},
		{"streamgate_client_clock_skew_seconds", nil},
		{"streamgate_cache_bytes", nil},
		{"streamgate_ready", nil},
	} {
		v, ok := sample(fams, c.name, c.labels)
		assert.True(t, ok && v > 0, "%s%v: got %v (present: %v)", c.name, c.labels, v, ok)
	}

	// Own prefix, base units, and labels that never hold a credential or a
	// stream ID (unbounded, and not the operator's to chart).
	secrets := []string{config.DemoKeyID, config.DemoKeySecret, tinyKeyID, tinyKeySecret,
		upstreamsim.OrgKeyID, upstreamsim.OrgKeySecret, "not-the-demo-secret-at-all"}
	streamID := regexp.MustCompile(`(?i)0x[0-9a-f]{64}`)
	for name, fam := range fams {
		assert.Regexp(t, `^(streamgate|go|process|promhttp)_`, name, "a metric outside the streamgate_ namespace")
		assert.NotRegexp(t, `_(ms|us|millis|milliseconds|microseconds|minutes|hours|kb|mb|kib|mib)(_|$)`, name, "not in base units")
		for _, m := range fam.GetMetric() {
			for _, lp := range m.GetLabel() {
				for _, s := range secrets {
					assert.NotContains(t, lp.GetValue(), s, "%s{%s}: a credential as a label value", name, lp.GetName())
				}
				assert.NotRegexp(t, streamID, lp.GetValue(), "%s{%s}: a stream ID as a label value", name, lp.GetName())
			}
		}
	}
}

// TestReadyzWaitsForTheUpstream points the only network at a loopback port
// where nothing listens: the process is alive (/healthz 200) but not ready
// (/readyz 503), and the failed upstream calls are counted. When an
// upstream starts listening there, the warm-up, tried again in the
// background, reaches it and /readyz turns 200.
func TestReadyzWaitsForTheUpstream(t *testing.T) {
	// Held by the test until its upstream listens there (a port listened
	// on and closed again could be any other listener's meanwhile).
	port := testport.Refusing(t)
	closed := port.Addr()

	cfg := fmt.Sprintf(`server:
  admin_listen: "127.0.0.1:0"
  shutdown_timeout: 5s
networks:
  mainnet:
    listen: "127.0.0.1:0"
    upstream:
      url: http://%s
      api_key: %s
      api_secret: %s
      timeout: 1s
      retries: 1
teams:
  - name: demo
    networks: [mainnet]
    feeds: ["*"]
    keys: [{id: %s, secret: %s}]
`, closed, upstreamsim.OrgKeyID, upstreamsim.OrgKeySecret, config.DemoKeyID, config.DemoKeySecret)
	p := start(t, cfg, []string{"mainnet"})
	// The warm-up has asked the upstream and given up: from here on nothing
	// changes the answer but an upstream that answers.
	p.waitLog(20*time.Second, func(l logLine) bool { return strings.HasPrefix(l.str("msg"), "catalog warm-up failed") })

	for path, want := range map[string]int{"/healthz": http.StatusOK, "/readyz": http.StatusServiceUnavailable} {
		resp, err := http.Get(p.admin + path)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, want, resp.StatusCode, path)
	}
	v, ok := sample(scrape(t, p), "streamgate_upstream_errors_total", map[string]string{"network": "mainnet", "reason": "transport"})
	assert.True(t, ok && v > 0, "upstream errors counted: %v", v)
	for name, fam := range scrape(t, p) {
		if strings.HasPrefix(name, "streamgate_upstream_errors") {
			for _, m := range fam.GetMetric() {
				assert.Contains(t, []string{"timeout", "transport", "canceled", "budget", "integrity"}, labelsOf(m)["reason"])
			}
		}
	}

	// The upstream comes up where it was expected: readiness follows.
	sim, err := upstreamsim.New(upstreamsim.Default())
	require.NoError(t, err)
	defer sim.Close()
	up, err := port.Listen()
	require.NoError(t, err, "the upstream listens on the port held since the start")
	srv := &http.Server{Handler: sim.Handler(upstreamsim.Mainnet), ReadHeaderTimeout: time.Second}
	go srv.Serve(up)
	defer srv.Close()
	require.Eventually(t, func() bool {
		resp, err := http.Get(p.admin + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 60*time.Second, 100*time.Millisecond, "/readyz turns 200 once the upstream answers, with no restart")
}
