package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/config"
	"streamgate/internal/testing/testpki"
)

// tlsBlock writes files into dir and returns the YAML flow mapping of a
// tls block naming them.
func tlsBlock(t *testing.T, dir, prefix string, leaf *testpki.Leaf, extra string) string {
	t.Helper()
	cert, key := filepath.Join(dir, prefix+".crt"), filepath.Join(dir, prefix+".key")
	require.NoError(t, os.WriteFile(cert, leaf.CertPEM, 0o600))
	require.NoError(t, os.WriteFile(key, leaf.KeyPEM, 0o600))
	return fmt.Sprintf("{cert_file: %s, key_file: %s%s}", cert, key, extra)
}

// withTLS puts a tls block on both networks of the test configuration.
func withTLS(cfg, mainnet, testnet string) string {
	cfg = strings.Replace(cfg, "    upstream: {url: embedded, budget: {rps: 8, burst: 5}}\n  testnet:", "    upstream: {url: embedded, budget: {rps: 8, burst: 5}}\n    tls: "+mainnet+"\n  testnet:", 1)
	return strings.Replace(cfg, "  testnet:\n    listen: \"127.0.0.1:0\"\n", "  testnet:\n    listen: \"127.0.0.1:0\"\n    tls: "+testnet+"\n", 1)
}

// TestCheckTLS: check loads the files, names a key that does not match
// its certificate, a missing file and a certificate expired or not valid
// yet by their YAML paths, and warns of a certificate that expires within
// 14 days.
func TestCheckTLS(t *testing.T) {
	t.Parallel()
	ca := testpki.NewCA(t, "test CA")
	dir := t.TempDir()
	good := ca.Issue(t, testpki.Options{})
	soon := ca.Issue(t, testpki.Options{NotAfter: time.Now().Add(72 * time.Hour)})
	expired := ca.Issue(t, testpki.Expired())
	early := ca.Issue(t, testpki.NotYetValid(48*time.Hour))
	mismatched := tlsBlock(t, dir, "a", good, "")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.key"), soon.KeyPEM, 0o600))

	cases := []struct {
		name           string
		mainnet        string
		code           int
		stdout, stderr string
	}{
		{"files that load", tlsBlock(t, dir, "good", good, ""), 0, "ok (2 networks", ""},
		{"a certificate that expires soon", tlsBlock(t, dir, "soon", soon, ""), 0, "warning: networks.mainnet.tls: the certificate in " + filepath.Join(dir, "soon.crt") + " expires on", ""},
		{"a key of another certificate", mismatched, 1, "", "networks.mainnet.tls: certs:"},
		{"an expired certificate", tlsBlock(t, dir, "expired", expired, ""), 1, "", "networks.mainnet.tls: certs: " + filepath.Join(dir, "expired.crt") + `: the certificate expired on 2020-12-31T00:00:00Z`},
		{"a certificate not valid yet", tlsBlock(t, dir, "early", early, ""), 1, "", "networks.mainnet.tls: certs: " + filepath.Join(dir, "early.crt") + `: the certificate is not valid before`},
		{"a missing file", fmt.Sprintf("{cert_file: %s, key_file: %s}", filepath.Join(dir, "none.crt"), filepath.Join(dir, "good.key")), 1, "", "no such file"},
		{"require without a client CA", tlsBlock(t, dir, "req", good, ", client_auth: require"), 1, "", "networks.mainnet.tls.client_ca_file: required by client_auth require"},
	}
	testnet := tlsBlock(t, dir, "good", good, "")
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := writeFile(t, "c.yaml", withTLS(testConfig{}.String(), c.mainnet, testnet))
			stdout, stderr, code := runTool(t, nil, "check", path)
			assert.Equal(t, c.code, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
			assert.Contains(t, stdout, c.stdout)
			assert.Contains(t, stderr, c.stderr)
		})
	}
}

// TestServeRefusesInvalidCertificate: serve does not start with a
// certificate expired or not valid yet; it says why and exits 1.
func TestServeRefusesInvalidCertificate(t *testing.T) {
	t.Parallel()
	ca := testpki.NewCA(t, "test CA")
	dir := t.TempDir()
	good := tlsBlock(t, dir, "good", ca.Issue(t, testpki.Options{}), "")
	for _, c := range []struct {
		name string
		leaf *testpki.Leaf
		want string
	}{
		{"expired", ca.Issue(t, testpki.Expired()), "expired on 2020-12-31T00:00:00Z"},
		{"not valid yet", ca.Issue(t, testpki.NotYetValid(48*time.Hour)), "is not valid before"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := writeFile(t, "c.yaml", withTLS(testConfig{}.String(), tlsBlock(t, dir, c.name, c.leaf, ""), good))
			stdout, stderr, code := runTool(t, nil, "serve", "-config", path)
			assert.Equal(t, 1, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
			assert.Contains(t, stderr, "networks.mainnet.tls: certs: "+filepath.Join(dir, c.name+".crt"))
			assert.Contains(t, stderr, c.want)
		})
	}
}

// TestGetOverTLS: the binary serves HTTPS, and `streamgate get` reaches it
// trusting the test CA (-cacert) and presenting the client certificate its
// key is bound to (-cert, -certkey); without the certificate it is 401.
func TestGetOverTLS(t *testing.T) {
	ca := testpki.NewCA(t, "test CA")
	clients := testpki.NewCA(t, "client CA")
	dir := t.TempDir()
	caFile, clientCA := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "clients.crt")
	require.NoError(t, os.WriteFile(caFile, ca.CertPEM, 0o600))
	require.NoError(t, os.WriteFile(clientCA, clients.CertPEM, 0o600))
	leaf := clients.Issue(t, testpki.Options{CommonName: "demo", Client: true})
	certFile, keyFile := filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")
	require.NoError(t, os.WriteFile(certFile, leaf.CertPEM, 0o600))
	require.NoError(t, os.WriteFile(keyFile, leaf.KeyPEM, 0o600))
	block := tlsBlock(t, dir, "server", ca.Issue(t, testpki.Options{}), ", client_ca_file: "+clientCA+", client_auth: verify_if_given")

	cfg := withTLS(testConfig{}.String(), block, block)
	cfg = strings.Replace(cfg, fmt.Sprintf("keys: [{id: %s, secret: %s}]", config.DemoKeyID, config.DemoKeySecret),
		fmt.Sprintf("keys: [{id: %s, secret: %s, client_cert: {spki_sha256: %s}}]", config.DemoKeyID, config.DemoKeySecret, leaf.SPKISHA256()), 1)
	p := start(t, cfg, []string{"mainnet", "testnet"})
	base := p.net["mainnet"]
	require.True(t, strings.HasPrefix(base, "https://"), base)
	env := []string{"STREAMGATE_KEY=" + config.DemoKeyID, "STREAMGATE_SECRET=" + config.DemoKeySecret, "STREAMGATE_URL=" + base}

	stdout, stderr, code := runTool(t, env, "get", "-cacert", caFile, "-cert", certFile, "-certkey", keyFile, "/api/v1/feeds")
	require.Equal(t, 0, code, "stderr:\n%s", stderr)
	assert.Contains(t, stderr, "HTTP/2.0 200 OK")
	assert.Contains(t, stdout, `"feedID"`)

	_, stderr, code = runTool(t, env, "get", "-cacert", caFile, "/api/v1/feeds")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "401")

	_, stderr, code = runTool(t, env, "get", "/api/v1/feeds")
	assert.NotEqual(t, 0, code, "an untrusted certificate is refused by the client")
	assert.Contains(t, stderr, "certificate")
}
