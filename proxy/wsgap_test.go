package proxy_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/server/servertest"
	"streamgate/upstreamsim"
)

// TestWSOutageBackfilled: a full upstream outage (REST and WebSocket
// refused, connections dropped) keeps the client connected, and once the
// upstream is back the seconds of the outage arrive over REST, before the
// newer ones: every second of every stream, in order, once.
func TestWSOutageBackfilled(t *testing.T) {
	env := servertest.Start(t, servertest.Options{Sim: func(c *upstreamsim.Config) { c.WSTick = 50 * time.Millisecond }})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	btc := env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
	eth := env.FeedID(t, upstreamsim.Mainnet, "ETH", "USD", "V3")
	c, _, err := servertest.Demo().DialWS(ctx, env.Mainnet, "/api/v1/ws?feedIDs="+btc+","+eth, "")
	require.NoError(t, err)
	defer c.CloseNow()

	got := map[string][]int64{}
	read := func(n int) {
		for _, f := range servertest.ReadFrames(t, ctx, c, n) {
			got[f.Report.FeedID] = append(got[f.Report.FeedID], f.Report.ObservationsTimestamp)
		}
	}
	read(4)
	env.Sim.Outage(2500 * time.Millisecond)
	end := time.Now().Add(2500 * time.Millisecond).Unix()
	for got[btc][len(got[btc])-1] < end+2 || got[eth][len(got[eth])-1] < end+2 {
		read(1)
	}
	for _, f := range []string{btc, eth} {
		ts := got[f]
		for i := 1; i < len(ts); i++ {
			require.Equal(t, ts[i-1]+1, ts[i], "%s: second %d follows %d: %v", f, i, ts[i-1], ts)
		}
	}
	assert.Positive(t, metricValue(t, env.Registry, "streamgate_ws_backfilled_seconds_total", map[string]string{"network": "mainnet"}))
	assert.Zero(t, metricValue(t, env.Registry, "streamgate_ws_gaps_unfilled_total", map[string]string{"network": "mainnet"}))
}
