package wsgate_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/config"
	"streamgate/internal/testing/redistest"
	"streamgate/server/servertest"
	"streamgate/upstreamsim"
)

// TestWSTeamConnectionsAcrossReplicas: with the Redis limits,
// realtime.team_connections holds for the team on all replicas together;
// a connection closed gives its slot back.
func TestWSTeamConnectionsAcrossReplicas(t *testing.T) {
	const limit = 3
	url := redistest.Start(t)
	envs := servertest.StartReplicas(t, 3, servertest.Options{Quiet: true, Config: func(c *config.Config) {
		noReplayCheck(c)
		c.RateLimit.Backend = config.BackendRedis
		c.RateLimit.Redis.URL = url
		c.Realtime.TeamConnections = limit
		c.Realtime.Share = false
	}})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	btc := envs[0].FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
	var open []*websocket.Conn
	refused := 0
	for i := range 3 * limit {
		c, resp, err := dialWS(ctx, servertest.Demo(), envs[i%3].Mainnet, "/api/v1/ws?feedIDs="+btc, "")
		if err != nil {
			require.NotNil(t, resp, "%v", err)
			assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
			refused++
			continue
		}
		open = append(open, c)
		t.Cleanup(func() { c.CloseNow() })
	}
	assert.Len(t, open, limit, "connections accepted on three replicas for a limit of %d", limit)
	assert.Equal(t, 3*limit-limit, refused)

	require.NoError(t, open[0].Close(websocket.StatusNormalClosure, "done"))
	require.Eventually(t, func() bool {
		c, _, err := dialWS(ctx, servertest.Demo(), envs[2].Mainnet, "/api/v1/ws?feedIDs="+btc, "")
		if err != nil {
			return false
		}
		t.Cleanup(func() { c.CloseNow() })
		return true
	}, 30*time.Second, 50*time.Millisecond, "a closed connection's slot is free again")
}
