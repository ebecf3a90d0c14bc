package replicaset_test

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/auth"
	"streamgate/config"
	"streamgate/internal/testing/redistest"
	"streamgate/internal/testing/replicaset"
	"streamgate/upstreamsim"
)

// get sends a GET of target signed with the demo key and returns its
// status.
func get(t *testing.T, base, target string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+target, nil)
	require.NoError(t, err)
	auth.Sign(req, config.DemoKeyID, []byte(config.DemoKeySecret), time.Now())
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	_, err = io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode
}

// Replicas of a set given a Redis share the team's rate limit through it
// (a team's burst spent at one replica is spent at the other), and one
// simulator; Add starts one more of the same configuration, and Close
// stops the replicas and the upstream it started.
func TestReplicasShareRedisAndUpstream(t *testing.T) {
	rt := config.RedisTarget{URL: redistest.Start(t)}
	set, err := replicaset.Start(replicaset.Config{
		Replicas: 2,
		Redis:    &rt,
		Warm:     30 * time.Second,
		Gateway: func(up *replicaset.Upstream, i int, cfg *config.Config) {
			// A burst of 2 and a refill too slow to matter in a test.
			cfg.Team(config.DemoTeam).Rate = config.Rate{RPS: 0.001, Burst: 2}
		},
	})
	require.NoError(t, err)
	t.Cleanup(set.Close)

	reps := set.Replicas()
	require.Len(t, reps, 2)
	feed := set.Sim.Streams(upstreamsim.Mainnet)[0].FeedID
	target := "/api/v1/reports/latest?feedID=" + feed
	assert.Equal(t, http.StatusOK, get(t, reps[0].Base("mainnet"), target))
	assert.Equal(t, http.StatusOK, get(t, reps[0].Base("mainnet"), target))
	assert.Equal(t, http.StatusTooManyRequests, get(t, reps[1].Base("mainnet"), target),
		"the burst spent at the first replica is spent at the second")
	assert.Equal(t, []string{reps[0].Base("mainnet"), reps[1].Base("mainnet")}, set.Bases("mainnet"))

	third, err := set.Add()
	require.NoError(t, err)
	assert.Equal(t, http.StatusTooManyRequests, get(t, third.Base("mainnet"), target), "a replica added later shares it too")
	assert.Equal(t, set.URL["mainnet"], third.Config.Networks["mainnet"].Upstream.URL, "one upstream")
	require.NoError(t, set.Remove(third))
	require.Error(t, set.Remove(third))
	third.Server.Close()
	assert.Len(t, set.Replicas(), 2)

	up := set.URL["mainnet"]
	set.Close()
	_, err = http.Get(up + upstreamsim.EndpointLatest)
	assert.Error(t, err, "the upstream's listener is closed")
}

// A set given an upstream puts its replicas in front of it and leaves it
// running when it closes; the networks the upstream does not serve are
// dropped from the replicas' configuration.
func TestSetOnAGivenUpstream(t *testing.T) {
	up, err := replicaset.StartUpstream(replicaset.UpstreamConfig{Networks: []string{"mainnet"}})
	require.NoError(t, err)
	t.Cleanup(up.Close)
	set, err := replicaset.Start(replicaset.Config{Upstream: up, Replicas: 1, Warm: 30 * time.Second})
	require.NoError(t, err)
	r := set.Replicas()[0]
	assert.NotContains(t, r.Config.Networks, "testnet")
	feed := up.Sim.Streams(upstreamsim.Mainnet)[0].FeedID
	assert.Equal(t, http.StatusOK, get(t, r.Base("mainnet"), "/api/v1/reports/latest?feedID="+feed))
	set.Close()
	resp, err := http.Get(up.URL["mainnet"] + "/")
	require.NoError(t, err, "the upstream outlives the set")
	resp.Body.Close()
}
