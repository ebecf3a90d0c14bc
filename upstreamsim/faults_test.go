package upstreamsim

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestErrorRateOne(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Faults = Faults{ErrorRate: 1} })
	eth := findStream(t, e.sim, Mainnet, nameETH)
	seen := map[int]int{}
	const n = 60
	for range n {
		resp, body := e.get(t, Mainnet, "/api/v1/reports/latest?feedID="+eth, org)
		seen[resp.StatusCode]++
		require.Contains(t, []int{500, 502, 503}, resp.StatusCode)
		errBody := decode[map[string]string](t, body)
		assert.Contains(t, errBody["message"], "injected")
	}
	assert.Len(t, seen, 3, "spread among 500, 502 and 503: %v", seen)
	c := e.sim.Counters()
	assert.Equal(t, int64(n), c.Total())
	assert.Equal(t, int64(n), c.ByStatus(500)+c.ByStatus(502)+c.ByStatus(503))
	assert.Zero(t, c.ByStatus(200))

	// The catalog keeps its error shape under faults.
	resp, body := e.get(t, Mainnet, "/api/v1/discovery", nil)
	require.GreaterOrEqual(t, resp.StatusCode, 500)
	assert.Len(t, decode[map[string]string](t, body), 1)
}

func TestForce429(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Faults = Faults{Force429: 1} })
	resp, body := e.get(t, Testnet, "/api/v1/feeds", org)
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))
	assert.Contains(t, string(body), `"message"`)
}

// served wraps h and reports each start and each return of ServeHTTP.
func served(h http.Handler) (http.Handler, <-chan struct{}, <-chan struct{}) {
	started, done := make(chan struct{}, 16), make(chan struct{}, 16)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		defer func() { done <- struct{}{} }()
		h.ServeHTTP(w, r)
	}), started, done
}

// waitDone waits for a handler to return; the bound only turns a leak into
// a failure instead of a stuck test.
func waitDone(t *testing.T, done <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: the handler did not return", what)
	}
}

func TestHangEndsWithTheClient(t *testing.T) {
	s := newTestSim(t, func(c *Config) { c.Faults = Faults{Hang: 1} })
	h, _, done := served(s.Handler(Mainnet))
	srv := httptest.NewServer(h)
	defer srv.Close()

	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/api/v1/discovery", nil)
	require.NoError(t, err)
	errc := make(chan error, 1)
	go func() {
		resp, err := srv.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	// The hang is counted as soon as it starts.
	require.Eventually(t, func() bool { return s.Counters().ByStatus(StatusNoResponse) == 1 }, 20*time.Second, time.Millisecond)
	select {
	case err := <-errc:
		t.Fatalf("the request ended before its client gave up: %v", err)
	default:
	}
	cancel()
	assert.ErrorIs(t, <-errc, context.Canceled)
	waitDone(t, done, "hang after the client gave up")
	assert.Equal(t, int64(1), s.Counters().Total())
}

func TestCloseEndsHangs(t *testing.T) {
	s := newTestSim(t, func(c *Config) { c.Faults = Faults{Hang: 1} })
	h, _, done := served(s.Handler(Testnet))
	srv := httptest.NewServer(h)
	defer srv.Close()

	errc := make(chan error, 1)
	go func() {
		resp, err := srv.Client().Get(srv.URL + "/api/v1/discovery")
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	require.Eventually(t, func() bool { return s.Counters().Total() == 1 }, 20*time.Second, time.Millisecond)
	require.NoError(t, s.Close())
	waitDone(t, done, "hang after Close")
	assert.Error(t, <-errc, "the connection ends without a response")
}

func TestLatencyAbandonedByClient(t *testing.T) {
	s := newTestSim(t, func(c *Config) { c.Faults = Faults{Latency: time.Hour} })
	h, started, done := served(s.Handler(Mainnet))
	srv := httptest.NewServer(h)
	defer srv.Close()

	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-started
		cancel() // the handler is in, or about to enter, its delay
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/api/v1/discovery", nil)
	require.NoError(t, err)
	_, err = srv.Client().Do(req)
	require.ErrorIs(t, err, context.Canceled)
	waitDone(t, done, "latency after the client gave up")
	assert.Equal(t, int64(1), s.Counters().ByStatus(StatusNoResponse))
}

func TestLatencyDelaysThenAnswers(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Faults = Faults{Latency: time.Millisecond, Jitter: time.Millisecond} })
	resp, _ := e.get(t, Mainnet, "/api/v1/discovery", nil)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}

func TestSetFaults(t *testing.T) {
	e := newEnv(t, nil)
	resp, _ := e.get(t, Mainnet, "/api/v1/discovery", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)

	require.NoError(t, e.sim.SetFaults(Faults{ErrorRate: 1}))
	resp, _ = e.get(t, Mainnet, "/api/v1/discovery", nil)
	assert.GreaterOrEqual(t, resp.StatusCode, 500)

	for _, bad := range []Faults{
		{ErrorRate: -0.1}, {Hang: 1.5}, {ErrorRate: 0.6, Force429: 0.6}, {Latency: -time.Second},
	} {
		assert.Error(t, e.sim.SetFaults(bad), "%+v", bad)
	}
	assert.Equal(t, Faults{ErrorRate: 1}, e.sim.Faults(), "a refused change changes nothing")

	require.NoError(t, e.sim.SetFaults(Faults{}))
	resp, _ = e.get(t, Mainnet, "/api/v1/discovery", nil)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}

