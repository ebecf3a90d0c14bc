package wsgate_test

import (
	"context"
	"math/bits"
	"strings"
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

// TestWSDrainResumesEveryClientOfATeam: a team with more stream clients
// on a replica than realtime.resume_records_per_team (here 4 for 11
// clients, as 1,000 clients of one team over three replicas are for the
// default of 200) loses none of their seconds when that replica is
// drained: every client, reconnecting to the other replica after the
// upstream has published seconds it missed, gets every second once and in
// order. The bound is for the records of clients that left on their own;
// the records of open connections and those the drain leaves are not
// dropped (before, they were, and the clients dropped started live). The
// simulator keeps its real limit (10 requests per second per key and
// endpoint): the other replica, new to the streams, fills them over REST.
func TestWSDrainResumesEveryClientOfATeam(t *testing.T) {
	rs := redistest.New(t)
	sim, err := upstreamsim.New(upstreamsim.Default())
	require.NoError(t, err)
	t.Cleanup(func() { sim.Close() })
	const perTeam = 4
	envs := sharedReplicas(t, rs, sim, 2, func(c *config.Config) {
		c.Realtime.ResumeWindow = 30 * time.Second
		c.Realtime.ResumeRecordsPerTeam = perTeam
		c.Realtime.ResumeRecords = 2 * perTeam
		c.Realtime.DrainDelay = 100 * time.Millisecond
	})
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	demo := servertest.Demo()
	var all []string
	for _, b := range []string{"BTC", "ETH", "LINK", "SOL"} {
		all = append(all, envs[0].FeedID(t, upstreamsim.Mainnet, b, "USD", "V3"))
	}
	// Eleven identities of one key (one team): every set of two or more
	// of the four streams.
	type client struct {
		feeds         []string
		target        string
		before, after *wsClient
	}
	var clients []*client
	for mask := 1; mask < 1<<len(all); mask++ {
		if bits.OnesCount(uint(mask)) < 2 {
			continue
		}
		c := &client{}
		for i, f := range all {
			if mask&(1<<i) != 0 {
				c.feeds = append(c.feeds, f)
			}
		}
		c.target = "/api/v1/ws?feedIDs=" + strings.Join(c.feeds, ",")
		conn, _, err := dialWS(ctx, demo, envs[0].Mainnet, c.target, "")
		require.NoError(t, err)
		c.before = readAll(t, ctx, conn)
		clients = append(clients, c)
	}
	require.Greater(t, len(clients), 2*perTeam)
	for _, c := range clients {
		awaitSeconds(t, c.before, c.feeds, 2)
	}

	// The replica is drained, as SIGTERM drains it: every client is closed
	// with 1001.
	shut := make(chan error, 1)
	go func() {
		sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer scancel()
		shut <- envs[0].Server.Shutdown(sctx)
	}()
	froms := make([]map[string]int64, len(clients))
	var newest int64
	for i, c := range clients {
		<-c.before.done
		c.before.mu.Lock()
		err := c.before.err
		c.before.mu.Unlock()
		require.Equal(t, websocket.StatusGoingAway, websocket.CloseStatus(err), "closed by the drain: %v", err)
		froms[i] = lastOf(t, c.before, c.feeds)
		for _, ts := range froms[i] {
			newest = max(newest, ts)
		}
	}
	require.NoError(t, <-shut)
	// Away until the upstream has published seconds every client missed.
	require.Eventually(t, func() bool {
		for _, f := range all {
			if _, last, ok := sim.Window(upstreamsim.Mainnet, f); !ok || last < newest+2 {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond, "seconds published while the clients are away")

	for _, c := range clients {
		conn, _, err := dialWS(ctx, demo, envs[1].Mainnet, c.target, "")
		require.NoError(t, err)
		c.after = readAll(t, ctx, conn)
	}
	// Every client, on every stream, up to a second past the reconnects.
	end := newest + 4
	require.Eventually(t, func() bool {
		for _, c := range clients {
			for _, f := range c.feeds {
				if ts := c.after.of(f); len(ts) == 0 || ts[len(ts)-1] < end {
					return false
				}
			}
		}
		return true
	}, 60*time.Second, 50*time.Millisecond, "every client reaches second %d on every stream", end)

	missing, repeated := 0, 0
	for i, c := range clients {
		for _, f := range c.feeds {
			seq := append(c.before.of(f), c.after.of(f)...)
			for j := 1; j < len(seq) && seq[j] <= end; j++ {
				switch d := seq[j] - seq[j-1]; {
				case d <= 0:
					repeated++
				case d > 1:
					missing += int(d - 1)
				}
			}
			assert.Equal(t, froms[i][f]+1, c.after.of(f)[0], "client %d (%d streams) resumes %s right after its last second", i, len(c.feeds), f)
		}
	}
	assert.Zero(t, missing, "(stream, second) pairs missing")
	assert.Zero(t, repeated, "(stream, second) pairs repeated or out of order")
	assert.Equal(t, float64(len(clients)), metricValue(t, envs[1].Registry, "streamgate_ws_resumed_total", map[string]string{"network": "mainnet"}),
		"every client resumed")
	assert.Zero(t, metricValue(t, envs[0].Registry, "streamgate_ws_resume_records_dropped_total", map[string]string{"reason": "team"}),
		"no record of an open or drained connection dropped")
}
