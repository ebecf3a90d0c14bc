package wsgate_test

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
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

// wsClient reads one gateway WebSocket into memory.
type wsClient struct {
	mu     sync.Mutex
	frames map[string][]int64 // observationsTimestamp by feed, as received
	err    error              // why reading ended; nil while it goes on
	done   chan struct{}
}

func readAll(t *testing.T, ctx context.Context, c *websocket.Conn) *wsClient {
	w := &wsClient{frames: map[string][]int64{}, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			typ, data, err := c.Read(ctx)
			if err == nil && typ != websocket.MessageBinary {
				err = errNotBinary
			}
			var f frame
			if err == nil {
				err = json.Unmarshal(data, &f)
			}
			w.mu.Lock()
			if err != nil {
				w.err = err
				w.mu.Unlock()
				return
			}
			w.frames[f.Report.FeedID] = append(w.frames[f.Report.FeedID], f.Report.ObservationsTimestamp)
			w.mu.Unlock()
		}
	}()
	t.Cleanup(func() { c.CloseNow(); <-w.done })
	return w
}

type wsError string

func (e wsError) Error() string { return string(e) }

const errNotBinary = wsError("a text frame")

func (w *wsClient) of(feed string) []int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]int64(nil), w.frames[feed]...)
}

func (w *wsClient) alive() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err == nil
}

// fastSimulator is a simulator without a rate limit whose WebSocket
// connections look for new reports every 50 ms, for replicas to share.
func fastSimulator(t *testing.T) *upstreamsim.Simulator {
	t.Helper()
	cfg := upstreamsim.Default()
	cfg.RateLimit = 0
	cfg.WSTick = 50 * time.Millisecond
	sim, err := upstreamsim.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { sim.Close() })
	return sim
}

// sharedReplicas starts n gateways on one simulator whose limits, and
// upstream WebSocket connections, are shared through rs; more changes
// their configuration further.
func sharedReplicas(t *testing.T, rs *redistest.Server, sim *upstreamsim.Simulator, n int, more ...func(*config.Config)) []*servertest.Env {
	t.Helper()
	envs := make([]*servertest.Env, n)
	for i := range envs {
		envs[i] = servertest.Start(t, servertest.Options{Quiet: true, Simulator: sim, Config: func(c *config.Config) {
			noReplayCheck(c)
			c.RateLimit.Backend = config.BackendRedis
			c.RateLimit.Redis.URL = rs.URL()
			c.Realtime.ShareLease = 900 * time.Millisecond
			for _, f := range more {
				f(c)
			}
		}})
	}
	return envs
}

// holderOf returns the index of the one replica that holds mainnet's
// chunk, or -1.
func holderOf(envs []*servertest.Env, skip int) int {
	found := -1
	for i, e := range envs {
		if i == skip {
			continue
		}
		st := e.Server.Hub("mainnet").Stats()
		if st.Share == nil || !st.Share.Sharing {
			return -1
		}
		if st.Share.Held > 0 {
			if found >= 0 {
				return -1
			}
			found = i
		}
	}
	return found
}

