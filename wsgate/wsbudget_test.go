package wsgate_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/config"
	"streamgate/internal/testing/redistest"
	"streamgate/server/servertest"
	"streamgate/upstreamsim"
)

// TestWSBudgetFullIsRefused: with the upstream connection budget full, a
// client asking for a stream it cannot carry is refused before the upgrade
// (503 with a JSON error and Retry-After, counted), instead of getting a
// connection that never carries a frame; a client of streams already
// carried is still accepted.
func TestWSBudgetFullIsRefused(t *testing.T) {
	env := servertest.Start(t, servertest.Options{Config: func(c *config.Config) {
		up := &c.Networks["mainnet"].Upstream
		up.WSMaxConnections = 1
		up.WSFeedsPerConnection = 2
	}})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	demo := servertest.Demo()
	btc := env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
	eth := env.FeedID(t, upstreamsim.Mainnet, "ETH", "USD", "V3")
	link := env.FeedID(t, upstreamsim.Mainnet, "LINK", "USD", "V3")

	first, _, err := dialWS(ctx, demo, env.Mainnet, "/api/v1/ws?feedIDs="+btc+","+eth, "")
	require.NoError(t, err)
	defer first.CloseNow()
	readFrames(t, ctx, first, 2) // both streams carried: the budget is full

	_, resp, err := dialWS(ctx, demo, env.Mainnet, "/api/v1/ws?feedIDs="+link, "")
	assertBudgetRefusal(t, env, resp, err, "a stream the budget cannot carry")

	again, _, err := dialWS(ctx, demo, env.Mainnet, "/api/v1/ws?feedIDs="+eth, "")
	require.NoError(t, err, "streams already carried are admitted")
	defer again.CloseNow()
	readFrames(t, ctx, again, 1)
}

// TestWSSharedBudgetFullIsRefused: with the upstream connections shared by
// two replicas through Redis, the budget is that of the union of their
// clients' streams: once replica A's clients fill it, a client of replica
// B asking for a stream it cannot carry is refused before the upgrade
// (503 with a JSON error and Retry-After, counted) instead of getting a
// connection that never carries a frame; a client of B asking for a stream
// already carried is still accepted and gets its reports.
func TestWSSharedBudgetFullIsRefused(t *testing.T) {
	rs := redistest.New(t)
	simCfg := upstreamsim.Default()
	simCfg.RateLimit = 0
	sim, err := upstreamsim.New(simCfg)
	require.NoError(t, err)
	t.Cleanup(func() { sim.Close() })
	envs := sharedReplicas(t, rs, sim, 2, func(c *config.Config) {
		up := &c.Networks["mainnet"].Upstream
		up.WSMaxConnections = 1
		up.WSFeedsPerConnection = 2
	})
	a, b := envs[0], envs[1]
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	demo := servertest.Demo()
	btc := a.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
	eth := a.FeedID(t, upstreamsim.Mainnet, "ETH", "USD", "V3")
	link := a.FeedID(t, upstreamsim.Mainnet, "LINK", "USD", "V3")

	first, _, err := dialWS(ctx, demo, a.Mainnet, "/api/v1/ws?feedIDs="+btc+","+eth, "")
	require.NoError(t, err)
	defer first.CloseNow()
	readFrames(t, ctx, first, 2) // both streams carried: the budget is full
	const deadline = 30 * time.Second
	require.Eventually(t, func() bool {
		st := b.Server.Hub("mainnet").Stats().Share
		return st != nil && st.Sharing && st.Union == 2 && st.UnionCapacity == 2
	}, deadline, 20*time.Millisecond, "replica B has read A's streams from Redis")

	_, resp, err := dialWS(ctx, demo, b.Mainnet, "/api/v1/ws?feedIDs="+link, "")
	assertBudgetRefusal(t, b, resp, err, "a stream the shared budget cannot carry")
	assert.Zero(t, b.Server.Hub("mainnet").Stats().FeedsWanted, "nothing subscribed on B for the refused client")

	again, _, err := dialWS(ctx, demo, b.Mainnet, "/api/v1/ws?feedIDs="+eth, "")
	require.NoError(t, err, "streams already carried are admitted")
	defer again.CloseNow()
	for _, f := range readFrames(t, ctx, again, 2) {
		assert.Equal(t, eth, f.Report.FeedID)
	}
}

// assertBudgetRefusal checks the answer to an upgrade refused for want of
// upstream connection budget: an error, 503 with Retry-After and a JSON
// message naming ws_max_connections, and the refusal counted once on env.
func assertBudgetRefusal(t *testing.T, env *servertest.Env, resp *http.Response, err error, what string) {
	t.Helper()
	require.Error(t, err, what)
	require.NotNil(t, resp)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.NotEmpty(t, resp.Header.Get("Retry-After"))
	body, _ := io.ReadAll(resp.Body)
	var doc struct{ Error, Message string }
	require.NoError(t, json.Unmarshal(body, &doc), string(body))
	assert.Contains(t, doc.Message, "ws_max_connections")
	assert.Equal(t, 1.0, metricValue(t, env.Registry, "streamgate_ws_client_refusals_total", map[string]string{"network": "mainnet", "reason": "upstream_budget"}))
}
