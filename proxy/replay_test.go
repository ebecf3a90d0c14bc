package proxy_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/config"
	"streamgate/internal/redistest"
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
	send := func(base string, req *http.Request) int {
		out := req.Clone(req.Context())
		var err error
		out.URL, err = out.URL.Parse(base + "/api/v1/feeds")
		require.NoError(t, err)
		out.Host = ""
		resp, err := http.DefaultClient.Do(out)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	req, err := servertest.Demo().Request(t.Context(), a.Mainnet, "/api/v1/feeds")
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, send(a.Mainnet, req))
	assert.Equal(t, http.StatusUnauthorized, send(b.Mainnet, req), "accepted by one replica, a replay at another")

	fresh, err := servertest.Demo().Request(t.Context(), b.Mainnet, "/api/v1/feeds")
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, send(b.Mainnet, fresh), "a request signed afresh passes")
}
