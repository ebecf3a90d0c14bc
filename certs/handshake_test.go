package certs

import (
	"bytes"
	"crypto/tls"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/internal/testing/testpki"
)

// lines is an http.Server's ErrorLog that keeps its lines.
type lines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lines) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.buf.Len() == 0 {
		return nil
	}
	return strings.Split(strings.TrimSpace(l.buf.String()), "\n")
}

// TestHandshakeReason: each way a real client fails a handshake with a
// listener of a Source, as net/http writes it to the server's ErrorLog,
// is classified by its reason.
func TestHandshakeReason(t *testing.T) {
	ca := testpki.NewCA(t, "server CA")
	clients := testpki.NewCA(t, "client CA")
	dir := t.TempDir()
	f := write(t, dir, ca.Issue(t, testpki.Options{}))
	f.ClientCA = filepath.Join(dir, "clients.crt")
	testpki.WriteAtomic(t, f.ClientCA, clients.CertPEM)
	f.ClientAuth = ClientAuthRequire
	src, err := New(f, Options{Name: "mainnet"})
	require.NoError(t, err)

	errLog := &lines{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.TLS = src.TLSConfig()
	srv.Config.ErrorLog = log.New(errLog, "", 0)
	srv.Config.ReadHeaderTimeout = 200 * time.Millisecond // bounds the handshake: the timeout case
	srv.StartTLS()
	t.Cleanup(srv.Close)
	addr := srv.Listener.Addr().String()

	raw := func(b []byte, wait bool) func() {
		return func() {
			c, err := net.Dial("tcp", addr)
			require.NoError(t, err)
			defer c.Close()
			if b != nil {
				_, err = c.Write(b)
				require.NoError(t, err)
			}
			if wait { // until the server closes
				require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
				_, _ = io.Copy(io.Discard, c)
			}
		}
	}
	client := func(cfg *tls.Config) func() {
		return func() {
			if cfg.RootCAs == nil && !cfg.InsecureSkipVerify {
				cfg.RootCAs = ca.Pool()
			}
			c, err := tls.Dial("tcp", addr, cfg)
			if err == nil {
				// TLS 1.3: the server's verdict on the client's
				// certificate comes with the first read.
				_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
				_, _ = c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
				_, _ = c.Read(make([]byte, 1))
				c.Close()
			}
		}
	}
	good := clients.Issue(t, testpki.Options{CommonName: "team", Client: true}).TLS(t)
	stranger := testpki.NewCA(t, "another CA").Issue(t, testpki.Options{CommonName: "team", Client: true}).TLS(t)
	offer := func(c tls.Certificate) func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		return func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &c, nil }
	}
	cases := []struct {
		reason string
		do     func()
	}{
		{ReasonPlainHTTP, raw([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), true)},
		{ReasonBadClientHello, raw([]byte{0x16, 0x03, 0x01, 0x00, 0x05, 0x01, 0x00, 0x00, 0x01, 0x05}, true)},
		{ReasonBadClientHello, raw([]byte{0x16, 0x03, 0x01, 0x00, 0x05, 0x01, 0x02, 0x03, 0x04, 0x05}, true)},
		{ReasonBadClientHello, raw([]byte{0x80, 0x2e, 0x01, 0x00, 0x02}, true)}, // SSLv2
		{ReasonBadClientHello, raw([]byte("\x01\x02\x03\x04\x05garbage that is not TLS"), true)},
		{ReasonUnsupportedVersion, client(&tls.Config{MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11})},
		{ReasonNoSharedCipher, client(&tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA}})},
		{ReasonNoSharedProtocol, client(&tls.Config{NextProtos: []string{"spdy/3"}, GetClientCertificate: offer(good)})},
		{ReasonBadCertificate, client(&tls.Config{})}, // no certificate, require
		{ReasonBadCertificate, client(&tls.Config{GetClientCertificate: offer(stranger)})},
		{ReasonClientAlert, client(&tls.Config{RootCAs: clients.Pool()})}, // does not trust the server's
		{ReasonEOF, raw([]byte{0x16, 0x03, 0x01}, false)},
		{ReasonEOF, raw(nil, false)},
		{ReasonTimeout, raw(nil, true)},
	}
	for i, c := range cases {
		c.do()
		var got []string
		require.Eventually(t, func() bool {
			got = errLog.all()
			return len(got) == i+1
		}, 10*time.Second, 5*time.Millisecond, "case %d (%s): lines %q", i, c.reason, got)
		line := got[i]
		text, ok := strings.CutPrefix(line, "http: TLS handshake error from ")
		require.True(t, ok, line)
		_, text, _ = strings.Cut(text, ": ")
		assert.Equal(t, c.reason, HandshakeReason(text), "case %d: %s", i, line)
		t.Logf("%-19s %s", HandshakeReason(text), text)
	}
	assert.Equal(t, ReasonOther, HandshakeReason("tls: something new"))
}
