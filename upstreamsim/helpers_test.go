package upstreamsim

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"streamgate/auth"
)

// t0 is the clock of the tests: the instant of the real V3 report,
// 2025-09-23T00:09:48Z, a Tuesday.
var t0 = time.Unix(1758586188, 0).UTC()

// newTestSim returns a simulator with Default's keys on a clock fixed at
// t0, without rate limits unless mutate sets them.
func newTestSim(t testing.TB, mutate func(*Config)) *Simulator {
	t.Helper()
	cfg := Default()
	cfg.Now = func() time.Time { return t0 }
	cfg.RateLimit, cfg.Burst = 0, 0
	if mutate != nil {
		mutate(&cfg)
	}
	s, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// findStream returns the ID of the stream named name on network.
func findStream(t testing.TB, s *Simulator, network, name string) string {
	t.Helper()
	for _, st := range s.Streams(network) {
		if st.Name == name {
			return st.FeedID
		}
	}
	t.Fatalf("no stream %q on %s", name, network)
	return ""
}

// env is a simulator served over loopback, one server per network.
type env struct {
	sim    *Simulator
	srv    map[string]*httptest.Server
	client *http.Client
	now    func() time.Time
}

func newEnv(t *testing.T, mutate func(*Config)) *env {
	t.Helper()
	e := &env{srv: map[string]*httptest.Server{}, now: func() time.Time { return t0 }}
	e.sim = newTestSim(t, func(c *Config) {
		if mutate != nil {
			mutate(c)
		}
		if c.Now != nil {
			e.now = c.Now
		}
	})
	for _, n := range []string{Mainnet, Testnet} {
		srv := httptest.NewServer(e.sim.Handler(n))
		t.Cleanup(srv.Close)
		e.srv[n] = srv
	}
	e.client = &http.Client{Timeout: 30 * time.Second}
	return e
}

type creds struct{ id, secret string }

var (
	org        = &creds{OrgKeyID, OrgKeySecret}
	restricted = &creds{RestrictedKeyID, RestrictedKeySecret}
)

// request builds a GET of target (path and query exactly as sent) on
// network, signed with c at the env's clock when c is not nil.
func (e *env) request(t testing.TB, network, target string, c *creds) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.srv[network].URL+target, nil)
	require.NoError(t, err)
	require.Equal(t, target, req.URL.RequestURI(), "the target must go on the wire unchanged")
	if c != nil {
		auth.Sign(req, c.id, []byte(c.secret), e.now())
	}
	return req
}

// do sends req and returns the response with its body read.
func (e *env) do(t testing.TB, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	resp, err := e.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, body
}

func (e *env) get(t testing.TB, network, target string, c *creds) (*http.Response, []byte) {
	t.Helper()
	return e.do(t, e.request(t, network, target, c))
}

func (e *env) getCtx(ctx context.Context, t testing.TB, network, target string, c *creds) (*http.Response, error) {
	req := e.request(t, network, target, c).WithContext(ctx)
	return e.client.Do(req)
}

type reportEnvelope struct {
	Report *Report `json:"report"`
}

type reportsEnvelope struct {
	Reports []Report `json:"reports"`
}

func decode[T any](t testing.TB, body []byte) T {
	t.Helper()
	var v T
	require.NoError(t, json.Unmarshal(body, &v), string(body))
	return v
}
