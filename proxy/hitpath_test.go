package proxy_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zapcore"

	"streamgate/auth"
	"streamgate/config"
	"streamgate/server"
	"streamgate/server/servertest"
)

// A latest hit with the team's rate and daily quota, the metrics and the
// JSON access log at info carries every header of its answer and
// allocates two objects of the gateway's own: the request's state and the
// request's copy for its context. (Replay protection is off here, so that
// one signed request can be sent again; its record allocates nothing
// under a steady load, see auth.)
func TestLatestHitAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's sync.Pool drops items at random: allocation counts vary")
	}
	log := server.NewLogger(config.Log{Level: config.LogLevelInfo, Format: config.LogFormatJSON}, zapcore.AddSync(io.Discard))
	env := servertest.Start(t, servertest.Options{Logger: log, Config: func(c *config.Config) {
		c.Auth.ReplayProtection = false
		c.Auth.MaxSkew = time.Hour
		c.Cache.LatestTTL = time.Hour
		c.Realtime.LatestFromStream = false
		demo := c.Team(config.DemoTeam)
		demo.Rate, demo.DailyQuota = config.Rate{RPS: 1_000_000, Burst: 1_000_000}, 1_000_000_000_000
	}})
	h := env.Gateway.Handler("mainnet")
	feed := benchFeeds(t, env, 1)[0]
	target := "/api/v1/reports/latest?feedID=" + feed
	r := httptest.NewRequest(http.MethodGet, target, nil)
	auth.Sign(r, config.DemoKeyID, []byte(config.DemoKeySecret), time.Now())
	serve := func() *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec
	}
	var rec *httptest.ResponseRecorder
	for range 50 {
		if rec = serve(); rec.Header().Get("X-Cache") == "HIT" {
			break
		}
		env.Cache.Wait()
	}
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, "HIT", rec.Header().Get("X-Cache"))
	for _, k := range []string{"X-Request-Id", "Age", "Cache-Control", "Content-Type", "RateLimit", "RateLimit-Policy"} {
		assert.NotEmpty(t, rec.Header().Values(k), k)
	}
	assert.Equal(t, []string{`"team";q=1000000;w=1`, `"daily";q=1000000000000;w=86400`}, rec.Header().Values("RateLimit-Policy"))
	assert.Len(t, rec.Header().Values("RateLimit"), 2)

	w := &discard{h: http.Header{}}
	allocs := testing.AllocsPerRun(200, func() {
		clear(w.h)
		h.ServeHTTP(w, r)
	})
	assert.LessOrEqual(t, allocs, 2.0, "allocations of a latest hit")
}

// discard is a ResponseWriter that keeps nothing but its header map.
type discard struct{ h http.Header }

func (w *discard) Header() http.Header         { return w.h }
func (w *discard) WriteHeader(int)             {}
func (w *discard) Write(b []byte) (int, error) { return len(b), nil }
