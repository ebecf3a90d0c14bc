package wsgate_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/catalog"
	"streamgate/config"
	"streamgate/internal/testing/redistest"
	"streamgate/server/servertest"
	"streamgate/upstreamsim"
)

// wsGauge counts, at the upstream, the WebSocket upgrades and the
// connections open at once (the simulator's handler of /api/v1/ws lasts
// as long as its connection).
type wsGauge struct {
	upgrades, cur, peak atomic.Int64
}

func (g *wsGauge) wrap(_ string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/ws" {
			h.ServeHTTP(w, r)
			return
		}
		g.upgrades.Add(1)
		n := g.cur.Add(1)
		for p := g.peak.Load(); n > p && !g.peak.CompareAndSwap(p, n); p = g.peak.Load() {
		}
		var once sync.Once
		done := func() { once.Do(func() { g.cur.Add(-1) }) }
		defer done()
		h.ServeHTTP(&gaugeWriter{ResponseWriter: w, done: done}, r)
	})
}

// gaugeWriter ends the count of a connection when the upstream closes it,
// a moment before its handler returns.
type gaugeWriter struct {
	http.ResponseWriter
	done func()
}

func (w *gaugeWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	return &gaugeConn{Conn: c, done: w.done}, brw, nil
}

type gaugeConn struct {
	net.Conn
	done func()
}

func (c *gaugeConn) Close() error {
	c.done()
	return c.Conn.Close()
}

// TestWSChurnKeepsTheUpstreamCap: 40 clients each adding one stream
// within about 1.2 s, then REST demand for 60 streams, never hold more
// upstream connections than ws_max_connections at any instant, switches
// in flight included, with two HA origins (6: two chunks and room for a
// switch); every client still gets its stream. The same with stream
// sharing on and its Redis down (each replica falls back to its own
// connections).
func TestWSChurnKeepsTheUpstreamCap(t *testing.T) {
	const maxConns = 6
	start := func(t *testing.T, g *wsGauge, cfg func(*config.Config)) *servertest.Env {
		return servertest.Start(t, servertest.Options{
			Quiet: true,
			Sim: func(c *upstreamsim.Config) {
				c.HAOrigins = []string{"001", "002"}
				c.WSMaxConnsPerKey = -1 // the gateway's own cap is under test
			},
			Upstream: g.wrap,
			Config: func(c *config.Config) {
				c.Networks["mainnet"].Upstream.WSMaxConnections = maxConns
				c.Networks["testnet"].Upstream.WSURL = ""
				if cfg != nil {
					cfg(c)
				}
			},
		})
	}
	t.Run("memory", func(t *testing.T) {
		var g wsGauge
		churn(t, start(t, &g, nil), &g, maxConns)
	})
	t.Run("shared, Redis down", func(t *testing.T) {
		rs := redistest.New(t)
		var g wsGauge
		env := start(t, &g, func(c *config.Config) {
			noReplayCheck(c)
			c.RateLimit.Backend = config.BackendRedis
			c.RateLimit.Redis.URL = rs.URL()
			c.Realtime.ShareLease = 900 * time.Millisecond
		})
		require.Eventually(t, func() bool {
			st := env.Server.Hub("mainnet").Stats()
			return st.Share != nil && st.Share.Sharing
		}, 30*time.Second, 20*time.Millisecond, "sharing through Redis")
		rs.Stop()
		require.Eventually(t, func() bool { return !env.Server.Hub("mainnet").Stats().Share.Sharing },
			30*time.Second, 20*time.Millisecond, "fallen back once Redis is down")
		churn(t, env, &g, maxConns)
	})
}

func churn(t *testing.T, env *servertest.Env, g *wsGauge, limit int64) {
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	var streams []catalog.Stream // those publishing now
	for _, s := range env.Sim.Streams(upstreamsim.Mainnet) {
		if _, last, ok := env.Sim.Window(upstreamsim.Mainnet, s.FeedID); ok && last >= time.Now().Unix()-60 {
			streams = append(streams, s)
		}
	}
	require.GreaterOrEqual(t, len(streams), 60)

	readers := make([]*wsReader, 40)
	var wg sync.WaitGroup
	for i := range readers {
		time.Sleep(30 * time.Millisecond) // 40 clients within about 1.2 s
		wg.Go(func() {
			c, _, err := dialWS(ctx, servertest.Demo(), env.Mainnet, "/api/v1/ws?feedIDs="+streams[i].FeedID, "")
			if !assert.NoError(t, err, "client %d", i) {
				return
			}
			t.Cleanup(func() { c.CloseNow() })
			readers[i] = readInBackground(ctx, c)
		})
	}
	wg.Wait()
	var why string
	if !assert.Eventually(t, func() bool {
		missing := 0
		for i, r := range readers {
			if r == nil || r.count(streams[i].FeedID, 0) == 0 {
				missing++
			}
		}
		why = fmt.Sprintf("%d missing, hub %+v", missing, env.Server.Hub("mainnet").Stats())
		return missing == 0
	}, 60*time.Second, 50*time.Millisecond, "every client gets its stream") {
		t.Fatal(why)
	}
	t.Logf("clients: %d upgrades upstream, %d at once at most", g.upgrades.Load(), g.peak.Load())
	assert.LessOrEqual(t, g.peak.Load(), limit, "upstream connections at once, clients churning")

	// REST demand: three latest polls for each of 60 streams, all at once.
	var polls sync.WaitGroup
	for _, s := range streams[:60] {
		polls.Go(func() {
			for range 3 {
				resp, _ := servertest.Demo().Get(t, env.Mainnet, "/api/v1/reports/latest?feedID="+s.FeedID)
				assert.NotEqual(t, http.StatusInternalServerError, resp.StatusCode)
			}
		})
	}
	polls.Wait()
	require.Eventually(t, func() bool {
		st := env.Server.Hub("mainnet").Stats()
		return st.FeedsSubscribed >= 60
	}, 60*time.Second, 50*time.Millisecond, "the demand is carried")
	t.Logf("with demand: %d upgrades upstream, %d at once at most", g.upgrades.Load(), g.peak.Load())
	assert.LessOrEqual(t, g.peak.Load(), limit, "upstream connections at once, demand churning")
}
