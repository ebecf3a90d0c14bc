package wsgate_test

import (
	"context"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/server/servertest"
	"streamgate/upstreamsim"
)

// TestWSClientPingFlood: a client's pings are answered within a rate; a
// client that keeps sending them faster is closed (1008, the reason
// named) instead of being answered without end.
func TestWSClientPingFlood(t *testing.T) {
	env := servertest.Start(t, servertest.Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	btc := env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
	c, _, err := dialWS(ctx, servertest.Demo(), env.Mainnet, "/api/v1/ws?feedIDs="+btc, "")
	require.NoError(t, err)
	defer c.CloseNow()
	r := readInBackground(ctx, c)
	require.NoError(t, c.Ping(ctx), "a ping is answered")

	answered := 0
	for range 1000 {
		pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
		err := c.Ping(pctx)
		pcancel()
		if err != nil {
			break
		}
		answered++
	}
	t.Logf("%d pings answered", answered)
	assert.Less(t, answered, 1000, "a flood of pings is cut off")
	select {
	case <-r.done:
	case <-ctx.Done():
		t.Fatal("the connection stayed open")
	}
	assert.Equal(t, websocket.StatusPolicyViolation, websocket.CloseStatus(r.err), "%v", r.err)
	assert.Contains(t, r.err.Error(), "too many frames")
}
