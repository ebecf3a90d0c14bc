package server_test

import (
	"crypto/tls"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"streamgate/certs"
	"streamgate/config"
	"streamgate/internal/testing/testpki"
	"streamgate/server/servertest"
)

// TestHandshakeErrorsSampled: one client sending 500 malformed
// ClientHellos, and a few plain HTTP requests, clients offering only CBC
// suites and clients offering only TLS 1.1, to a TLS listener. Every
// failed handshake is counted by its reason in
// streamgate_tls_handshake_errors_total (labels: the listener and the
// reason, nothing of the client); the log gets a few lines per reason,
// each saying how many of that reason it did not write: the lines written
// and the counts they carry add up to the handshakes that failed.
func TestHandshakeErrorsSampled(t *testing.T) {
	ca := testpki.NewCA(t, "test CA")
	block := &config.TLS{}
	block.CertFile, block.KeyFile = ca.Issue(t, testpki.Options{}).Write(t, t.TempDir(), "tls")
	core, logs := observer.New(zapcore.DebugLevel)
	env := servertest.Start(t, servertest.Options{Logger: zap.New(core), Config: func(c *config.Config) {
		c.Networks["mainnet"].TLS = block
	}})
	addr := env.Server.Addr("mainnet")

	// raw sends b and waits for the server to close the connection.
	raw := func(b []byte) {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer c.Close()
		_, err = c.Write(b)
		require.NoError(t, err)
		require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
		_, _ = io.Copy(io.Discard, c)
	}
	handshake := func(cfg *tls.Config) {
		cfg.RootCAs = ca.Pool()
		c, err := tls.Dial("tcp", addr, cfg)
		if c != nil {
			c.Close()
		}
		require.Error(t, err)
	}
	want := map[string]int{
		certs.ReasonBadClientHello:     500,
		certs.ReasonPlainHTTP:          20,
		certs.ReasonNoSharedCipher:     10,
		certs.ReasonUnsupportedVersion: 10,
	}
	// A handshake record whose ClientHello is one byte long.
	badHello := []byte{0x16, 0x03, 0x01, 0x00, 0x05, 0x01, 0x00, 0x00, 0x01, 0x05}
	for range want[certs.ReasonBadClientHello] {
		raw(badHello)
	}
	for range want[certs.ReasonPlainHTTP] {
		raw([]byte("GET /api/v1/feeds HTTP/1.1\r\nHost: x\r\n\r\n"))
	}
	for range want[certs.ReasonNoSharedCipher] {
		handshake(&tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA}})
	}
	for range want[certs.ReasonUnsupportedVersion] {
		handshake(&tls.Config{MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11})
	}

	counted := func() map[string]int {
		mfs, err := env.Registry.Gather()
		require.NoError(t, err)
		out := map[string]int{}
		for _, mf := range mfs {
			if mf.GetName() != certs.MetricHandshakeErrors {
				continue
			}
			for _, m := range mf.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				require.Len(t, labels, 2, "listener and reason only")
				require.Equal(t, "mainnet", labels["listener"])
				require.Contains(t, certs.HandshakeReasons, labels["reason"])
				if v := int(m.GetCounter().GetValue()); v > 0 {
					out[labels["reason"]] = v
				}
			}
		}
		return out
	}
	// net/http logs a failed handshake after closing its connection.
	require.Eventually(t, func() bool { return assert.ObjectsAreEqual(want, counted()) }, 20*time.Second, 10*time.Millisecond,
		"counted %v", counted())

	// Closing writes the counts still pending (its error says that
	// connections were still open, which Close does not wait for).
	_ = env.Server.Close()
	var lines, logged map[string]int // lines written, and failures written or counted, per reason
	read := func() {
		lines, logged = map[string]int{}, map[string]int{}
		for _, e := range logs.All() {
			if e.LoggerName != "http" {
				continue
			}
			f := e.ContextMap()
			reason, _ := f["reason"].(string)
			require.Equal(t, "mainnet", f["listener"], e.Message)
			lines[reason]++
			suppressed, ok := f["suppressed"].(int64)
			require.True(t, ok, "every line says how many it left out: %v", f)
			logged[reason] += int(suppressed)
			switch e.Message {
			case "TLS handshake failed":
				logged[reason]++
				assert.NotEmpty(t, f["remote"])
				assert.NotEmpty(t, f["error"])
			case "TLS handshake failed: repeats not logged":
				assert.Positive(t, suppressed)
			default:
				t.Errorf("unexpected line %q %v", e.Message, f)
			}
		}
	}
	// A failure is counted just before it is logged: the last may still
	// be on its way.
	require.Eventually(t, func() bool { read(); return assert.ObjectsAreEqual(want, logged) }, 10*time.Second, 5*time.Millisecond,
		"lines written and the counts they carry: %v", logged)
	assert.Less(t, lines[certs.ReasonBadClientHello], want[certs.ReasonBadClientHello]/10, "lines for 500 bad ClientHellos: %v", lines)
	t.Logf("lines written per reason: %v (failures %v)", lines, want)
}
