package proxy_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/auth"
	"streamgate/config"
	"streamgate/proxy/proxytest"
)

func TestPassThroughTimeout(t *testing.T) {
	gaveUp := make(chan struct{}, 1)
	env := proxytest.Start(t, proxytest.Options{
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
