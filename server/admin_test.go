package server

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/config"
)

// TestAdminToken: with server.admin_token_file, the status page and its
// JSON need the token; the probes and /metrics stay open.
func TestAdminToken(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "token"), []byte("admin-token-0123456789\n"), 0o600))
	yaml := `server: {admin_listen: "127.0.0.1:0", admin_token_file: token}
networks:
  mainnet: {listen: "127.0.0.1:0", upstream: {url: embedded}}
teams:
  - name: demo
    networks: [mainnet]
    feeds: ["*"]
    keys: [{id: ` + config.DemoKeyID + `, secret: ` + config.DemoKeySecret + `}]
`
	path := filepath.Join(dir, "streamgate.yaml")
	require.NoError(t, os.WriteFile(path, []byte(yaml), 0o600))
	cfg, err := config.Load(path)
	require.NoError(t, err)
	s, err := New(cfg, Options{})
	require.NoError(t, err)
	s.Start()
	defer s.Close()
	base := "http://" + s.Addr("admin")

	get := func(path, token string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, p := range []string{"/", "/status.json"} {
		code, body := get(p, "")
		assert.Equal(t, http.StatusUnauthorized, code, p)
		assert.NotContains(t, body, "admin-token", p)
		code, _ = get(p, "wrong")
		assert.Equal(t, http.StatusUnauthorized, code, p)
		code, body = get(p, "admin-token-0123456789")
		assert.Equal(t, http.StatusOK, code, p)
		assert.False(t, strings.Contains(body, config.DemoKeySecret) || strings.Contains(body, config.DemoKeyID), p)
	}
	for _, p := range []string{"/healthz", "/metrics"} {
		code, _ := get(p, "")
		assert.Equal(t, http.StatusOK, code, p)
	}
}
