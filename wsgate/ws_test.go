package wsgate_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"streamgate/config"
	"streamgate/server/servertest"
	"streamgate/upstreamsim"
)

// frame is the part of a stream frame the tests read.
type frame = servertest.Frame

// dialWS opens a WebSocket to the gateway at base (http://…) for target,
// signed by c over signedTarget (the target itself when empty).
func dialWS(ctx context.Context, c *servertest.Client, base, target, signedTarget string) (*websocket.Conn, *http.Response, error) {
	return c.DialWS(ctx, base, target, signedTarget)
}

// readFrames reads n frames from conn.
func readFrames(t *testing.T, ctx context.Context, conn *websocket.Conn, n int) []frame {
	t.Helper()
	return servertest.ReadFrames(t, ctx, conn, n)
}

// metricValue returns the value of the counter or gauge name with exactly
// labels in reg, 0 if absent.
func metricValue(t testing.TB, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	return servertest.MetricValue(t, reg, name, labels)
}

// noReplayCheck turns replay protection off: at a clock that stands still,
// the same request signed twice carries the same signature.
func noReplayCheck(c *config.Config) { c.Auth.ReplayProtection = false }

func wsOpen(env *servertest.Env) int64 { return env.Sim.Counters().WSTotal("").Open }

// TestWSThroughTheGateway: many clients share the gateway's few upstream
// connections; each gets exactly its own streams, in order, once; both
// signed forms are accepted; refused clients cost the upstream nothing.
func TestWSThroughTheGateway(t *testing.T) {
	env := servertest.Start(t, servertest.Options{Sim: func(c *upstreamsim.Config) { c.WSTick = 50 * time.Millisecond }})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	demo, research := servertest.Demo(), servertest.Research()
	btc := env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
	eth := env.FeedID(t, upstreamsim.Mainnet, "ETH", "USD", "V3")

	// Refused before anything goes upstream.
	_, resp, err := dialWS(ctx, research, env.Mainnet, "/api/v1/ws?feedIDs="+btc, "")
	require.Error(t, err)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "research may not use mainnet")
	_, resp, err = dialWS(ctx, demo, env.Mainnet, "/api/v1/ws?feedIDs="+btc+",0x"+strings.Repeat("ab", 32), "")
	require.Error(t, err)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "one unknown stream refuses the connection")
	wrong := &servertest.Client{Key: config.DemoKeyID, Secret: "wrong-secret-0123456789"}
	_, resp, err = dialWS(ctx, wrong, env.Mainnet, "/api/v1/ws?feedIDs="+btc, "")
	require.Error(t, err)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	assert.Zero(t, env.Sim.Counters().WSTotal("").Accepted, "nothing went upstream for a refused client")

	// 64 clients, each on one or both streams, signed in both forms.
	const clients = 64
	conns := make([]*websocket.Conn, clients)
	for i := range clients {
		target, signed := "/api/v1/ws?feedIDs="+btc, ""
		switch i % 3 {
		case 1:
			target = "/api/v1/ws?feedIDs=" + btc + "%2C" + eth // the Go client's comma
		case 2:
			// Signed as /api/v1/ws? and the raw query, sent under another
			// spelling of the same path.
			target, signed = "/%61pi/v1/ws?feedIDs="+eth, "/api/v1/ws?feedIDs="+eth
		}
		c, _, err := dialWS(ctx, demo, env.Mainnet, target, signed)
		require.NoError(t, err, "client %d", i)
		conns[i] = c
		defer c.CloseNow()
	}
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() {
			want := map[int][]string{0: {btc}, 1: {btc, eth}, 2: {eth}}[i%3]
			frames := readFrames(t, ctx, c, 3*len(want))
			last := map[string]int64{}
			for _, f := range frames {
				assert.Contains(t, want, f.Report.FeedID, "client %d got a stream it did not ask for", i)
				assert.Greater(t, f.Report.ObservationsTimestamp, last[f.Report.FeedID], "in order, never twice")
				last[f.Report.FeedID] = f.Report.ObservationsTimestamp
			}
		})
	}
	wg.Wait()
	assert.LessOrEqual(t, wsOpen(env), int64(2), "64 clients over at most 2 upstream connections")

	// Latest of a streamed feed is answered from the stream, with no
	// REST call.
	before := env.Sim.Counters().ByEndpoint(upstreamsim.Mainnet, upstreamsim.EndpointLatest)
	for range 5 {
		resp, body := demo.Get(t, env.Mainnet, "/api/v1/reports/latest?feedID="+btc)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		assert.Equal(t, "STREAM", resp.Header.Get("X-Cache"))
		var f frame
		require.NoError(t, json.Unmarshal(body, &f))
		assert.Equal(t, btc, f.Report.FeedID)
	}
	assert.Equal(t, before, env.Sim.Counters().ByEndpoint(upstreamsim.Mainnet, upstreamsim.EndpointLatest), "no REST latest call")

	// The upstream drops every connection: clients stay connected and keep
	// receiving, without a duplicate.
	c := conns[1]
	seen := readFrames(t, ctx, c, 2)
	last := map[string]int64{}
	for _, f := range seen {
		last[f.Report.FeedID] = f.Report.ObservationsTimestamp
	}
	require.Positive(t, env.Sim.DropWS(upstreamsim.WSDrop{}))
	for _, f := range readFrames(t, ctx, c, 6) {
		assert.Greater(t, f.Report.ObservationsTimestamp, last[f.Report.FeedID], "no duplicate after the recovery")
		last[f.Report.FeedID] = f.Report.ObservationsTimestamp
	}
}

