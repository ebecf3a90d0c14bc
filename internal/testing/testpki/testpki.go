// Package testpki makes certificate authorities and certificates for
// tests, in memory: ECDSA P-256 keys, a CA per test, server certificates
// for loopback and client certificates with the names a test gives.
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// CA is a test certificate authority.
type CA struct {
	Cert    *x509.Certificate
	CertPEM []byte
	key     *ecdsa.PrivateKey
	serial  atomic.Int64
}

// NewCA makes a CA named name, valid from an hour ago for a day.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{Cert: cert, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), key: key}
	ca.serial.Store(1)
	return ca
}

// Pool returns a pool holding the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Leaf is an issued certificate and its key, in PEM.
type Leaf struct {
	Cert    *x509.Certificate
	CertPEM []byte
	KeyPEM  []byte
}

// TLS returns the leaf as a tls.Certificate.
func (l *Leaf) TLS(t testing.TB) tls.Certificate {
	t.Helper()
	c, err := tls.X509KeyPair(l.CertPEM, l.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// SPKISHA256 returns the hex SHA-256 of the leaf's SubjectPublicKeyInfo.
func (l *Leaf) SPKISHA256() string {
	sum := sha256.Sum256(l.Cert.RawSubjectPublicKeyInfo)
	return hex.EncodeToString(sum[:])
}

// Options of an issued certificate. The zero value is a server
// certificate for 127.0.0.1, ::1 and localhost, valid from an hour ago
// for a day.
type Options struct {
	CommonName string
	DNSNames   []string
	URIs       []string // URI SANs, such as spiffe://org/team
	Client     bool     // a client certificate instead of a server one
	NotBefore  time.Time
	NotAfter   time.Time
}

// Expired are the Options of a server certificate that expired long ago:
// valid through 2019 and 2020 only.
func Expired() Options {
	return Options{
		NotBefore: time.Date(2019, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:  time.Date(2020, 12, 31, 0, 0, 0, 0, time.UTC),
	}
}

// NotYetValid are the Options of a server certificate valid from
// now+from, for a day.
func NotYetValid(from time.Duration) Options {
	start := time.Now().Add(from)
	return Options{NotBefore: start, NotAfter: start.Add(24 * time.Hour)}
}

// Issue makes a certificate signed by the CA.
func (ca *CA) Issue(t testing.TB, o Options) *Leaf {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if o.NotBefore.IsZero() {
		o.NotBefore = time.Now().Add(-time.Hour)
	}
	if o.NotAfter.IsZero() {
		o.NotAfter = time.Now().Add(24 * time.Hour)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(ca.serial.Add(1)),
		Subject:      pkix.Name{CommonName: o.CommonName},
		NotBefore:    o.NotBefore,
		NotAfter:     o.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		DNSNames:     o.DNSNames,
	}
	if o.Client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		if len(tmpl.DNSNames) == 0 {
			tmpl.DNSNames = []string{"localhost"}
		}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")}
	}
	for _, u := range o.URIs {
		pu, err := parseURI(u)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, pu)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return &Leaf{
		Cert:    cert,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}),
	}
}

// WriteAtomic writes data to path by a rename from a file beside it, as
// a deployment tool replaces a certificate.
func WriteAtomic(t testing.TB, path string, data []byte) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func parseURI(s string) (*url.URL, error) { return url.Parse(s) }

// Write writes the leaf's certificate and key as dir/name.crt and
// dir/name.key and returns their paths.
func (l *Leaf) Write(t testing.TB, dir, name string) (certFile, keyFile string) {
	t.Helper()
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	WriteAtomic(t, certFile, l.CertPEM)
	WriteAtomic(t, keyFile, l.KeyPEM)
	return certFile, keyFile
}
