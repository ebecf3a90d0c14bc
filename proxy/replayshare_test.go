package proxy_test

import (
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/config"
	"streamgate/internal/testing/redistest"
	"streamgate/server/servertest"
)

// TestReplayRecordShareOfATeam: a team without a rate that sends signed
// unique requests until the replay record refuses it (503) has filled its
// share only: another team's requests still pass. With the record shared
// in Redis too.
func TestReplayRecordShareOfATeam(t *testing.T) {
	const secret = "replay-share-secret-0123456789"
	teams := func(c *config.Config) {
		c.Auth.ReplayMaxEntries = 1000
		for _, name := range []string{"flood", "quiet"} {
			c.Teams = append(c.Teams, config.Team{Name: name, Networks: []string{"mainnet"}, Feeds: config.StreamIDs{"*"},
				Keys: []config.Key{{ID: name + "-key", Secret: secret}}})
		}
	}
	run := func(t *testing.T, env *servertest.Env) {
		// Every request signed at its own millisecond: unique signatures.
		var tick atomic.Int64
		base := time.Now()
		clock := func() time.Time { return base.Add(time.Duration(tick.Add(1)) * time.Millisecond) }
		flood := &servertest.Client{Key: "flood-key", Secret: secret, HTTP: http.DefaultClient, Now: clock}
		quiet := &servertest.Client{Key: "quiet-key", Secret: secret, HTTP: http.DefaultClient, Now: clock}
		var refused atomic.Bool
		var sent atomic.Int64
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for !refused.Load() && sent.Add(1) <= 1200 {
					resp, _ := flood.Get(t, env.Mainnet, "/api/v1/feeds")
					switch resp.StatusCode {
					case http.StatusOK:
					case http.StatusServiceUnavailable:
						refused.Store(true)
					default:
						t.Errorf("flood: status %d", resp.StatusCode)
						refused.Store(true)
					}
				}
			})
		}
		wg.Wait()
		require.True(t, refused.Load(), "the flooding team is refused once its share is used up")
		for range 3 {
			resp, body := quiet.Get(t, env.Mainnet, "/api/v1/feeds")
			assert.Equal(t, http.StatusOK, resp.StatusCode, "another team is not denied: %s", body)
		}
	}
	t.Run("memory", func(t *testing.T) {
		run(t, servertest.Start(t, servertest.Options{Quiet: true, Config: teams}))
	})
	t.Run("redis", func(t *testing.T) {
		url := redistest.Start(t)
		run(t, servertest.Start(t, servertest.Options{Quiet: true, Config: func(c *config.Config) {
			teams(c)
			c.RateLimit.Backend = config.BackendRedis
			c.RateLimit.Redis.URL = url
		}}))
	})
}
