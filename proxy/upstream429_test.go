package proxy_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/server/servertest"
	"streamgate/upstreamsim"
)

// TestUpstream429NeverReachesTheClient: an upstream 429 on a miss (a
// report, a bulk) is answered with the gateway's own 503, its JSON
// error and a Retry-After, not passed on (before, the client got the
// upstream's 429 and its {"error":"rate limit exceeded"}).
func TestUpstream429NeverReachesTheClient(t *testing.T) {
	var throttle atomic.Bool
	env := servertest.Start(t, servertest.Options{
		Upstream: func(_ string, h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if throttle.Load() && strings.HasPrefix(r.URL.Path, "/api/v1/") {
					w.Header().Set("Retry-After", "2")
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(http.StatusTooManyRequests)
					w.Write([]byte(`{"error":"rate limit exceeded"}`))
					return
				}
				h.ServeHTTP(w, r)
			})
		},
	})
	btc := env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
	eth := env.FeedID(t, upstreamsim.Mainnet, "ETH", "USD", "V3")
	// The catalog is warm: these are misses of reports only.
	throttle.Store(true)
	for _, target := range []string{
		"/api/v1/reports?feedID=" + btc + "&timestamp=1700000000",
		"/api/v1/reports/bulk?feedIDs=" + btc + "," + eth + "&timestamp=1700000001",
	} {
		resp, body := servertest.Demo().Get(t, env.Mainnet, target)
		assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s: %s", target, body)
		assert.NotEmpty(t, resp.Header.Get("Retry-After"), target)
		var e struct{ Error, Message string }
		require.NoError(t, json.Unmarshal(body, &e), "%s: %s", target, body)
		assert.NotEqual(t, "rate limit exceeded", e.Error, target)
		assert.NotEmpty(t, e.Message, target)
	}
}