// TestWSLimitsAndErrors: the team's connection limit, a plain GET, and a
// network without an upstream WebSocket.
func TestWSLimitsAndErrors(t *testing.T) {
	env := servertest.Start(t, servertest.Options{Config: func(c *config.Config) {
		c.Realtime.TeamConnections = 2
		c.Networks["testnet"].Upstream.WSURL = ""
	}})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	demo := servertest.Demo()
	btc := env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
	for range 2 {
		c, _, err := dialWS(ctx, demo, env.Mainnet, "/api/v1/ws?feedIDs="+btc, "")
		require.NoError(t, err)
		defer c.CloseNow()
	}
	_, resp, err := dialWS(ctx, demo, env.Mainnet, "/api/v1/ws?feedIDs="+btc, "")
	require.Error(t, err)
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "over the team's connection limit")

	r, body := demo.Get(t, env.Mainnet, "/api/v1/ws?feedIDs="+btc)
	assert.Equal(t, http.StatusUpgradeRequired, r.StatusCode, string(body))

	tbtc := env.FeedID(t, upstreamsim.Testnet, "BTC", "USD", "V3")
	_, resp, err = dialWS(ctx, demo, env.Testnet, "/api/v1/ws?feedIDs="+tbtc, "")
	require.Error(t, err)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "no ws_url: a clear error, never a pass-through")
	assert.Zero(t, env.Sim.Counters().WSTotal(upstreamsim.Testnet).Accepted)
}

// TestWSKeepAliveAndClose: the gateway pings its clients and closes one
// that does not answer (1008) while a reading client stays; a client's
// ping is answered; a client's close is answered with the close handshake.
// Twice: pinged every 100 ms (a ping's ride is 50 ms, and a stream
// publishes every second: nearly every ping goes alone), and every 2 s (a
// ride of 1 s: nearly every ping goes with a batch ahead of its timer;
// pinger).
func TestWSKeepAliveAndClose(t *testing.T) {
	for _, tc := range []struct {
		name       string
		tick, ping time.Duration
	}{{"pings alone", 50 * time.Millisecond, 100 * time.Millisecond}, {"pings with batches", 50 * time.Millisecond, 2 * time.Second}} {
		t.Run(tc.name, func(t *testing.T) { testWSKeepAliveAndClose(t, tc.tick, tc.ping) })
	}
}

