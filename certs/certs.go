// Package certs gives a listener a TLS configuration whose certificate,
// key and client CA are re-read from their files while it serves: on a
// change of the files (an atomic rename of each, or the "..data" symlink
// swap of a mounted Kubernetes Secret) and on Reload. New handshakes use
// the new files; connections already open keep theirs. A new set that does
// not load (a file missing or malformed, a key that does not match its
// certificate yet because the two files are renamed one after the other)
// is refused, logged and counted, and the set in force stays; so is a
// certificate outside its validity period (expired, or not valid yet: the
// Source then loads the files again when it becomes valid).
//
// TLS 1.2 is limited to ECDHE key exchange with AEAD ciphers (Mozilla's
// "intermediate" profile, less the finite-field DHE suites Go does not
// implement); TLS 1.3's suites are all AEAD and are Go's.
package certs

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// ClientAuth is what a listener asks of its clients' certificates.
type ClientAuth string

// The client certificate policies.
const (
	// ClientAuthNone asks for no client certificate (the default).
	ClientAuthNone ClientAuth = "none"
	// ClientAuthVerifyIfGiven verifies a certificate the client offers
	// against the client CA; a client without one is served too.
	ClientAuthVerifyIfGiven ClientAuth = "verify_if_given"
	// ClientAuthRequire refuses at the handshake a client without a
	// certificate the client CA verifies.
	ClientAuthRequire ClientAuth = "require"
)

// Valid reports whether a is a known policy ("" counts as none).
func (a ClientAuth) Valid() bool {
	switch a {
	case "", ClientAuthNone, ClientAuthVerifyIfGiven, ClientAuthRequire:
		return true
	}
	return false
}

func (a ClientAuth) tlsType() tls.ClientAuthType {
	switch a {
	case ClientAuthVerifyIfGiven:
		return tls.VerifyClientCertIfGiven
	case ClientAuthRequire:
		return tls.RequireAndVerifyClientCert
	}
	return tls.NoClientCert
}

// Files names a listener's PEM files and its client certificate policy.
// Paths are used as given (the configuration resolves relative ones).
type Files struct {
	Cert       string     // the certificate chain, leaf first
	Key        string     // the leaf's private key
	ClientCA   string     // CA certificates that verify clients; "" for none
	ClientAuth ClientAuth // "" means none
}

// Set is one loaded set of files: what a handshake uses.
type Set struct {
	Cert     tls.Certificate // Leaf set
	ClientCA *x509.CertPool  // nil without a client CA file
	NotAfter time.Time       // the leaf's expiry
	digest   [32]byte        // of the files' bytes, to skip reloads that change nothing
}

// Load reads and checks the files: the certificate and key parse and
// match, every certificate of the chain is valid now (a *ValidityError
// otherwise), and the client CA file, when named, holds at least one
// certificate. Errors name the file, never its contents.
func Load(f Files) (*Set, error) { return load(f, time.Now()) }

// ValidityError is a certificate of the chain loaded outside its validity
// period: expired, or not valid yet. Clients refuse such a certificate
// (or, worse, are told to ignore what they are shown), so it is never put
// in force.
type ValidityError struct {
	File      string    // the certificate file
	Subject   string    // the certificate's subject (the leaf's or an intermediate's)
	Leaf      bool      // the leaf, not an intermediate of the chain
	NotBefore time.Time // its validity period
	NotAfter  time.Time
	At        time.Time // when it was loaded
}

// NotYetValid reports whether the certificate only becomes valid later.
func (e *ValidityError) NotYetValid() bool { return e.At.Before(e.NotBefore) }

