package wsgate_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/config"
	"streamgate/internal/testing/redistest"
	"streamgate/server/servertest"
	"streamgate/upstreamsim"
)

// TestWSResumeRecordsBounded: a team whose clients vary their identity
// (here their stream sets) has at most realtime.resume_records_per_team
// resume records, in the limits' Redis too; the oldest is dropped and
// counted, and that client starts live while the newest resume (before
// the bound every identity kept a record for the window).
func TestWSResumeRecordsBounded(t *testing.T) {
	rs := redistest.New(t)
	sim := fastSimulator(t)
	env := sharedReplicas(t, rs, sim, 1, func(c *config.Config) {
		c.Realtime.ResumeWindow = 30 * time.Second
		c.Realtime.ResumeRecordsPerTeam = 2
	})[0]
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	demo := servertest.Demo()
	var feeds []string
	for _, b := range []string{"BTC", "ETH", "LINK", "SOL"} {
		feeds = append(feeds, env.FeedID(t, upstreamsim.Mainnet, b, "USD", "V3"))
	}
	// Four identities, one after the other: each streams, then is lost.
	last := map[string]int64{}
	for _, f := range feeds {
		c, _, err := dialWS(ctx, demo, env.Mainnet, "/api/v1/ws?feedIDs="+f, "")
		require.NoError(t, err)
		w := readAll(t, ctx, c)
		awaitSeconds(t, w, []string{f}, 1)
		c.CloseNow()
		<-w.done
		last[f] = lastOf(t, w, []string{f})[f]
		awaitWSClients(t, env, 0)
	}
	dropped := func(reason string) float64 {
		return metricValue(t, env.Registry, "streamgate_ws_resume_records_dropped_total", map[string]string{"reason": reason})
	}
	assert.Equal(t, 2.0, dropped("team"), "the two oldest dropped")
	assert.Equal(t, 2.0, metricValue(t, env.Registry, "streamgate_ws_resume_records", nil))
	rc := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rc.Close()
	keys, err := rc.Keys(ctx, "streamgate:ws:v1:resume:*").Result()
	require.NoError(t, err)
	assert.Len(t, keys, 2, "two records in Redis")

	// The newest resumes; the oldest starts live.
	newest := feeds[3]
	c, _, err := dialWS(ctx, demo, env.Mainnet, "/api/v1/ws?feedIDs="+newest, "")
	require.NoError(t, err)
	w := readAll(t, ctx, c)
	awaitSeconds(t, w, []string{newest}, 1)
	assert.Equal(t, last[newest]+1, w.of(newest)[0], "the newest record resumes")
	oldest := feeds[0]
	c0, _, err := dialWS(ctx, demo, env.Mainnet, "/api/v1/ws?feedIDs="+oldest, "")
	require.NoError(t, err)
	w0 := readAll(t, ctx, c0)
	awaitSeconds(t, w0, []string{oldest}, 1)
	assert.Equal(t, 1.0, metricValue(t, env.Registry, "streamgate_ws_resumed_total", map[string]string{"network": "mainnet"}),
		"only the newest resumed")
}
