package proxy_test

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
	"streamgate/proxy/proxytest"
	"streamgate/simulator"
)

// TestWSBudgetFullIsRefused: with the upstream connection budget full, a
// client asking for a stream it cannot carry is refused before the upgrade
// (503 with a JSON error and Retry-After, counted), instead of getting a
// connection that never carries a frame; a client of streams already
// carried is still accepted.
func TestWSBudgetFullIsRefused(t *testing.T) {
	env := proxytest.Start(t, proxytest.Options{Config: func(c *config.Config) {
		up := &c.Networks["mainnet"].Upstream
		up.WSMaxConnections = 1
		up.WSFeedsPerConnection = 2
	}})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	demo := proxytest.Demo()
	btc := env.FeedID(t, simulator.Mainnet, "BTC", "USD", "V3")
	eth := env.FeedID(t, simulator.Mainnet, "ETH", "USD", "V3")
	link := env.FeedID(t, simulator.Mainnet, "LINK", "USD", "V3")

	first, _, err := dialWS(ctx, demo, env.Mainnet, "/api/v1/ws?feedIDs="+btc+","+eth, "")
	require.NoError(t, err)
	defer first.CloseNow()
	readFrames(t, ctx, first, 2) // both streams carried: the budget is full

	_, resp, err := dialWS(ctx, demo, env.Mainnet, "/api/v1/ws?feedIDs="+link, "")
	require.Error(t, err, "a stream the budget cannot carry")
	require.NotNil(t, resp)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.NotEmpty(t, resp.Header.Get("Retry-After"))
	body, _ := io.ReadAll(resp.Body)
	var doc struct{ Error, Message string }
	require.NoError(t, json.Unmarshal(body, &doc), string(body))
	assert.Contains(t, doc.Message, "ws_max_connections")
	assert.Equal(t, 1.0, counterValue(t, env, "streamgate_ws_client_refusals_total", "mainnet", "upstream_budget"))

	again, _, err := dialWS(ctx, demo, env.Mainnet, "/api/v1/ws?feedIDs="+eth, "")
	require.NoError(t, err, "streams already carried are admitted")
	defer again.CloseNow()
	readFrames(t, ctx, again, 1)
}