func (e *ValidityError) Error() string {
	what := "the certificate"
	if !e.Leaf {
		what = "the chain's intermediate certificate"
	}
	if e.Subject != "" {
		what += fmt.Sprintf(" (%s)", e.Subject)
	}
	if e.NotYetValid() {
		return fmt.Sprintf("certs: %s: %s is not valid before %s (now %s): check the issuer's and this host's clocks",
			e.File, what, e.NotBefore.UTC().Format(time.RFC3339), e.At.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("certs: %s: %s expired on %s: renew it",
		e.File, what, e.NotAfter.UTC().Format(time.RFC3339))
}

// checkValidity returns a *ValidityError for the first certificate of the
// chain that is not valid at now.
func checkValidity(file string, cert *tls.Certificate, now time.Time) error {
	for i, der := range cert.Certificate {
		c := cert.Leaf
		if i > 0 {
			var err error
			if c, err = x509.ParseCertificate(der); err != nil {
				return fmt.Errorf("certs: %s: certificate %d of the chain: %w", file, i+1, err)
			}
		}
		if now.Before(c.NotBefore) || now.After(c.NotAfter) {
			return &ValidityError{File: file, Subject: c.Subject.String(), Leaf: i == 0,
				NotBefore: c.NotBefore, NotAfter: c.NotAfter, At: now}
		}
	}
	return nil
}

func load(f Files, now time.Time) (*Set, error) {
	if f.Cert == "" || f.Key == "" {
		return nil, errors.New("certs: cert_file and key_file are both required")
	}
	certPEM, err := os.ReadFile(f.Cert)
	if err != nil {
		return nil, fmt.Errorf("certs: certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(f.Key)
	if err != nil {
		return nil, fmt.Errorf("certs: key: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("certs: %s and %s: %w", f.Cert, f.Key, scrub(err))
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("certs: %s: %w", f.Cert, err)
		}
	}
	if err := checkValidity(f.Cert, &cert, now); err != nil {
		return nil, err
	}
	h := sha256.New()
	h.Write(certPEM)
	h.Write([]byte{0})
	h.Write(keyPEM)
	s := &Set{Cert: cert, NotAfter: cert.Leaf.NotAfter}
	if f.ClientCA != "" {
		caPEM, err := os.ReadFile(f.ClientCA)
		if err != nil {
			return nil, fmt.Errorf("certs: client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caPEM) {
			return nil, fmt.Errorf("certs: %s holds no PEM certificate", f.ClientCA)
		}
		s.ClientCA = pool
		h.Write([]byte{0})
		h.Write(caPEM)
	}
	h.Write([]byte(f.ClientAuth))
	copy(s.digest[:], h.Sum(nil))
	return s, nil
}

// scrub keeps an error of crypto/tls from quoting key material: the
// standard library's messages name what is wrong, but a PEM block of the
// wrong type may be echoed by future versions; only the message's first
// line is kept, bounded.
func scrub(err error) error {
	msg := err.Error()
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	if len(msg) > 200 {
		msg = msg[:200]
	}
	return errors.New(msg)
}

// Options are a Source's optional dependencies.
type Options struct {
	// Name labels the listener in logs and metrics ("mainnet", "admin").
	Name string
	// Logger receives a line per reload; nil logs nothing.
	Logger *zap.Logger
	// Metrics counts reloads and shows the certificate's expiry; nil
	// counts nothing.
	Metrics *Metrics
}

// Source is a listener's TLS configuration, reloadable. It is safe for
// concurrent use.
type Source struct {
	name    string
	log     *zap.Logger
	metrics *Metrics

	mu    sync.Mutex // serialises reloads and file changes
	files Files
	cur   atomic.Pointer[served]

	watch *watcher    // nil until Watch
	retry *time.Timer // reloads when a refused certificate becomes valid; guarded by mu
}

// served is the configuration handshakes get while a Set is in force.
type served struct {
	set *Set
	cfg *tls.Config
}

// New loads the files and returns their Source; an error when they do
// not load.
func New(f Files, opts Options) (*Source, error) {
	if !f.ClientAuth.Valid() {
		return nil, fmt.Errorf("certs: client_auth %q: want none, verify_if_given or require", f.ClientAuth)
	}
	if f.ClientAuth.tlsType() != tls.NoClientCert && f.ClientCA == "" {
		return nil, fmt.Errorf("certs: client_auth %s needs client_ca_file", f.ClientAuth)
	}
	set, err := Load(f)
	if err != nil {
		return nil, err
	}
	s := &Source{name: opts.Name, log: opts.Logger, metrics: opts.Metrics, files: f}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	s.use(set)
	return s, nil
}

// CipherSuites are the TLS 1.2 suites served: ECDHE key exchange (forward
// secrecy) with an AEAD cipher, Mozilla's "intermediate" profile. Go's
// defaults also accept CBC suites with SHA-1 (and SHA-256) MACs, which
// that profile leaves out; every client that speaks TLS 1.2 with an
// ECDHE-GCM or ChaCha20 suite (every browser and HTTP library of the last
// ten years) is served. TLS 1.3 ignores this list: its suites are all
// AEAD.
var CipherSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// TLSConfig returns the configuration to serve with: TLS 1.2 (with
// CipherSuites) and 1.3, HTTP/2 and HTTP/1.1 offered by ALPN (WebSocket
// clients ask for HTTP/1.1), and for every handshake the set of files in
// force at its start.
func (s *Source) TLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		CipherSuites: CipherSuites,
		NextProtos:   []string{"h2", "http/1.1"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return s.cur.Load().cfg, nil
		},
	}
}

// Current returns the set of files in force.
func (s *Source) Current() *Set { return s.cur.Load().set }

func (s *Source) use(set *Set) {
	f := s.files
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		CipherSuites: CipherSuites,
		NextProtos:   []string{"h2", "http/1.1"},
		Certificates: []tls.Certificate{set.Cert},
		ClientAuth:   f.ClientAuth.tlsType(),
		ClientCAs:    set.ClientCA,
	}
	s.cur.Store(&served{set: set, cfg: cfg})
	s.metrics.expiry(s.name, set.NotAfter)
}

// Results of a reload, the label of streamgate_tls_reloads_total.
const (
	ResultLoaded    = "loaded"    // a new set is in force
	ResultUnchanged = "unchanged" // the files hold what is in force
	ResultRefused   = "refused"   // the new files did not load; the old set stays
)

// Reload reads the files again and puts them in force when they load and
// differ from the set in force. It returns the result and, when refused,
// why; the set in force then stays.
func (s *Source) Reload() (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reloadLocked()
}

// SetFiles changes the files (a configuration reload) and loads them as
// Reload does; refused, the old files and set stay.
func (s *Source) SetFiles(f Files) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f == s.files {
		return s.reloadLocked()
	}
	if !f.ClientAuth.Valid() || (f.ClientAuth.tlsType() != tls.NoClientCert && f.ClientCA == "") {
		err := fmt.Errorf("certs: client_auth %q with client_ca_file %q", f.ClientAuth, f.ClientCA)
		s.refused(err)
		return ResultRefused, err
	}
	old := s.files
	s.files = f
	res, err := s.reloadLocked()
	if err != nil {
		// The old files stay; a retry would read them, not the new ones:
		// the next configuration reload (or SIGHUP) tries these again.
		if s.retry != nil {
			s.retry.Stop()
			s.retry = nil
		}
		s.files = old
		return res, err
	}
	if res == ResultUnchanged { // same bytes, other policy or paths
		s.use(s.cur.Load().set)
	}
	s.retarget()
	return res, nil
}

func (s *Source) reloadLocked() (string, error) {
	if s.retry != nil {
		s.retry.Stop()
		s.retry = nil
	}
	set, err := Load(s.files)
	if err != nil {
		// A certificate that is not valid yet (issued a moment ago by a
		// clock ahead of this host's) is tried again once it is: no
		// change of the files will come to wake the watch.
		var ve *ValidityError
		if errors.As(err, &ve) && ve.NotYetValid() {
			at := ve.NotBefore.Add(time.Second)
			s.retry = time.AfterFunc(time.Until(at), func() { _, _ = s.Reload() })
			s.refused(err, zap.Time("retry_at", at))
			return ResultRefused, err
		}
		s.refused(err)
		return ResultRefused, err
	}
	if set.digest == s.cur.Load().set.digest {
		return ResultUnchanged, nil
	}
	s.use(set)
	s.metrics.reload(s.name, ResultLoaded)
	s.log.Info("TLS certificate loaded", zap.String("listener", s.name),
		zap.String("subject", set.Cert.Leaf.Subject.String()),
		zap.Time("not_after", set.NotAfter))
	return ResultLoaded, nil
}

func (s *Source) refused(err error, fields ...zap.Field) {
	s.metrics.reload(s.name, ResultRefused)
	s.log.Warn("TLS certificate refused; the one in force stays", append([]zap.Field{zap.String("listener", s.name),
		zap.Time("in_force_until", s.cur.Load().set.NotAfter), zap.Error(err)}, fields...)...)
}

// ExpiresWithin reports whether the certificate in force expires before
// now+d.
func (s *Set) ExpiresWithin(now time.Time, d time.Duration) bool {
	return s.NotAfter.Before(now.Add(d))
}
