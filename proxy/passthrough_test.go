package proxy_test

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/auth"
	"streamgate/config"
	"streamgate/server/servertest"
)

func TestPassThroughTimeout(t *testing.T) {
	gaveUp := make(chan struct{}, 1)
	env := servertest.Start(t, servertest.Options{
		Config: func(c *config.Config) {
			c.Networks["mainnet"].Upstream.Timeout = 200 * time.Millisecond
			c.Networks["mainnet"].PassThrough = []string{"/api/v1/listed"}
		},
		Upstream: func(_ string, h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodHead && r.URL.Path == "/api/v1/listed" {
					select {
					case <-r.Context().Done():
						gaveUp <- struct{}{}
					case <-time.After(30 * time.Second):
					}
					return
				}
				h.ServeHTTP(w, r)
			})
		},
	})
	req, err := http.NewRequest(http.MethodHead, env.Mainnet+"/api/v1/listed", nil)
	require.NoError(t, err)
	auth.Sign(req, config.DemoKeyID, []byte(config.DemoKeySecret), time.Now())
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.NotEmpty(t, resp.Header.Get("Retry-After"))
	select {
	case <-gaveUp:
	case <-time.After(20 * time.Second):
		t.Fatal("the gateway never gave up on the hanging upstream")
	}
}

// TestPassThrough429: a forwarded request answered 429 pauses its endpoint
// for the Retry-After and slows its budget, as a 429 to the gateway's own
// calls does: the next forwarded request does not reach the upstream.
func TestPassThrough429(t *testing.T) {
	var calls atomic.Int32
	env := servertest.Start(t, servertest.Options{
		Config: func(c *config.Config) {
			c.Networks["mainnet"].PassThrough = []string{"/api/v1/listed"}
		},
		Upstream: func(_ string, h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/api/v1/listed" {
					calls.Add(1)
					w.Header().Set("Retry-After", "60")
					w.WriteHeader(http.StatusTooManyRequests)
					return
				}
				h.ServeHTTP(w, r)
			})
		},
	})
	get := func(timeout time.Duration) (*http.Response, error) {
		req, err := http.NewRequest(http.MethodGet, env.Mainnet+"/api/v1/listed", nil)
		require.NoError(t, err)
		auth.Sign(req, config.DemoKeyID, []byte(config.DemoKeySecret), time.Now())
		resp, err := (&http.Client{Timeout: timeout}).Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return resp, err
	}
	resp, err := get(20 * time.Second)
	require.NoError(t, err)
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "the upstream's answer passes through")
	// A forwarded request waits out the pause (the client's context
	// bounds it): this one gives up first, without reaching the upstream.
	_, err = get(500 * time.Millisecond)
	require.Error(t, err)
	assert.EqualValues(t, 1, calls.Load(), "the paused endpoint is not called")
	down := map[string]string{"network": "mainnet", "endpoint": "other", "direction": "down"}
	assert.Equal(t, 1.0, metricValue(t, env.Registry, "streamgate_upstream_budget_adjustments_total", down))
}
