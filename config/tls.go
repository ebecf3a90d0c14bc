package config

import (
	"path/filepath"

	"streamgate/auth"
	"streamgate/certs"
)

// TLS is a listener's TLS: its certificate and key, and optionally the CA
// that verifies its clients' certificates and what is asked of clients.
// The files are read at load (so that `check` finds a problem before a
// start does) and again by the running gateway whenever they change on
// disk (an atomic rename, or a mounted Secret's swap) or on SIGHUP: new
// handshakes use the new files, open connections keep theirs. Paths
// relative to the configuration file's directory.
type TLS struct {
	// CertFile is the PEM certificate chain, leaf first. Required.
	CertFile string `yaml:"cert_file" json:"cert_file"`
	// KeyFile is the leaf's PEM private key. Required.
	KeyFile string `yaml:"key_file" json:"key_file"`
	// ClientCAFile holds the PEM CA certificates that verify client
	// certificates. Required when ClientAuth is not none.
	ClientCAFile string `yaml:"client_ca_file" json:"client_ca_file"`
	// ClientAuth is none (the default: no client certificate asked),
	// verify_if_given (a certificate offered must verify; clients without
	// one are served) or require (refused at the handshake without one).
	ClientAuth certs.ClientAuth `yaml:"client_auth" json:"client_auth"`

	loaded *certs.Set // the files as read at load, nil when they did not load
	err    error      // why they did not
}

// Files returns what the listener's certs.Source reads.
func (t *TLS) Files() certs.Files {
	return certs.Files{Cert: t.CertFile, Key: t.KeyFile, ClientCA: t.ClientCAFile, ClientAuth: t.ClientAuth}
}

// Loaded returns the files as read at load: the certificate's expiry for
// `check`'s warning. Nil when they did not load (Validate says why).
func (t *TLS) Loaded() *certs.Set { return t.loaded }

// asksClientCerts reports whether the listener verifies client
// certificates, which a key's ClientCert rule needs.
func (t *TLS) asksClientCerts() bool {
	return t != nil && (t.ClientAuth == certs.ClientAuthVerifyIfGiven || t.ClientAuth == certs.ClientAuthRequire)
}

// ClientCert binds a key to a client certificate: a request signed with
// the key is refused (401) unless it comes over a TLS connection whose
// client presented a certificate the listener's client CA verified and
// that matches every field given here. At least one field is required.
type ClientCert struct {
	// SPKISHA256 is the SHA-256 of the certificate's public key
	// (SubjectPublicKeyInfo), 64 hex digits or base64: `openssl x509 -in
	// client.crt -pubkey -noout | openssl pkey -pubin -outform der |
	// openssl dgst -sha256`. Survives re-issuing with the same key.
	SPKISHA256 string `yaml:"spki_sha256" json:"spki_sha256"`
	// SAN is a subject alternative name the certificate must carry: a DNS
	// name, a URI (such as a SPIFFE ID) or an e-mail address, exactly.
	SAN string `yaml:"san" json:"san"`
}

// Rule returns the auth.CertRule of c; nil for a nil c. Validate has
// checked the pin.
func (c *ClientCert) Rule() *auth.CertRule {
	if c == nil {
		return nil
	}
	r := &auth.CertRule{SAN: c.SAN}
	if c.SPKISHA256 != "" {
		r.SPKISHA256, _ = auth.ParseSPKI(c.SPKISHA256)
	}
	return r
}

// loadTLS resolves the TLS blocks' relative paths against the
// configuration's directory and reads their files, recording the outcome
// for Validate. It is called with the secret files, the only reading of
// files a load does.
func (c *Config) loadTLS() {
	baseDir := ""
	if c.src != nil {
		baseDir = c.src.baseDir
	}
	load := func(t *TLS) {
		if t == nil || t.loaded != nil || t.err != nil {
			return
		}
		for _, p := range []*string{&t.CertFile, &t.KeyFile, &t.ClientCAFile} {
			if *p != "" && !filepath.IsAbs(*p) && baseDir != "" {
				*p = filepath.Join(baseDir, *p)
			}
		}
		if t.CertFile == "" || t.KeyFile == "" || !t.ClientAuth.Valid() {
			return // Validate names these
		}
		t.loaded, t.err = certs.Load(t.Files())
	}
	load(c.Server.AdminTLS)
	for _, n := range c.Networks {
		if n != nil {
			load(n.TLS)
		}
	}
}
