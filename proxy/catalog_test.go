package proxy_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/server/servertest"
)

func TestTeamCatalogIsPrivate(t *testing.T) {
	env := servertest.Start(t, servertest.Options{})
	demo := servertest.Demo()
	for _, target := range []string{"/api/v1/discovery", "/api/v1/discovery?hidden=true", "/api/v1/feeds", "/api/v1/feeds?hidden=true"} {
		resp, body := demo.Get(t, env.Mainnet, target)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		assert.Regexp(t, `^private, max-age=\d+$`, resp.Header.Get("Cache-Control"), target)
		assert.Contains(t, resp.Header.Values("Vary"), "Authorization", target)
	}
	anon := &servertest.Client{HTTP: http.DefaultClient}
	resp, _ := anon.Get(t, env.Mainnet, "/api/v1/discovery")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Regexp(t, `^public, max-age=\d+$`, resp.Header.Get("Cache-Control"))
	assert.Contains(t, resp.Header.Values("Vary"), "Authorization", "a signed request to the same URL gets another answer")
}

func TestParsedCatalogCounted(t *testing.T) {
	env := servertest.Start(t, servertest.Options{})
	resp, body := servertest.Demo().Get(t, env.Mainnet, "/api/v1/discovery?hidden=true")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	env.Cache.Wait()
	assert.Greater(t, env.Cache.Bytes(), int64(3*len(body)), "body, raw streams and decoded streams")
}
