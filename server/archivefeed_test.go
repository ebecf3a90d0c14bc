package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/archive"
	"streamgate/config"
	"streamgate/feedid"
	"streamgate/server/servertest"
	"streamgate/upstreamsim"
)

// TestArchiveFillsAndRecordsTheStream: an operator's fill asked on the
// admin listener fetches a span of a stream through the gateway's page
// path into the archive; a pinned stream's reports go into the archive as
// the hub delivers them. After a restart on the same directory, pages
// inside the filled span and reports at the seconds the stream carried are
// answered from the archive with no upstream call.
func TestArchiveFillsAndRecordsTheStream(t *testing.T) {
	sim := unlimitedSim(t)
	feeds := liveFeeds(t, sim, 2)
	dir := t.TempDir()
	pinned, err := feedid.Parse(feeds[1])
	require.NoError(t, err)
	rec := &targets{}
	start := func() *servertest.Env {
		return servertest.Start(t, servertest.Options{Simulator: sim, Quiet: true, Upstream: rec.wrap, Config: func(c *config.Config) {
			c.Server.AdminListen = "127.0.0.1:0"
			c.Archive.Backend, c.Archive.Path = config.ArchiveBackendPebble, dir
			n := c.Networks[upstreamsim.Testnet]
			n.Upstream.WSPinned = config.StreamIDs{pinned}
			c.Networks[upstreamsim.Testnet] = n
		}})
	}
	env := start()
	admin := "http://" + env.Server.Addr("admin")

	// The fill: 250 seconds ending two minutes ago.
	to := time.Now().Add(-2 * time.Minute).Unix()
	from := to - 249
	resp, err := http.Post(fmt.Sprintf("%s%s?network=testnet&feedID=%s&from=%d&to=%d", admin, archive.PathFill, feeds[0], from, to), "", nil)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode, string(body))
	require.Eventually(t, func() bool {
		resp, err := http.Get(admin + archive.PathFills)
		require.NoError(t, err)
		defer resp.Body.Close()
		var got struct{ Fills []archive.FillProgress }
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&got))
		require.Len(t, got.Fills, 1)
		require.NotEqual(t, archive.FillFailed, got.Fills[0].State, got.Fills[0].Error)
		return got.Fills[0].State == archive.FillDone && got.Fills[0].Covered == 250
	}, 60*time.Second, 20*time.Millisecond)

	// The stream: wait until the hub delivered a few seconds of the
	// pinned stream, then note them.
	hub := env.Server.Hub(upstreamsim.Testnet)
	require.NotNil(t, hub)
	var carried []int64
	require.Eventually(t, func() bool {
		if _, ts, ok := hub.Latest(pinned); ok {
			if len(carried) == 0 || carried[len(carried)-1] != ts {
				carried = append(carried, ts)
			}
		}
		return len(carried) >= 3
	}, 60*time.Second, 20*time.Millisecond)
	require.NoError(t, env.Server.FlushArchive(context.Background()))
	_ = env.Server.Close()
	rec.take()

	env = start()
	base := reportCalls(sim)
	for _, s := range []int64{from, from + 100, from + 180} {
		target := fmt.Sprintf("/api/v1/reports/page?feedID=%s&startTimestamp=%d&limit=50", feeds[0], s)
		st, xc, body := get(t, env.Testnet, target)
		assert.Equal(t, http.StatusOK, st, body)
		assert.Equal(t, "HIT", xc, "a page inside the filled span: %s", target)
	}
	for _, ts := range carried {
		target := fmt.Sprintf("/api/v1/reports?feedID=%s&timestamp=%d", feeds[1], ts)
		st, xc, body := get(t, env.Testnet, target)
		assert.Equal(t, http.StatusOK, st, body)
		assert.Equal(t, "HIT", xc, "a second the stream carried: %s", target)
	}
	assert.Equal(t, base, reportCalls(sim), "no upstream report call: %v", rec.take())
}