// Three replicas, one simulator, one Redis, WebSocket clients on each:
// the upstream sees one replica's connection; every client gets every
// report of its streams, in order, once; a follower answers latest from
// the stream with no REST call; when the holder closes another takes
// over, and while Redis hangs every replica holds its own connection; the
// clients on the remaining replicas stay connected throughout.
func TestWSSharedByReplicas(t *testing.T) {
	rs := redistest.New(t)
	simCfg := upstreamsim.Default()
	simCfg.RateLimit = 0
	sim, err := upstreamsim.New(simCfg)
	require.NoError(t, err)
	t.Cleanup(func() { sim.Close() })
	envs := sharedReplicas(t, rs, sim, 3)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	demo := servertest.Demo()
	btc := envs[0].FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
	eth := envs[0].FeedID(t, upstreamsim.Mainnet, "ETH", "USD", "V3")
	feeds := []string{btc, eth}

	var clients []*wsClient
	clientOf := map[*wsClient]int{}
	for i, e := range envs {
		for range 2 {
			c, _, err := dialWS(ctx, demo, e.Mainnet, "/api/v1/ws?feedIDs="+btc+","+eth, "")
			require.NoError(t, err, "replica %d", i)
			w := readAll(t, ctx, c)
			clients = append(clients, w)
			clientOf[w] = i
		}
	}
	const deadline = 30 * time.Second
	open := func() int64 { return sim.Counters().WSTotal(upstreamsim.Mainnet).Open }
	require.Eventually(t, func() bool { return holderOf(envs, -1) >= 0 && open() == 1 }, deadline, 20*time.Millisecond,
		"one replica holds the chunk, one upstream connection")

	// A sustained period: 5 more reports of each stream on every client.
	accepted := sim.Counters().WSTotal(upstreamsim.Mainnet).Accepted
	from := make([]map[string]int, len(clients))
	for i, w := range clients {
		from[i] = map[string]int{btc: len(w.of(btc)), eth: len(w.of(eth))}
	}
	grown := func(ws []*wsClient, from []map[string]int, n int) func() bool {
		return func() bool {
			for i, w := range ws {
				for _, f := range feeds {
					if len(w.of(f)) < from[i][f]+n {
						return false
					}
				}
			}
			return true
		}
	}
	require.Eventually(t, grown(clients, from, 5), deadline, 20*time.Millisecond)
	assert.Equal(t, accepted, sim.Counters().WSTotal(upstreamsim.Mainnet).Accepted, "no other upstream connection meanwhile")
	assert.Equal(t, int64(1), open())
	for i, w := range clients {
		require.True(t, w.alive(), "client %d", i)
		for _, f := range feeds {
			got := w.of(f)[max(from[i][f]-1, 0):]
			for j := 1; j < len(got); j++ {
				require.Equal(t, got[j-1]+1, got[j], "client %d (replica %d), stream %s: every report, once, in order", i, clientOf[w], f)
			}
		}
	}

	// latest on a follower, from the stream: no REST latest upstream.
	holder := holderOf(envs, -1)
	require.GreaterOrEqual(t, holder, 0)
	follower := (holder + 1) % len(envs)
	before := sim.Counters().ByEndpoint(upstreamsim.Mainnet, upstreamsim.EndpointLatest)
	for range 3 {
		resp, body := demo.Get(t, envs[follower].Mainnet, "/api/v1/reports/latest?feedID="+btc)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		assert.Equal(t, "STREAM", resp.Header.Get("X-Cache"))
		var f frame
		require.NoError(t, json.Unmarshal(body, &f))
		assert.Equal(t, btc, f.Report.FeedID)
	}
	assert.Equal(t, before, sim.Counters().ByEndpoint(upstreamsim.Mainnet, upstreamsim.EndpointLatest), "no REST latest call upstream")

	// The holder closes: it hands the chunk over to another replica; the
	// clients of the others stay connected and miss no report.
	var rest []*wsClient
	from = from[:0]
	for _, w := range clients {
		if clientOf[w] != holder {
			rest = append(rest, w)
			from = append(from, map[string]int{btc: len(w.of(btc)), eth: len(w.of(eth))})
		}
	}
	require.NoError(t, envs[holder].Server.Close())
	require.Eventually(t, func() bool { return holderOf(envs, holder) >= 0 && open() == 1 }, deadline, 20*time.Millisecond,
		"another replica holds the chunk")
	require.Eventually(t, grown(rest, from, 3), deadline, 20*time.Millisecond)
	for i, w := range rest {
		require.True(t, w.alive(), "client %d", i)
		for _, f := range feeds {
			got := w.of(f)[max(from[i][f]-1, 0):]
			for j := 1; j < len(got); j++ {
				require.Equal(t, got[j-1]+1, got[j], "client %d, stream %s: no report missed across the handover", i, f)
			}
		}
	}

	// Redis hangs: the replicas left hold their own connections; their
	// clients keep receiving.
	rs.Pause()
	paused := true
	defer func() {
		if paused {
			rs.Resume()
		}
	}()
	require.Eventually(t, func() bool {
		for i, e := range envs {
			if i != holder && e.Server.Hub("mainnet").Stats().Share.Sharing {
				return false
			}
		}
		return open() == 2
	}, deadline, 20*time.Millisecond, "every replica falls back to its own connection")
	from = from[:0]
	for _, w := range rest {
		from = append(from, map[string]int{btc: len(w.of(btc)), eth: len(w.of(eth))})
	}
	require.Eventually(t, grown(rest, from, 3), deadline, 20*time.Millisecond)
	rs.Resume()
	paused = false
	require.Eventually(t, func() bool { return holderOf(envs, holder) >= 0 && open() == 1 }, deadline, 20*time.Millisecond,
		"shared again once Redis answers")

	for i, w := range rest {
		require.True(t, w.alive(), "client %d stays connected", i)
		for _, f := range feeds {
			got := w.of(f)
			for j := 1; j < len(got); j++ {
				require.Less(t, got[j-1], got[j], "client %d, stream %s: no duplicate", i, f)
			}
		}
	}
}
