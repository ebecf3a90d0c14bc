package certs

import (
	"crypto/tls"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"streamgate/internal/testing/testpki"
)

// TestExpiredCertificateRefused: an expired pair of the same CA renamed
// over the files in force (the certificate, then the key) is refused like
// a mismatched pair: the pair in force keeps serving every new handshake,
// a warning says it expired, and nothing counts as loaded. A good pair
// renamed after it is taken.
func TestExpiredCertificateRefused(t *testing.T) {
	ca := testpki.NewCA(t, "test CA")
	dir := t.TempDir()
	first := ca.Issue(t, testpki.Options{})
	reg := prometheus.NewRegistry()
	core, logs := observer.New(zapcore.InfoLevel)
	src, err := New(write(t, dir, first), Options{Name: "mainnet", Metrics: NewMetrics(reg), Logger: zap.New(core)})
	require.NoError(t, err)
	require.NoError(t, src.Watch())
	t.Cleanup(func() { _ = src.Close() })
	addr := serve(t, src)

	expired := ca.Issue(t, testpki.Expired())
	testpki.WriteAtomic(t, filepath.Join(dir, "tls.crt"), expired.CertPEM)
	testpki.WriteAtomic(t, filepath.Join(dir, "tls.key"), expired.KeyPEM)
	eventually(t, "the expired pair refused", func() bool {
		return logs.FilterMessage("TLS certificate refused; the one in force stays").
			FilterField(zap.String("listener", "mainnet")).Filter(func(e observer.LoggedEntry) bool {
			return strings.Contains(e.ContextMap()["error"].(string), "expired on 2020-12-31T00:00:00Z")
		}).Len() > 0
	})
	assert.Equal(t, first.Cert.SerialNumber.String(), serial(t, addr, ca), "a new handshake gets the pair in force")
	assert.Equal(t, first.Cert.SerialNumber, src.Current().Cert.Leaf.SerialNumber)
	assert.Zero(t, testutil.ToFloat64(src.metrics.reloads.WithLabelValues("mainnet", ResultLoaded)))
	assert.GreaterOrEqual(t, testutil.ToFloat64(src.metrics.reloads.WithLabelValues("mainnet", ResultRefused)), 1.0)
	assert.Zero(t, logs.FilterMessage("TLS certificate loaded").Len())
	assert.Equal(t, float64(first.Cert.NotAfter.Unix()), testutil.ToFloat64(src.metrics.expiryTS.WithLabelValues("mainnet")),
		"the expiry shown is the one in force")

	res, err := src.Reload()
	assert.Equal(t, ResultRefused, res, "a reload asked for refuses it too")
	var ve *ValidityError
	require.True(t, errors.As(err, &ve), "%v", err)
	assert.False(t, ve.NotYetValid())
	assert.True(t, ve.Leaf)

	next := ca.Issue(t, testpki.Options{})
	testpki.WriteAtomic(t, filepath.Join(dir, "tls.crt"), next.CertPEM)
	testpki.WriteAtomic(t, filepath.Join(dir, "tls.key"), next.KeyPEM)
	eventually(t, "the good pair served", func() bool { return serial(t, addr, ca) == next.Cert.SerialNumber.String() })
}

// TestInvalidCertificateAtStart: a Source is not made of an expired
// certificate, nor of one not valid yet, nor of a chain whose
// intermediate expired.
func TestInvalidCertificateAtStart(t *testing.T) {
	ca := testpki.NewCA(t, "test CA")
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		leaf *testpki.Leaf
		want string
	}{
		{"expired", ca.Issue(t, testpki.Expired()), "expired on 2020-12-31T00:00:00Z"},
		{"not valid yet", ca.Issue(t, testpki.NotYetValid(48*time.Hour)), "is not valid before"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := New(write(t, dir, c.leaf), Options{Name: "mainnet"})
			require.ErrorContains(t, err, c.want)
			require.ErrorContains(t, err, filepath.Join(dir, "tls.crt"), "names the file")
		})
	}
	t.Run("intermediate expired", func(t *testing.T) {
		leaf := ca.Issue(t, testpki.Options{})
		old := ca.Issue(t, testpki.Expired()) // stands in for an intermediate: only its dates matter
		f := write(t, dir, leaf)
		testpki.WriteAtomic(t, f.Cert, append(append([]byte{}, leaf.CertPEM...), old.CertPEM...))
		_, err := New(f, Options{Name: "mainnet"})
		require.ErrorContains(t, err, "the chain's intermediate certificate")
		require.ErrorContains(t, err, "expired on 2020-12-31T00:00:00Z")
	})
}