func testWSKeepAliveAndClose(t *testing.T, tick, ping time.Duration) {
	env := servertest.Start(t, servertest.Options{
		Sim:    func(c *upstreamsim.Config) { c.WSTick = tick },
		Config: func(c *config.Config) { c.Realtime.PingInterval = ping },
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	demo := servertest.Demo()
	btc := env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")

	reader, _, err := dialWS(ctx, demo, env.Mainnet, "/api/v1/ws?feedIDs="+btc, "")
	require.NoError(t, err)
	defer reader.CloseNow()
	silent, _, err := dialWS(ctx, demo, env.Mainnet, "/api/v1/ws?feedIDs="+btc, "")
	require.NoError(t, err)
	defer silent.CloseNow()

	var got []frame
	var mu sync.Mutex
	readErr := make(chan error, 1)
	go func() {
		for {
			_, data, err := reader.Read(ctx)
			if err != nil {
				readErr <- err
				return
			}
			var f frame
			if err := json.Unmarshal(data, &f); err != nil {
				readErr <- err
				return
			}
			mu.Lock()
			got = append(got, f)
			mu.Unlock()
		}
	}()
	require.NoError(t, reader.Ping(ctx), "the gateway answers a client's ping")

	// The silent client reads nothing (so answers no ping) until the
	// gateway has closed it; what it then reads ends with the close.
	require.Eventually(t, func() bool {
		return metricValue(t, env.Registry, "streamgate_ws_client_closes_total", map[string]string{"network": "mainnet", "reason": "ping"}) == 1
	}, 10*time.Second, 10*time.Millisecond, "the gateway closes the client that answers no ping")
	var closeErr error
	for closeErr == nil {
		_, _, closeErr = silent.Read(ctx)
	}
	assert.Equal(t, websocket.StatusPolicyViolation, websocket.CloseStatus(closeErr), "closed for not answering pings: %v", closeErr)
	assert.Contains(t, closeErr.Error(), "no pong")

	// The reading client was kept: it goes on getting its reports, in
	// order, once.
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(got) }
	atClose := count()
	require.Eventually(t, func() bool { return count() >= atClose+2 }, 10*time.Second, 10*time.Millisecond, "reports after the silent client was closed")
	select {
	case err := <-readErr:
		t.Fatalf("the reading client was closed: %v", err)
	default:
	}
	mu.Lock()
	last := int64(0)
	for _, f := range got {
		assert.Equal(t, btc, f.Report.FeedID)
		assert.Greater(t, f.Report.ObservationsTimestamp, last, "in order, never twice")
		last = f.Report.ObservationsTimestamp
	}
	mu.Unlock()

	// A client's close gets the close handshake: Close returns nil only
	// when the gateway answered with its own close frame.
	assert.NoError(t, reader.Close(websocket.StatusNormalClosure, "done"))
}

// TestWSRefusalsLogTheirReason: a WebSocket refused because the team may
// not read a stream logs auth_error "stream" in its access line, as one
// refused for the network logs "network": the SDKs show only "expected
// 101, got 401", so the log line is the operator's clue.
func TestWSRefusalsLogTheirReason(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	env := servertest.Start(t, servertest.Options{Logger: zap.New(core)})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	research := servertest.Research()
	btcMain := env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
	// A testnet stream outside research's five.
	var other string
	allowed := map[string]bool{}
	for _, f := range config.DemoRestrictedFeeds() {
		allowed[string(f)] = true
	}
	for _, s := range env.Sim.Streams(upstreamsim.Testnet) {
		if !allowed[s.FeedID] {
			other = s.FeedID
			break
		}
	}
	require.NotEmpty(t, other)

	cases := []struct{ base, feed, reason string }{
		{env.Mainnet, btcMain, "network"},                        // research may not use mainnet
		{env.Testnet, other, "stream"},                           // nor read this stream
		{env.Testnet, "0x" + strings.Repeat("ab", 32), "stream"}, // nor one that does not exist
	}
	for _, c := range cases {
		mark := len(logs.FilterMessage("request").AllUntimed())
		_, resp, err := dialWS(ctx, research, c.base, "/api/v1/ws?feedIDs="+c.feed, "")
		require.Error(t, err)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
		var line map[string]any
		require.Eventually(t, func() bool {
			access := logs.FilterMessage("request").AllUntimed()
			if len(access) <= mark {
				return false
			}
			line = access[len(access)-1].ContextMap()
			return true
		}, 10*time.Second, 5*time.Millisecond, "an access line for the refusal")
		assert.Equal(t, "ws", line["endpoint"])
		assert.EqualValues(t, 401, line["status"])
		assert.Equal(t, c.reason, line["auth_error"], "%s on %s", c.feed, c.base)
	}
}
