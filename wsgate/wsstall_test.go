package wsgate_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/config"
	"streamgate/server/servertest"
	"streamgate/upstreamsim"
)

// TestLatestFromAStalledStream: while the upstream stream is silent (a
// stall the hub has not yet detected), latest is answered from the stream
// only while its report is no older than REST would answer it stale
// (a second, latest_ttl and latest_max_stale); then from REST.
func TestLatestFromAStalledStream(t *testing.T) {
	env := servertest.Start(t, servertest.Options{Config: func(c *config.Config) {
		c.Cache.LatestTTL = 500 * time.Millisecond
		c.Cache.LatestMaxStale = time.Second
	}})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	demo := servertest.Demo()
	btc := env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
	c, _, err := dialWS(ctx, demo, env.Mainnet, "/api/v1/ws?feedIDs="+btc, "")
	require.NoError(t, err)
	defer c.CloseNow()
	readFrames(t, ctx, c, 1)
	latest := func() (string, int) {
		resp, body := demo.Get(t, env.Mainnet, "/api/v1/reports/latest?feedID="+btc)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		age, _ := strconv.Atoi(resp.Header.Get("Age"))
		return resp.Header.Get("X-Cache"), age
	}
	require.Eventually(t, func() bool { x, _ := latest(); return x == "STREAM" }, 30*time.Second, 50*time.Millisecond)

	require.NoError(t, env.Sim.SetFaults(upstreamsim.Faults{WSStall: true}))
	defer env.Sim.SetFaults(upstreamsim.Faults{})
	// Until the hub detects the stall (10 s without frame or pong).
	streamed, rest := 0, 0 // answers of each kind
	for end := time.Now().Add(7 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		x, age := latest()
		if x == "STREAM" {
			streamed++
			assert.LessOrEqual(t, age, 3, "a streamed answer no older than REST's stale bound (1s + 500ms + 1s)")
		} else {
			rest++
		}
	}
	t.Logf("%d streamed, %d from REST", streamed, rest)
	assert.Positive(t, rest, "answered from REST once the stream's report is too old")
}
