package proxy_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/auth"
	"streamgate/certs"
	"streamgate/config"
	"streamgate/internal/testing/testpki"
	"streamgate/server/servertest"
	"streamgate/upstreamsim"
)

// tlsFiles writes a server certificate of ca into a new directory and
// returns the TLS block that serves it.
func tlsFiles(t *testing.T, ca *testpki.CA) (*config.TLS, *testpki.Leaf) {
	t.Helper()
	dir := t.TempDir()
	leaf := ca.Issue(t, testpki.Options{})
	b := &config.TLS{}
	b.CertFile, b.KeyFile = leaf.Write(t, dir, "tls")
	return b, leaf
}

// tlsClient is a servertest client over HTTPS trusting ca, presenting
// cert when given.
func tlsClient(ca *testpki.CA, c *servertest.Client, cert *tls.Certificate) (*servertest.Client, *http.Transport) {
	cfg := &tls.Config{RootCAs: ca.Pool()}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	tr := &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true}
	cc := *c
	cc.HTTP = &http.Client{Transport: tr}
	return &cc, tr
}

// serialAt returns the serial of the certificate a new handshake gets.
func serialAt(t *testing.T, addr string, ca *testpki.CA) string {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool()})
	require.NoError(t, err)
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

// TestTLSServesAndRotates: REST over HTTPS (HTTP/2 negotiated) and a
// stream over WSS (HTTP/1.1 upgrade); the certificate is rotated on disk
// mid-stream, the key renamed in after the certificate as a deployment
// does: new handshakes get the new certificate, and the open stream goes
// on without losing a second.
func TestTLSServesAndRotates(t *testing.T) {
	ca := testpki.NewCA(t, "streamgate test CA")
	block, first := tlsFiles(t, ca)
	env := servertest.Start(t, servertest.Options{Config: func(c *config.Config) {
		c.Networks["mainnet"].TLS = block
	}})
	require.True(t, strings.HasPrefix(env.Mainnet, "https://"))
	addr := strings.TrimPrefix(env.Mainnet, "https://")
	btc := env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
	demo, tr := tlsClient(ca, servertest.Demo(), nil)
	defer tr.CloseIdleConnections()

	resp, body := demo.Get(t, env.Mainnet, "/api/v1/reports/latest?feedID="+btc)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	assert.Equal(t, 2, resp.ProtoMajor, "REST over TLS speaks HTTP/2")
	plain, err := http.Get("http://" + addr + "/api/v1/reports/latest?feedID=" + btc)
	if err == nil {
		plain.Body.Close()
		assert.Equal(t, http.StatusBadRequest, plain.StatusCode, "plain HTTP to a TLS listener")
	}

	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	req, err := http.NewRequest(http.MethodGet, env.Mainnet+"/api/v1/ws?feedIDs="+btc, nil)
	require.NoError(t, err)
	auth.Sign(req, config.DemoKeyID, []byte(config.DemoKeySecret), time.Now())
	wsTr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}
	conn, _, err := websocket.Dial(ctx, "wss://"+addr+"/api/v1/ws?feedIDs="+btc, &websocket.DialOptions{
		HTTPHeader: req.Header, HTTPClient: &http.Client{Transport: wsTr},
	})
	require.NoError(t, err)
	defer conn.CloseNow()
	var seconds []int64
	read := func(n int) {
		for range n {
			_, data, err := conn.Read(ctx)
			require.NoError(t, err)
			var f servertest.Frame
			require.NoError(t, json.Unmarshal(data, &f))
			seconds = append(seconds, f.Report.ObservationsTimestamp)
		}
	}
	read(2)

	next := ca.Issue(t, testpki.Options{})
	testpki.WriteAtomic(t, block.CertFile, next.CertPEM)
	testpki.WriteAtomic(t, block.KeyFile, next.KeyPEM)
	deadline := time.Now().Add(20 * time.Second)
	for serialAt(t, addr, ca) != next.Cert.SerialNumber.String() {
		require.True(t, time.Now().Before(deadline), "the rotated certificate was never served (still %s, first was %s)", serialAt(t, addr, ca), first.Cert.SerialNumber)
		time.Sleep(10 * time.Millisecond)
	}
	read(3)
	for i := 1; i < len(seconds); i++ {
		require.Equal(t, seconds[i-1]+1, seconds[i], "a second lost or repeated across the rotation: %v", seconds)
	}
	// The kept-alive HTTP/2 connection was opened before the rotation and
	// still serves.
	resp, body = demo.Get(t, env.Mainnet, "/api/v1/reports/latest?feedID="+btc)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
}