// TestNotYetValidLoadedOnceValid: a pair whose certificate becomes valid
// a moment from now (an issuer's clock ahead of this host's) is refused
// at first; the Source loads it again once it is valid, with no further
// change of the files.
func TestNotYetValidLoadedOnceValid(t *testing.T) {
	ca := testpki.NewCA(t, "test CA")
	dir := t.TempDir()
	first := ca.Issue(t, testpki.Options{})
	reg := prometheus.NewRegistry()
	f := write(t, dir, first)
	src, err := New(f, Options{Name: "mainnet", Metrics: NewMetrics(reg)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = src.Close() })
	addr := serve(t, src)

	soon := ca.Issue(t, testpki.NotYetValid(2*time.Second))
	testpki.WriteAtomic(t, f.Cert, soon.CertPEM)
	testpki.WriteAtomic(t, f.Key, soon.KeyPEM)
	res, err := src.Reload()
	var ve *ValidityError
	if time.Now().Before(soon.Cert.NotBefore) { // not a machine that took two seconds to get here
		require.Equal(t, ResultRefused, res)
		require.True(t, errors.As(err, &ve), "%v", err)
		require.True(t, ve.NotYetValid())
		require.Equal(t, first.Cert.SerialNumber.String(), serial(t, addr, ca))
	}
	eventually(t, "the certificate served once valid", func() bool { return serial(t, addr, ca) == soon.Cert.SerialNumber.String() })
	assert.Equal(t, 1.0, testutil.ToFloat64(src.metrics.reloads.WithLabelValues("mainnet", ResultLoaded)))
}

// TestTLS12CipherSuites: TLS 1.2 is served with ECDHE and an AEAD cipher
// only. A client that offers only CBC suites (with SHA-1 or SHA-256 MACs,
// which Go's defaults would accept) is refused at the handshake; one that
// offers an ECDHE-AEAD suite is served with it; a client offering every
// suite Go knows gets one of the list; TLS 1.3 is served as before.
func TestTLS12CipherSuites(t *testing.T) {
	ca := testpki.NewCA(t, "test CA")
	src, err := New(write(t, t.TempDir(), ca.Issue(t, testpki.Options{})), Options{Name: "mainnet"})
	require.NoError(t, err)
	addr := serve(t, src)
	dial := func(max uint16, suites ...uint16) (tls.ConnectionState, error) {
		c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool(), MaxVersion: max, CipherSuites: suites})
		if err != nil {
			return tls.ConnectionState{}, err
		}
		defer c.Close()
		return c.ConnectionState(), nil
	}

	_, err = dial(tls.VersionTLS12,
		tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA,
		tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256)
	require.Error(t, err, "CBC suites only")
	assert.Contains(t, err.Error(), "handshake failure")

	st, err := dial(tls.VersionTLS12, tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256)
	require.NoError(t, err)
	assert.Equal(t, uint16(tls.VersionTLS12), st.Version)
	assert.Equal(t, tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, st.CipherSuite)

	st, err = dial(tls.VersionTLS12, tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305)
	require.NoError(t, err)
	assert.Equal(t, tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305, st.CipherSuite)

	var every []uint16
	for _, s := range append(tls.CipherSuites(), tls.InsecureCipherSuites()...) {
		every = append(every, s.ID)
	}
	// The CBC suites first: a server that took the client's order would
	// pick one.
	st, err = dial(tls.VersionTLS12, append([]uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA}, every...)...)
	require.NoError(t, err)
	assert.Contains(t, CipherSuites, st.CipherSuite, tls.CipherSuiteName(st.CipherSuite))

	st, err = dial(tls.VersionTLS13)
	require.NoError(t, err)
	assert.Equal(t, uint16(tls.VersionTLS13), st.Version)
}
