package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// ErrClientCert is the error of a request signed with a key bound to a
// client certificate over a connection that did not present it.
var ErrClientCert = errors.New("auth: this key must be used with its client certificate")

// CertRule binds a key to a client certificate: a request signed with the
// key is accepted only over a TLS connection whose client presented a
// certificate the listener verified and that matches every part of the
// rule given. So a leaked secret alone no longer calls as the key.
type CertRule struct {
	// SPKISHA256 is the SHA-256 of the certificate's SubjectPublicKeyInfo
	// (its public key), 32 bytes; nil when not part of the rule.
	SPKISHA256 []byte
	// SAN is a subject alternative name the certificate must carry,
	// compared exactly with its DNS names, URIs and e-mail addresses; ""
	// when not part of the rule.
	SAN string
}

// ParseSPKI reads a SubjectPublicKeyInfo pin: 64 hex digits, or the
// standard base64 of 32 bytes (as `openssl ... | base64` prints it).
func ParseSPKI(s string) ([]byte, error) {
	if b, err := hex.DecodeString(s); err == nil && len(b) == sha256.Size {
		return b, nil
	}
	if b, err := base64.StdEncoding.DecodeString(s); err == nil && len(b) == sha256.Size {
		return b, nil
	}
	return nil, fmt.Errorf("auth: spki_sha256 %q: want the SHA-256 of the public key as 64 hex digits or 44 base64 characters", s)
}

// Matches reports whether the connection's client presented a verified
// certificate that the rule accepts. A nil rule accepts every connection.
func (r *CertRule) Matches(cs *tls.ConnectionState) bool {
	if r == nil {
		return true
	}
	// VerifiedChains is set only when the listener verified the
	// certificate against its client CA: a certificate merely presented
	// proves nothing of its names.
	if cs == nil || len(cs.VerifiedChains) == 0 || len(cs.PeerCertificates) == 0 {
		return false
	}
	return r.matchCert(cs.PeerCertificates[0])
}

func (r *CertRule) matchCert(c *x509.Certificate) bool {
	if r.SPKISHA256 != nil {
		sum := sha256.Sum256(c.RawSubjectPublicKeyInfo)
		if subtle.ConstantTimeCompare(sum[:], r.SPKISHA256) != 1 {
			return false
		}
	}
	if r.SAN != "" && !hasSAN(c, r.SAN) {
		return false
	}
	return true
}

func hasSAN(c *x509.Certificate, san string) bool {
	for _, d := range c.DNSNames {
		if strings.EqualFold(d, san) {
			return true
		}
	}
	for _, e := range c.EmailAddresses {
		if e == san {
			return true
		}
	}
	for _, u := range c.URIs {
		if u.String() == san {
			return true
		}
	}
	return false
}
