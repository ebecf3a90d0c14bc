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

// TestAdminPprof: the profiles are off by default; server.pprof serves
// them on the admin listener, behind the admin token when one is set.
func TestAdminPprof(t *testing.T) {
	tests := []struct {
		name  string
		pprof bool
		token string
		want  map[string]int // token sent ("" or the token) → status
	}{
		{name: "off by default", want: map[string]int{"": http.StatusNotFound}},
		{name: "on", pprof: true, want: map[string]int{"": http.StatusOK}},
		{name: "on behind the token", pprof: true, token: "admin-token-0123456789",
			want: map[string]int{"": http.StatusUnauthorized, "admin-token-0123456789": http.StatusOK}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.Server.AdminListen = "127.0.0.1:0"
			cfg.Server.Pprof = tc.pprof
			cfg.Server.AdminToken = config.Secret(tc.token)
			for _, n := range cfg.Networks {
				n.Listen = "127.0.0.1:0"
			}
			require.NoError(t, cfg.Validate())
			s, err := New(cfg, Options{})
			require.NoError(t, err)
			s.Start()
			defer s.Close()
			base := "http://" + s.Addr("admin")
			for token, want := range tc.want {
				for _, p := range []string{"/debug/pprof/", "/debug/pprof/heap?debug=1", "/debug/pprof/goroutine?debug=1"} {
					req, _ := http.NewRequest(http.MethodGet, base+p, nil)
					if token != "" {
						req.Header.Set("Authorization", "Bearer "+token)
					}
					resp, err := http.DefaultClient.Do(req)
					require.NoError(t, err)
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					assert.Equal(t, want, resp.StatusCode, "%s with token %q", p, token)
					if want == http.StatusOK && p == "/debug/pprof/heap?debug=1" {
						assert.Contains(t, string(body), "heap profile")
					}
				}
			}
			resp, err := http.Get(base + "/healthz")
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, http.StatusOK, resp.StatusCode, "the probes stay open")
		})
	}
}