func TestCountersExact(t *testing.T) {
	e := newEnv(t, nil)
	eth := findStream(t, e.sim, Mainnet, nameETH)
	const workers, each = 8, 25
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				network := Mainnet
				if (w+i)%2 == 1 {
					network = Testnet
				}
				resp, err := e.client.Do(e.request(t, network, "/api/v1/reports/latest?feedID="+eth, org))
				if assert.NoError(t, err) {
					resp.Body.Close()
					assert.Equal(t, http.StatusOK, resp.StatusCode)
				}
			}
		})
	}
	wg.Wait()
	e.get(t, Mainnet, "/api/v1/discovery", nil)
	e.get(t, Mainnet, "/api/v1/reports/latest?feedID="+eth, restricted)
	e.get(t, Mainnet, "/api/v1/reports/latest?feedID="+eth, &creds{"someone", "x"})
	e.get(t, Mainnet, "/nowhere", nil)

	c := e.sim.Counters()
	assert.Equal(t, int64(workers*each+4), c.Total())
	assert.Equal(t, int64(workers*each/2+2), c.ByEndpoint(Mainnet, EndpointLatest))
	assert.Equal(t, int64(workers*each/2), c.ByEndpoint(Testnet, EndpointLatest))
	assert.Equal(t, int64(1), c.ByEndpoint(Mainnet, EndpointDiscovery))
	assert.Equal(t, int64(1), c.ByEndpoint(Mainnet, EndpointOther))
	assert.Equal(t, int64(workers*each), c.ByKey(OrgKeyID))
	assert.Equal(t, int64(1), c.ByKey(RestrictedKeyID))
	assert.Equal(t, int64(1), c.ByKey(KeyUnknown))
	assert.Equal(t, int64(2), c.ByKey(KeyAnonymous))
	assert.Equal(t, int64(workers*each+2), c.ByStatus(200))
	assert.Equal(t, int64(1), c.ByStatus(401))
	assert.Equal(t, int64(1), c.ByStatus(404))

	e.sim.ResetCounters()
	assert.Zero(t, e.sim.Counters().Total())
	e.get(t, Testnet, "/api/v1/discovery", nil)
	assert.Equal(t, int64(1), e.sim.Counters().Total())
}

func TestControlHandler(t *testing.T) {
	e := newEnv(t, nil)
	ctl := httptest.NewServer(e.sim.ControlHandler())
	defer ctl.Close()
	do := func(method, path, body string) (*http.Response, []byte) {
		req, err := http.NewRequest(method, ctl.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		return e.do(t, req)
	}

	resp, body := do(http.MethodGet, "/faults", "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.JSONEq(t, `{"latency":"0s","jitter":"0s","errorRate":0,"hang":0,"force429":0,"wsStall":false,"wsStallOrigin":"","wsRefuse":0,"forge":""}`, string(body))

	resp, body = do(http.MethodPut, "/faults", `{"latency":"2ms","jitter":1000000,"errorRate":1}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	assert.Equal(t, Faults{Latency: 2 * time.Millisecond, Jitter: time.Millisecond, ErrorRate: 1}, e.sim.Faults())

	// Faults apply to the API, never to the control handler.
	apiResp, _ := e.get(t, Mainnet, "/api/v1/discovery", nil)
	assert.GreaterOrEqual(t, apiResp.StatusCode, 500)
	resp, body = do(http.MethodGet, "/counters", "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var counters struct {
		Total      int64            `json:"total"`
		ByEndpoint map[string]int64 `json:"byEndpoint"`
		ByKey      map[string]int64 `json:"byKey"`
		ByStatus   map[string]int64 `json:"byStatus"`
		Counts     []Count          `json:"counts"`
	}
	require.NoError(t, json.Unmarshal(body, &counters))
	assert.Equal(t, int64(1), counters.Total)
	assert.Equal(t, int64(1), counters.ByEndpoint["mainnet /api/v1/discovery"])
	require.Len(t, counters.Counts, 1)
	assert.Equal(t, e.sim.Counters().Counts, counters.Counts)

	for _, bad := range []string{`{"errorRate":2}`, `{"latency":"soon"}`, `{"colour":"red"}`, `not json`,
		`{"wsRefuse":200}`, `{"wsStallOrigin":"001"}`} {
		resp, body = do(http.MethodPut, "/faults", bad)
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, bad)
		assert.NotEmpty(t, decode[map[string]string](t, body)["message"])
	}

	resp, _ = do(http.MethodPost, "/counters/reset", "")
	assert.Equal(t, http.StatusNoContent, resp.StatusCode)
	assert.Zero(t, e.sim.Counters().Total())
	_, body = do(http.MethodGet, "/counters", "")
	assert.JSONEq(t, `{"total":0,"byEndpoint":{},"byKey":{},"byStatus":{},"counts":[],"ws":[]}`, string(body))

	resp, _ = do(http.MethodGet, "/counters/reset", "")
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	assert.Equal(t, "POST", resp.Header.Get("Allow"))
	resp, _ = do(http.MethodDelete, "/faults", "")
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	resp, _ = do(http.MethodGet, "/api/v1/discovery", "")
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
}

func TestFaultsJSONRoundTrip(t *testing.T) {
	f := Faults{Latency: 150 * time.Millisecond, Jitter: 3 * time.Second, ErrorRate: 0.25, Hang: 0.05, Force429: 0.1,
		WSStall: true, WSStallOrigin: "002", WSRefuse: 503, Forge: ForgeDuplicate}
	b, err := json.Marshal(f)
	require.NoError(t, err)
	assert.JSONEq(t, `{"latency":"150ms","jitter":"3s","errorRate":0.25,"hang":0.05,"force429":0.1,
		"wsStall":true,"wsStallOrigin":"002","wsRefuse":503,"forge":"duplicate"}`, string(b))
	var g Faults
	require.NoError(t, json.Unmarshal(b, &g))
	assert.Equal(t, f, g)
	assert.Error(t, json.Unmarshal([]byte(`{"latency":true}`), &g))
}