// TestKeyBoundToClientCert: a key bound to a client certificate (by its
// public key, or by a SAN) is 401 over a connection without it or with
// another certificate of the same CA, and served with it; a listener
// that requires client certificates refuses a client without one at the
// handshake; the refusals cost the upstream nothing.
func TestKeyBoundToClientCert(t *testing.T) {
	ca := testpki.NewCA(t, "server CA")
	clients := testpki.NewCA(t, "client CA")
	dir := t.TempDir()
	caFile := filepath.Join(dir, "clients.crt")
	testpki.WriteAtomic(t, caFile, clients.CertPEM)
	bound := clients.Issue(t, testpki.Options{CommonName: "demo", URIs: []string{"spiffe://example.org/team/demo"}, Client: true})
	other := clients.Issue(t, testpki.Options{CommonName: "someone", Client: true})

	for _, rule := range []struct {
		name string
		cert config.ClientCert
	}{
		{"spki", config.ClientCert{SPKISHA256: bound.SPKISHA256()}},
		{"san", config.ClientCert{SAN: "spiffe://example.org/team/demo"}},
	} {
		t.Run(rule.name, func(t *testing.T) {
			env := servertest.Start(t, servertest.Options{Config: func(c *config.Config) {
				for _, name := range []string{"mainnet", "testnet"} {
					b, _ := tlsFiles(t, ca)
					b.ClientCAFile, b.ClientAuth = caFile, certs.ClientAuthVerifyIfGiven
					c.Networks[name].TLS = b
				}
				c.Teams[0].Keys[0].ClientCert = &rule.cert
				require.NoError(t, c.Validate())
			}})
			btc := env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
			target := "/api/v1/reports/latest?feedID=" + btc
			for _, c := range []struct {
				name string
				cert *tls.Certificate
				want int
			}{
				{"no certificate", nil, http.StatusUnauthorized},
				{"another certificate", ptr(other.TLS(t)), http.StatusUnauthorized},
				{"its certificate", ptr(bound.TLS(t)), http.StatusOK},
			} {
				client, tr := tlsClient(clients, servertest.Demo(), c.cert)
				client.HTTP.Transport.(*http.Transport).TLSClientConfig.RootCAs = ca.Pool()
				resp, body := client.Get(t, env.Mainnet, target)
				tr.CloseIdleConnections()
				require.Equal(t, c.want, resp.StatusCode, "%s: %s", c.name, body)
				if c.want == http.StatusUnauthorized {
					var e struct{ Error, Message string }
					require.NoError(t, json.Unmarshal(body, &e))
					assert.Contains(t, e.Message, "client certificate", c.name)
					assert.Zero(t, env.UpstreamCalls(), "%s: nothing upstream", c.name)
				}
			}
			// The research key is not bound: served without a certificate.
			research, tr := tlsClient(ca, servertest.Research(), nil)
			defer tr.CloseIdleConnections()
			resp, body := research.Get(t, env.Testnet, "/api/v1/feeds")
			require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
		})
	}

	t.Run("require", func(t *testing.T) {
		env := servertest.Start(t, servertest.Options{Config: func(c *config.Config) {
			b, _ := tlsFiles(t, ca)
			b.ClientCAFile, b.ClientAuth = caFile, certs.ClientAuthRequire
			c.Networks["mainnet"].TLS = b
		}})
		client, tr := tlsClient(ca, servertest.Demo(), nil)
		defer tr.CloseIdleConnections()
		req, err := client.Request(t.Context(), env.Mainnet, "/api/v1/feeds")
		require.NoError(t, err)
		_, err = client.HTTP.Do(req)
		require.Error(t, err, "a client without a certificate is refused at the handshake")
		withCert, tr2 := tlsClient(ca, servertest.Demo(), ptr(other.TLS(t)))
		defer tr2.CloseIdleConnections()
		resp, body := withCert.Get(t, env.Mainnet, "/api/v1/feeds")
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	})
}

func ptr[T any](v T) *T { return &v }

// TestBindingAKeyClosesItsUncertifiedStreams: a reload that binds a key to
// a client certificate closes (1008, with the reason) the WebSockets of
// that key whose connection did not present it, and keeps the one that
// did.
func TestBindingAKeyClosesItsUncertifiedStreams(t *testing.T) {
	ca := testpki.NewCA(t, "server CA")
	clients := testpki.NewCA(t, "client CA")
	dir := t.TempDir()
	caFile := filepath.Join(dir, "clients.crt")
	testpki.WriteAtomic(t, caFile, clients.CertPEM)
	leaf := clients.Issue(t, testpki.Options{CommonName: "demo", Client: true})
	env := servertest.Start(t, servertest.Options{Config: func(c *config.Config) {
		for _, name := range []string{"mainnet", "testnet"} {
			b, _ := tlsFiles(t, ca)
			b.ClientCAFile, b.ClientAuth = caFile, certs.ClientAuthVerifyIfGiven
			c.Networks[name].TLS = b
		}
	}})
	addr := strings.TrimPrefix(env.Mainnet, "https://")
	btc := env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	dial := func(cert *tls.Certificate) *websocket.Conn {
		req, err := http.NewRequest(http.MethodGet, env.Mainnet+"/api/v1/ws?feedIDs="+btc, nil)
		require.NoError(t, err)
		auth.Sign(req, config.DemoKeyID, []byte(config.DemoKeySecret), time.Now())
		tc := &tls.Config{RootCAs: ca.Pool()}
		if cert != nil {
			tc.Certificates = []tls.Certificate{*cert}
		}
		conn, _, err := websocket.Dial(ctx, "wss://"+addr+"/api/v1/ws?feedIDs="+btc, &websocket.DialOptions{
			HTTPHeader: req.Header, HTTPClient: &http.Client{Transport: &http.Transport{TLSClientConfig: tc}},
		})
		require.NoError(t, err)
		t.Cleanup(func() { conn.CloseNow() })
		_, _, err = conn.Read(ctx) // streaming
		require.NoError(t, err)
		return conn
	}
	plain := dial(nil)
	certified := dial(ptr(leaf.TLS(t)))

	next := *env.Config
	next.Teams = slices.Clone(env.Config.Teams)
	next.Teams[0].Keys = slices.Clone(next.Teams[0].Keys)
	next.Teams[0].Keys[0].ClientCert = &config.ClientCert{SPKISHA256: leaf.SPKISHA256()}
	require.NoError(t, next.Validate())
	require.NoError(t, env.Gateway.Reload(&next))

	var err error
	for err == nil {
		_, _, err = plain.Read(ctx)
	}
	assert.Equal(t, websocket.StatusPolicyViolation, websocket.CloseStatus(err), "%v", err)
	assert.Contains(t, err.Error(), "client certificate")
	for range 2 {
		_, _, err := certified.Read(ctx)
		require.NoError(t, err, "the connection with the certificate streams on")
	}
}
