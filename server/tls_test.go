package server

import (
	"crypto/tls"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/config"
	"streamgate/internal/testing/testpki"
)

// TestAdminTLS: server.admin_tls serves the probes and the metrics over
// HTTPS (the metrics as OpenMetrics when asked); a reload that names other
// files loads them for new handshakes, and one whose files do not load
// keeps the pair in force.
func TestAdminTLS(t *testing.T) {
	ca := testpki.NewCA(t, "admin CA")
	dir := t.TempDir()
	write := func(name string) (*config.TLS, *testpki.Leaf) {
		leaf := ca.Issue(t, testpki.Options{})
		b := &config.TLS{}
		b.CertFile, b.KeyFile = leaf.Write(t, dir, name)
		return b, leaf
	}
	first, firstLeaf := write("first")
	cfg := config.Default()
	cfg.Server.AdminListen = "127.0.0.1:0"
	cfg.Server.AdminTLS = first
	for _, n := range cfg.Networks {
		n.Listen = "127.0.0.1:0"
	}
	require.NoError(t, cfg.Validate())
	s, err := New(cfg, Options{})
	require.NoError(t, err)
	s.Start()
	defer s.Close()
	addr := s.Addr("admin")
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	serial := func() string {
		c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool()})
		require.NoError(t, err)
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}

	resp, err := client.Get("https://" + addr + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	req, _ := http.NewRequest(http.MethodGet, "https://"+addr+"/metrics", nil)
	req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
	resp, err = client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.True(t, strings.HasPrefix(resp.Header.Get("Content-Type"), "application/openmetrics-text"), resp.Header.Get("Content-Type"))
	assert.Equal(t, firstLeaf.Cert.SerialNumber.String(), serial())

	// A reload naming files that do not load: the pair in force stays.
	broken := *cfg
	broken.Server.AdminTLS = &config.TLS{CertFile: filepath.Join(dir, "none.crt"), KeyFile: first.KeyFile}
	_, err = s.Reload(&broken)
	require.NoError(t, err, "the rest of the configuration applies")
	assert.Equal(t, firstLeaf.Cert.SerialNumber.String(), serial())

	// A reload naming new files: new handshakes get them.
	second, secondLeaf := write("second")
	next := *cfg
	next.Server.AdminTLS = second
	_, err = s.Reload(&next)
	require.NoError(t, err)
	assert.Equal(t, secondLeaf.Cert.SerialNumber.String(), serial())
}
