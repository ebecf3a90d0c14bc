package wsgate_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/internal/testing/redistest"
	"streamgate/server/servertest"
	"streamgate/upstreamsim"
)

// TestWSResumeWhileRedisIsAway: a client streams on one replica; Redis
// stops answering (paused: a failover under way), the client's connection
// is lost, and it reconnects to the other replica, which has no
// subscriber of its streams, while Redis is still away: its resume
// record cannot be read. It does not start from that replica's first
// live frame: it gets the reports of a window before now first (some
// again), and every second after the last one it received reaches it.
// The client is counted (streamgate_ws_resume_unread_total). Before, an
// unreadable record was taken for none, and the seconds between the
// client's last report and the replica's first live frame were lost,
// uncounted.
func TestWSResumeWhileRedisIsAway(t *testing.T) {
	rs := redistest.New(t)
	sim := fastSimulator(t)
	envs := sharedReplicas(t, rs, sim, 2)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	demo := servertest.Demo()
	feeds := []string{
		envs[0].FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3"),
		envs[0].FeedID(t, upstreamsim.Mainnet, "ETH", "USD", "V3"),
		envs[0].FeedID(t, upstreamsim.Mainnet, "LINK", "USD", "V3"),
	}
	target := "/api/v1/ws?feedIDs=" + feeds[0] + "," + feeds[1] + "," + feeds[2]

	c, _, err := dialWS(ctx, demo, envs[0].Mainnet, target, "")
	require.NoError(t, err)
	w := readAll(t, ctx, c)
	awaitSeconds(t, w, feeds, 3)

	rs.Pause()
	t.Cleanup(rs.Resume) // a test that fails does not leave it stopped
	c.CloseNow()         // lost: no close frame
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
	}, 20*time.Second, 20*time.Millisecond, "seconds published while the client is away")
	require.Zero(t, envs[1].Server.Hub("mainnet").Stats().FeedsWanted, "the other replica carries none of the client's streams")

	c2, _, err := dialWS(ctx, demo, envs[1].Mainnet, target, "")
	require.NoError(t, err)
	w2 := readAll(t, ctx, c2)
	awaitSeconds(t, w2, feeds, 12)
	for _, f := range feeds {
		got := slices.Clone(w2.of(f))
		slices.Sort(got)
		got = slices.Compact(got)
		require.LessOrEqual(t, got[0], from[f]+1, "%s: the second after the last received (%d) is there: %v", f, from[f], got)
		for i := 1; i < len(got); i++ {
			require.Equal(t, got[i-1]+1, got[i], "%s: every second once at least: %v", f, got)
		}
		assert.True(t, slices.IsSorted(w2.of(f)), "%s: in order: %v", f, w2.of(f))
	}
	assert.Equal(t, 1.0, metricValue(t, envs[1].Registry, "streamgate_ws_resume_unread_total", map[string]string{"network": "mainnet"}))
}
