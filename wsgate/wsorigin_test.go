package wsgate_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/auth"
	"streamgate/config"
	"streamgate/server/servertest"
	"streamgate/upstreamsim"
)

// signedHead sends HEAD / to base, signed by c as the SDKs sign their
// origin discovery.
func signedHead(t *testing.T, c *servertest.Client, base string) *http.Response {
	t.Helper()
	resp, _ := signedRoot(t, c, base, http.MethodHead, "")
	return resp
}

// signedRoot sends method / to base, signed by c, naming origin in
// X-Cll-Origin unless it is "", and returns the answer and its body.
func signedRoot(t *testing.T, c *servertest.Client, base, method, origin string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, base+"/", nil)
	require.NoError(t, err)
	auth.Sign(req, c.Key, []byte(c.Secret), time.Now())
	if origin != "" {
		req.Header.Set("X-Cll-Origin", origin)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	resp.Body.Close()
	return resp, body
}

// dialOrigin is dialWS with X-Cll-Origin: origin.
func dialOrigin(ctx context.Context, c *servertest.Client, base, target, origin string) (*websocket.Conn, *http.Response, error) {
	req, err := http.NewRequest(http.MethodGet, base+target, nil)
	if err != nil {
		return nil, nil, err
	}
	auth.Sign(req, c.Key, []byte(c.Secret), time.Now())
	h := http.Header{}
	for _, name := range []string{auth.HeaderAuthorization, auth.HeaderTimestamp, auth.HeaderSignature} {
		h.Set(name, req.Header.Get(name))
	}
	h.Set("X-Cll-Origin", origin)
	return websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+target, &websocket.DialOptions{HTTPHeader: h})
}

// TestWSOrigins: HEAD / advertises realtime.client_origins as the upstream
// advertises its own; an upgrade naming one of them is served, and counted
// by origin; one naming another origin is 400 with a JSON error, and
// nothing goes upstream.
func TestWSOrigins(t *testing.T) {
	env := servertest.Start(t, servertest.Options{Sim: func(c *upstreamsim.Config) { c.WSTick = 50 * time.Millisecond }})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	demo := servertest.Demo()
	btc := env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
	target := "/api/v1/ws?feedIDs=" + btc

	resp := signedHead(t, demo, env.Mainnet)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "{001,002}", resp.Header.Get("X-Cll-Available-Origins"))
	// Discovery naming an origin: one of them is fine, another is a 400.
	resp, _ = signedRoot(t, demo, env.Mainnet, http.MethodHead, "002")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	resp, _ = signedRoot(t, demo, env.Mainnet, http.MethodHead, "003")
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "HEAD / naming an unknown origin")
	resp, body := signedRoot(t, demo, env.Mainnet, http.MethodGet, "003")
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "GET / naming an unknown origin")
	assert.Contains(t, string(body), "unknown origin in X-Cll-Origin")

	_, resp, err := dialOrigin(ctx, demo, env.Mainnet, target, "003")
	require.Error(t, err)
	require.NotNil(t, resp)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	body, _ = io.ReadAll(resp.Body)
	var e map[string]string
	require.NoError(t, json.Unmarshal(body, &e), "%s", body)
	assert.Contains(t, e["message"], "unknown origin")
	assert.Contains(t, e["message"], "{001,002}")
	assert.Zero(t, env.Sim.Counters().WSTotal("").Accepted, "nothing went upstream for the refused upgrade")

	a, _, err := dialOrigin(ctx, demo, env.Mainnet, target, "001")
	require.NoError(t, err)
	defer a.CloseNow()
	b, _, err := dialOrigin(ctx, demo, env.Mainnet, target, "002")
	require.NoError(t, err)
	defer b.CloseNow()
	fa, fb := readFrames(t, ctx, a, 2), readFrames(t, ctx, b, 2)
	for _, f := range append(fa, fb...) {
		assert.Equal(t, btc, f.Report.FeedID)
	}
	for _, o := range []string{"001", "002"} {
		assert.Equal(t, 1.0, metricValue(t, env.Registry, "streamgate_ws_clients_by_origin", map[string]string{"network": "mainnet", "origin": o}), o)
	}
}

// TestWSOriginsConfigured: the operator's names are advertised; with none
// configured, HEAD / advertises nothing and X-Cll-Origin is ignored, as
// the upstream without HA does.
func TestWSOriginsConfigured(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	demo := servertest.Demo()

	env := servertest.Start(t, servertest.Options{Config: func(c *config.Config) { c.Realtime.ClientOrigins = []string{"east", "west", "north"} }})
	assert.Equal(t, "{east,west,north}", signedHead(t, demo, env.Mainnet).Header.Get("X-Cll-Available-Origins"))
	btc := env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
	_, resp, err := dialOrigin(ctx, demo, env.Mainnet, "/api/v1/ws?feedIDs="+btc, "001")
	require.Error(t, err)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)

	env = servertest.Start(t, servertest.Options{Config: func(c *config.Config) { c.Realtime.ClientOrigins = nil }})
	resp = signedHead(t, demo, env.Mainnet)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Empty(t, resp.Header.Values("X-Cll-Available-Origins"))
	c, _, err := dialOrigin(ctx, demo, env.Mainnet, "/api/v1/ws?feedIDs="+btc, "whatever")
	require.NoError(t, err, "without origins the header is ignored")
	c.CloseNow()
}
