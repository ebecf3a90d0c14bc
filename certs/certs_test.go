package certs

import (
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"streamgate/internal/testing/testpki"
)

// serve starts an HTTPS server on loopback with src's configuration.
func serve(t *testing.T, src *Source) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("ok"))
	}))
	srv.TLS = src.TLSConfig()
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// serial returns the serial number of the certificate a new handshake
// with addr gets.
func serial(t *testing.T, addr string, ca *testpki.CA) string {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"})
	require.NoError(t, err)
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

// eventually polls cond until it holds, failing after a bound that only
// a broken watch reaches.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still not the case after 20s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func write(t *testing.T, dir string, l *testpki.Leaf) Files {
	t.Helper()
	var f Files
	f.Cert, f.Key = l.Write(t, dir, "tls")
	return f
}

// TestRotationByRenames replaces the certificate and then the key, each by
// an atomic rename, as a deployment tool does: between the two renames the
// key does not match the certificate, which is refused, and the old pair
// serves on; once both are in place, new handshakes get the new
// certificate, and a connection opened before still works. The watch
// survives many renames.
func TestRotationByRenames(t *testing.T) {
	ca := testpki.NewCA(t, "test CA")
	dir := t.TempDir()
	first := ca.Issue(t, testpki.Options{})
	reg := prometheus.NewRegistry()
	src, err := New(write(t, dir, first), Options{Name: "mainnet", Metrics: NewMetrics(reg)})
	require.NoError(t, err)
	require.NoError(t, src.Watch())
	t.Cleanup(func() { _ = src.Close() })
	addr := serve(t, src)
	require.Equal(t, first.Cert.SerialNumber.String(), serial(t, addr, ca))

	// A connection kept open across the rotation.
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	get := func() {
		resp, err := client.Get("https://" + addr + "/")
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode)
	}
	get()

	for i := range 5 {
		next := ca.Issue(t, testpki.Options{})
		testpki.WriteAtomic(t, filepath.Join(dir, "tls.crt"), next.CertPEM)
		// The key does not match yet: refused, the pair in force stays.
		eventually(t, "the mismatched pair refused", func() bool {
			return testutil.ToFloat64(src.metrics.reloads.WithLabelValues("mainnet", ResultRefused)) >= float64(i+1)
		})
		require.Equal(t, src.Current().Cert.Leaf.SerialNumber.String(), serial(t, addr, ca), "a refused pair changed what handshakes get")
		testpki.WriteAtomic(t, filepath.Join(dir, "tls.key"), next.KeyPEM)
		eventually(t, "the new certificate served", func() bool { return serial(t, addr, ca) == next.Cert.SerialNumber.String() })
		get()
	}
	require.Equal(t, float64(5), testutil.ToFloat64(src.metrics.reloads.WithLabelValues("mainnet", ResultLoaded)))
	require.Equal(t, float64(src.Current().NotAfter.Unix()), testutil.ToFloat64(src.metrics.expiryTS.WithLabelValues("mainnet")))
}

// TestRotationBySecretSwap swaps a Kubernetes Secret's "..data" symlink,
// as the kubelet does when the Secret changes (cert-manager's renewals):
// the files' own names never change.
func TestRotationBySecretSwap(t *testing.T) {
	ca := testpki.NewCA(t, "test CA")
	dir := t.TempDir()
	generation := func(n int, l *testpki.Leaf) {
		gen := filepath.Join(dir, "..gen"+string(rune('0'+n)))
		require.NoError(t, os.Mkdir(gen, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(gen, "tls.crt"), l.CertPEM, 0o600))
		require.NoError(t, os.WriteFile(filepath.Join(gen, "tls.key"), l.KeyPEM, 0o600))
		tmp := filepath.Join(dir, "..data_tmp")
		require.NoError(t, os.Symlink(filepath.Base(gen), tmp))
		require.NoError(t, os.Rename(tmp, filepath.Join(dir, "..data")))
	}
	first := ca.Issue(t, testpki.Options{})
	generation(1, first)
	for _, name := range []string{"tls.crt", "tls.key"} {
		require.NoError(t, os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)))
	}
	src, err := New(Files{Cert: filepath.Join(dir, "tls.crt"), Key: filepath.Join(dir, "tls.key")}, Options{Name: "admin"})
	require.NoError(t, err)
	require.NoError(t, src.Watch())
	t.Cleanup(func() { _ = src.Close() })
	addr := serve(t, src)
	require.Equal(t, first.Cert.SerialNumber.String(), serial(t, addr, ca))
	for n := 2; n <= 4; n++ {
		next := ca.Issue(t, testpki.Options{})
		generation(n, next)
		require.NoError(t, os.RemoveAll(filepath.Join(dir, "..gen"+string(rune('0'+n-1)))))
		eventually(t, "the swapped Secret served", func() bool { return serial(t, addr, ca) == next.Cert.SerialNumber.String() })
	}
}

