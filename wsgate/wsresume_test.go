package wsgate_test

import (
	"context"
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

// lastOf returns the last second received of each feed, failing when one
// has none.
func lastOf(t *testing.T, w *wsClient, feeds []string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, f := range feeds {
		ts := w.of(f)
		require.NotEmpty(t, ts, f)
		out[f] = ts[len(ts)-1]
	}
	return out
}

// awaitSeconds waits until w has n frames of every feed.
func awaitSeconds(t *testing.T, w *wsClient, feeds []string, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, f := range feeds {
			if len(w.of(f)) < n {
				return false
			}
		}
		return true
	}, 30*time.Second, 20*time.Millisecond, "%d frames of each stream", n)
}

// awaitPast waits until w has received, of every feed in from, the
// second n after the one given: the hub has then published (and kept)
// every second up to it, whatever w had received when from was taken.
func awaitPast(t *testing.T, w *wsClient, from map[string]int64, n int64) {
	t.Helper()
	require.Eventually(t, func() bool {
		for f, last := range from {
			ts := w.of(f)
			if len(ts) == 0 || ts[len(ts)-1] < last+n {
				return false
			}
		}
		return true
	}, 30*time.Second, 20*time.Millisecond, "second +%d of each stream", n)
}

// followsOn checks that w's frames of each feed start right after from
// and go on second by second.
func followsOn(t *testing.T, w *wsClient, from map[string]int64) {
	t.Helper()
	for f, last := range from {
		ts := w.of(f)
		require.NotEmpty(t, ts)
		assert.Equal(t, last+1, ts[0], "%s resumes right after the last second received", f)
		for i := 1; i < len(ts); i++ {
			require.Equal(t, ts[i-1]+1, ts[i], "%s: %v", f, ts)
		}
	}
}

// TestWSResume: a client whose connection was lost (no close frame) and
// that comes back with the same key and streams within the window gets
// every second it missed, in order, once, then live ones; a client that
// closed its connection itself starts live.
func TestWSResume(t *testing.T) {
	env := servertest.Start(t, servertest.Options{Sim: func(c *upstreamsim.Config) { c.WSTick = 50 * time.Millisecond }})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	demo := servertest.Demo()
	btc := env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
	eth := env.FeedID(t, upstreamsim.Mainnet, "ETH", "USD", "V3")
	feeds := []string{btc, eth}
	target := "/api/v1/ws?feedIDs=" + btc + "," + eth
	// Another client keeps the streams carried while the first is away.
	keep, _, err := dialWS(ctx, demo, env.Mainnet, "/api/v1/ws?feedIDs="+eth+","+btc+","+env.FeedID(t, upstreamsim.Mainnet, "LINK", "USD", "V3"), "")
	require.NoError(t, err)
	kw := readAll(t, ctx, keep)

	c, _, err := dialWS(ctx, demo, env.Mainnet, target, "")
	require.NoError(t, err)
	w := readAll(t, ctx, c)
	awaitSeconds(t, w, feeds, 2)
	c.CloseNow() // lost: no close frame
	<-w.done
	from := lastOf(t, w, feeds)
	awaitPast(t, kw, from, 2) // two seconds away

	// Same key, same streams in another order and spelling: resumed.
	c2, _, err := dialWS(ctx, demo, env.Mainnet, "/api/v1/ws?feedIDs="+eth+"%2C"+btc, "")
	require.NoError(t, err)
	w2 := readAll(t, ctx, c2)
	awaitSeconds(t, w2, feeds, 5)
	followsOn(t, w2, from)
	assert.Equal(t, 1.0, metricValue(t, env.Registry, "streamgate_ws_resumed_total", map[string]string{"network": "mainnet"}))
	assert.GreaterOrEqual(t, metricValue(t, env.Registry, "streamgate_ws_replayed_reports_total", map[string]string{"network": "mainnet"}), 4.0)

	// Closed by the client itself: the next connection starts live.
	require.NoError(t, c2.Close(websocket.StatusNormalClosure, ""))
	<-w2.done
	last := lastOf(t, w2, feeds)
	awaitPast(t, kw, last, 2)
	c3, _, err := dialWS(ctx, demo, env.Mainnet, target, "")
	require.NoError(t, err)
	w3 := readAll(t, ctx, c3)
	awaitSeconds(t, w3, feeds, 1)
	assert.Greater(t, w3.of(btc)[0], last[btc]+1, "no replay after the client's own close")
	assert.Equal(t, 1.0, metricValue(t, env.Registry, "streamgate_ws_resumed_total", map[string]string{"network": "mainnet"}))
}

// TestWSResumeOnAnotherReplica: with the replicas sharing Redis, a client
// whose replica is gone resumes on another one.
func TestWSResumeOnAnotherReplica(t *testing.T) {
	rs := redistest.New(t)
	sim := fastSimulator(t)
	envs := sharedReplicas(t, rs, sim, 2, func(c *config.Config) { c.Realtime.ResumeWindow = 30 * time.Second })
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	demo := servertest.Demo()
	btc := envs[0].FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
	eth := envs[0].FeedID(t, upstreamsim.Mainnet, "ETH", "USD", "V3")
	feeds := []string{btc, eth}
	target := "/api/v1/ws?feedIDs=" + btc + "," + eth

	c, _, err := dialWS(ctx, demo, envs[0].Mainnet, target, "")
	require.NoError(t, err)
	w := readAll(t, ctx, c)
	awaitSeconds(t, w, feeds, 3)
	// The replica shuts down: the client is closed with 1001, its
	// watermarks are in Redis.
	envs[0].Server.Close()
	<-w.done
	from := lastOf(t, w, feeds)
	// Away until the upstream has published seconds the client missed.
	require.Eventually(t, func() bool {
		for _, f := range feeds {
			if _, last, ok := sim.Window(upstreamsim.Mainnet, f); !ok || last < from[f]+2 {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond, "seconds published while the client is away")

	c2, _, err := dialWS(ctx, demo, envs[1].Mainnet, target, "")
	require.NoError(t, err)
	w2 := readAll(t, ctx, c2)
	awaitSeconds(t, w2, feeds, 4)
	followsOn(t, w2, from)
	assert.Equal(t, 1.0, metricValue(t, envs[1].Registry, "streamgate_ws_resumed_total", map[string]string{"network": "mainnet"}))
}
