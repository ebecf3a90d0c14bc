package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/config"
	"streamgate/internal/testing/redistest"
	"streamgate/server/servertest"
)

// TestReadyzFailClosedRedisAway: with ratelimit.redis.fail_mode closed,
// a replica whose Redis is away refuses every request (503), so its
// /readyz answers 503 too, saying "refusing: …" with the cause, and
// streamgate_ready is 0: a balancer sends the requests to a replica that
// can serve them. Once Redis is back, /readyz's own probe finds it, with
// no request routed to the replica (none would be, while it is not
// ready): it is ready again and serves.
func TestReadyzFailClosedRedisAway(t *testing.T) {
	srv := redistest.New(t)
	env := servertest.Start(t, servertest.Options{Quiet: true, Config: func(c *config.Config) {
		c.RateLimit.Backend = config.BackendRedis
		c.RateLimit.Redis.URL = srv.URL()
		c.RateLimit.Redis.FailMode = config.FailModeClosed
		c.Realtime.Share = false
		c.Server.AdminListen = "127.0.0.1:0"
		c.Team(config.DemoTeam).Rate = config.Rate{RPS: 1000, Burst: 1000}
	}})
	readyz := func() (int, string) {
		resp, err := http.Get("http://" + env.Server.Addr("admin") + "/readyz")
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	demo := servertest.Demo()
	get := func() int {
		req, err := demo.Request(context.Background(), env.Mainnet, "/api/v1/feeds")
		require.NoError(t, err)
		resp, err := demo.HTTP.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	ready := func() float64 { // streamgate_ready, as a scrape reads it
		mfs, err := env.Registry.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() == "streamgate_ready" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("no streamgate_ready")
		return 0
	}
	code, body := readyz()
	require.Equal(t, http.StatusOK, code, body)
	require.JSONEq(t, `{"status":"ready"}`, body)
	require.Equal(t, http.StatusOK, get())

	srv.Stop()
	// The requests are refused from the first failed call; the breaker
	// opens after a few of them, and from then on /readyz says so.
	require.Eventually(t, func() bool {
		require.Equal(t, http.StatusServiceUnavailable, get(), "fail_mode closed")
		code, _ := readyz()
		return code == http.StatusServiceUnavailable
	}, 20*time.Second, 5*time.Millisecond)
	code, body = readyz()
	require.Equal(t, http.StatusServiceUnavailable, code)
	var st struct{ Status string }
	require.NoError(t, json.Unmarshal([]byte(body), &st), body)
	assert.True(t, strings.HasPrefix(st.Status, "refusing: Redis (ratelimit, single) unavailable, breaker"), st.Status)
	assert.Contains(t, st.Status, "connection refused", "the cause")
	assert.Contains(t, st.Status, "ratelimit.redis.fail_mode closed refuses every request")
	assert.Zero(t, ready(), "streamgate_ready")
	assert.False(t, env.Server.Ready())
	assert.Equal(t, http.StatusServiceUnavailable, get())

	// Redis back: no request reaches the replica, only the readiness
	// checks, until it is ready.
	srv.Restart()
	require.Eventually(t, func() bool {
		code, _ := readyz()
		return code == http.StatusOK
	}, 20*time.Second, 10*time.Millisecond, "/readyz never found Redis back")
	code, body = readyz()
	assert.JSONEq(t, `{"status":"ready"}`, body)
	assert.Equal(t, 1.0, ready())
	assert.Equal(t, http.StatusOK, get(), "served by Redis's limits again")
}
