package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"time"
)

// certFiles are a certificate and key written for one run.
type certFiles struct{ dir, cert, key string }

// benchCert makes a self-signed ECDSA P-256 certificate for 127.0.0.1,
// valid for a day, writes it to a new directory and returns the files and
// a pool that trusts it.
func benchCert() (certFiles, *x509.CertPool, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return certFiles{}, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "streamgate-bench"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return certFiles{}, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return certFiles{}, nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return certFiles{}, nil, err
	}
	dir, err := os.MkdirTemp("", "streamgate-bench-tls-")
	if err != nil {
		return certFiles{}, nil, err
	}
	f := certFiles{dir: dir, cert: filepath.Join(dir, "tls.crt"), key: filepath.Join(dir, "tls.key")}
	if err := os.WriteFile(f.cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return f, nil, err
	}
	if err := os.WriteFile(f.key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return f, nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return f, pool, nil
}

// otlpSink is a stand-in for an OpenTelemetry collector's OTLP/HTTP
// endpoint on loopback: it reads what is posted to /v1/traces and answers
// an empty ExportTraceServiceResponse, which is an empty protobuf message.
func otlpSink() *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
}
