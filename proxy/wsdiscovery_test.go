package proxy_test

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/config"
	"streamgate/feedid"
	"streamgate/internal/testing/redistest"
	"streamgate/server/servertest"
	"streamgate/upstreamsim"
)

// TestOriginDiscoveryWithinTheBudget: three replicas sharing the Redis
// limits start together, each asking the upstream's HA origins (HEAD /)
// at once for its pinned stream, against an upstream that allows two calls
// a second per endpoint: the discoveries go through the shared budget, so
// none draws a 429 (before, they were outside it and all but one were
// refused, each logging a warning).
func TestOriginDiscoveryWithinTheBudget(t *testing.T) {
	rs := redistest.New(t)
	simCfg := upstreamsim.Default()
	// Two a second at the upstream, one a second in the gateways' budget:
	// half a second of room for a call sent late by a busy machine.
	simCfg.RateLimit, simCfg.Burst = 2, 1
	simCfg.WSTick = 50 * time.Millisecond
	simCfg.HAOrigins = []string{"001", "002"}
	sim, err := upstreamsim.New(simCfg)
	require.NoError(t, err)
	t.Cleanup(func() { sim.Close() })
	var pinned string
	for _, s := range sim.Streams(upstreamsim.Mainnet) {
		if s.BaseAsset == "BTC" && s.QuoteAsset == "USD" && s.SchemaVersion == "V3" {
			pinned = s.FeedID
		}
	}
	require.NotEmpty(t, pinned)
	// The upstream's answers to HEAD /, counted here: each replica's start
	// resets the simulator's counters.
	var ok, refused atomic.Int64
	count := func(_ string, h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/" {
				h.ServeHTTP(w, r)
				return
			}
			sw := &statusWriter{ResponseWriter: w}
			h.ServeHTTP(sw, r)
			switch sw.status {
			case http.StatusOK:
				ok.Add(1)
			case http.StatusTooManyRequests:
				refused.Add(1)
			}
		})
	}
	var envs []*servertest.Env
	for range 3 {
		envs = append(envs, servertest.Start(t, servertest.Options{Quiet: true, Simulator: sim, Upstream: count, Cold: true, Config: func(c *config.Config) {
			noReplayCheck(c)
			c.RateLimit.Backend = config.BackendRedis
			c.RateLimit.Redis.URL = rs.URL()
			c.Networks["mainnet"].Upstream.Budget = config.Rate{RPS: 1, Burst: 1}
			c.Networks["mainnet"].Upstream.WSPinned = config.StreamIDs{feedid.ID(pinned)}
			c.Networks["testnet"].Upstream.WSURL = ""
		}}))
	}
	require.Eventually(t, func() bool { return ok.Load() >= 3 }, 30*time.Second, 20*time.Millisecond,
		"every replica has its origins")
	fallbacks := 0.0
	for _, e := range envs {
		fallbacks += metricValue(t, e.Registry, "streamgate_redis_fallbacks_total", map[string]string{"mode": "open"})
	}
	assert.Zero(t, refused.Load(), "HEAD / answered 429 (%v Redis fallbacks)", fallbacks)
}

// statusWriter records the status of an answer.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}