// TestBadFilesRefused: garbage, a missing key and a key of another
// certificate are refused by Reload and the pair in force stays.
func TestBadFilesRefused(t *testing.T) {
	ca := testpki.NewCA(t, "test CA")
	dir := t.TempDir()
	first := ca.Issue(t, testpki.Options{})
	f := write(t, dir, first)
	src, err := New(f, Options{Name: "mainnet"})
	require.NoError(t, err)
	other := ca.Issue(t, testpki.Options{})
	cases := []struct {
		name  string
		apply func()
	}{
		{"garbage certificate", func() { testpki.WriteAtomic(t, f.Cert, []byte("not a certificate")) }},
		{"key missing", func() { testpki.WriteAtomic(t, f.Cert, first.CertPEM); require.NoError(t, os.Remove(f.Key)) }},
		{"key of another certificate", func() { testpki.WriteAtomic(t, f.Key, other.KeyPEM) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.apply()
			res, err := src.Reload()
			require.Error(t, err)
			require.Equal(t, ResultRefused, res)
			require.Equal(t, first.Cert.SerialNumber, src.Current().Cert.Leaf.SerialNumber)
		})
	}
	testpki.WriteAtomic(t, f.Key, first.KeyPEM)
	res, err := src.Reload()
	require.NoError(t, err)
	require.Equal(t, ResultUnchanged, res)
}

// TestClientAuth: require refuses a client without a certificate at the
// handshake and one whose certificate another CA signed; verify_if_given
// serves both a client without and one with a good certificate.
func TestClientAuth(t *testing.T) {
	ca := testpki.NewCA(t, "server CA")
	clients := testpki.NewCA(t, "client CA")
	stranger := testpki.NewCA(t, "another CA")
	dir := t.TempDir()
	f := write(t, dir, ca.Issue(t, testpki.Options{}))
	f.ClientCA = filepath.Join(dir, "ca.crt")
	testpki.WriteAtomic(t, f.ClientCA, clients.CertPEM)
	good := clients.Issue(t, testpki.Options{CommonName: "team-a", Client: true}).TLS(t)
	bad := stranger.Issue(t, testpki.Options{CommonName: "team-a", Client: true}).TLS(t)

	handshake := func(addr string, certs ...tls.Certificate) error {
		cfg := &tls.Config{RootCAs: ca.Pool()}
		if len(certs) > 0 {
			// Offered whatever CAs the server names (Go's client would
			// otherwise keep a certificate the server's CAs did not sign
			// to itself).
			cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &certs[0], nil }
		}
		c, err := tls.Dial("tcp", addr, cfg)
		if err != nil {
			return err
		}
		defer c.Close()
		// TLS 1.3: the server's verdict on the client's certificate
		// arrives after the client's handshake ends; a read brings it.
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
		if err == nil {
			_, err = c.Read(make([]byte, 1))
		}
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			return nil
		}
		return err
	}

	f.ClientAuth = ClientAuthRequire
	src, err := New(f, Options{Name: "mainnet"})
	require.NoError(t, err)
	addr := serve(t, src)
	require.Error(t, handshake(addr), "no certificate, require")
	require.Error(t, handshake(addr, bad), "a stranger's certificate, require")
	require.NoError(t, handshake(addr, good))

	f.ClientAuth = ClientAuthVerifyIfGiven
	res, err := src.SetFiles(f)
	require.NoError(t, err)
	require.Equal(t, ResultLoaded, res, "a policy changed is a new set")
	require.NoError(t, handshake(addr), "no certificate, verify_if_given")
	require.Error(t, handshake(addr, bad), "a stranger's certificate, verify_if_given")
	require.NoError(t, handshake(addr, good))

	_, err = New(Files{Cert: f.Cert, Key: f.Key, ClientAuth: ClientAuthRequire}, Options{})
	require.ErrorContains(t, err, "client_ca_file")
}
