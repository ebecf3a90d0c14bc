package proxy_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/config"
	"streamgate/internal/testing/redistest"
	"streamgate/server/servertest"
)

// TestReplayAcrossReplicas sends a request to one gateway and the same
// signed request to another sharing its Redis: the second is a replay.
func TestReplayAcrossReplicas(t *testing.T) {
	url := redistest.Start(t)
	// Two gateways configured to share Redis, as replicas are: the replay
	// record goes through it with the limits.
	replica := func() *servertest.Env {
		return servertest.Start(t, servertest.Options{Config: func(c *config.Config) {
			c.Auth.ReplayGrace = 0
			c.RateLimit.Backend = "redis"
			c.RateLimit.Redis.URL = url
		}})
	}
	a, b := replica(), replica()
	send := func(base string, req *http.Request) int { return sendTo(t, base, req) }
	req, err := servertest.Demo().Request(t.Context(), a.Mainnet, "/api/v1/feeds")
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, send(a.Mainnet, req))
	assert.Equal(t, http.StatusUnauthorized, send(b.Mainnet, req), "accepted by one replica, a replay at another")

	fresh, err := servertest.Demo().Request(t.Context(), b.Mainnet, "/api/v1/feeds")
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, send(b.Mainnet, fresh), "a request signed afresh passes")
}

// TestReplayAcrossReplicasSparesTheLimits: a replay refused by the shared
// record, which the admission's one Redis call checks first, takes nothing
// of its team's rate (the request after it is admitted); while Redis is
// down each replica's own record refuses the replays it saw, and the
// limits follow the fail mode.
func TestReplayAcrossReplicasSparesTheLimits(t *testing.T) {
	srv := redistest.New(t)
	replica := func() *servertest.Env {
		return servertest.Start(t, servertest.Options{Quiet: true, Config: func(c *config.Config) {
			c.Auth.ReplayGrace = 0
			c.RateLimit.Backend = config.BackendRedis
			c.RateLimit.Redis.URL = srv.URL()
			c.RateLimit.Redis.FailMode = config.FailModeOpen
			c.Realtime.Share = false
			c.Team(config.DemoTeam).Rate = config.Rate{RPS: 0.001, Burst: 2}
		}})
	}
	a, b := replica(), replica()
	send := func(base string, req *http.Request) int { return sendTo(t, base, req) }
	sign := func(base, target string) *http.Request {
		req, err := servertest.Demo().Request(t.Context(), base, target)
		require.NoError(t, err)
		return req
	}
	replays := func(env *servertest.Env) float64 {
		return metricValue(t, env.Registry, "streamgate_auth_failures_total", map[string]string{"network": "mainnet", "reason": "replay"})
	}
	first := sign(a.Mainnet, "/api/v1/feeds")
	require.Equal(t, http.StatusOK, send(a.Mainnet, first))
	assert.Equal(t, http.StatusUnauthorized, send(b.Mainnet, first), "accepted by one replica, a replay at another")
	assert.Equal(t, 1.0, replays(b), "counted as a replay")
	assert.Equal(t, http.StatusOK, send(b.Mainnet, sign(b.Mainnet, "/api/v1/feeds?limit=1")), "the replay took no token of the burst of 2")
	assert.Equal(t, http.StatusTooManyRequests, send(b.Mainnet, sign(b.Mainnet, "/api/v1/feeds?limit=2")), "the burst is spent")

	srv.Stop()
	alone := sign(a.Mainnet, "/api/v1/feeds?limit=3")
	require.Equal(t, http.StatusOK, send(a.Mainnet, alone), "fail open")
	assert.Equal(t, http.StatusUnauthorized, send(a.Mainnet, alone), "the replica's own record refuses a replay of what it admitted")
	assert.Equal(t, http.StatusOK, send(b.Mainnet, alone), "another replica's own record has not seen it")
	assert.Positive(t, metricValue(t, a.Registry, "streamgate_replay_store_errors_total", nil), "the shared record's failure counted")
}

// sendTo sends req, as signed, to the gateway at base, and returns the
// answer's status.
func sendTo(t *testing.T, base string, req *http.Request) int {
	t.Helper()
	out := req.Clone(req.Context())
	var err error
	out.URL, err = out.URL.Parse(base + req.URL.RequestURI())
	require.NoError(t, err)
	out.Host = ""
	resp, err := http.DefaultClient.Do(out)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}
