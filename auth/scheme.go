// Package auth implements the Data Streams HMAC request-signing scheme, the
// key store of streamgate's clients, and the checks made on every request:
// signature, timestamp skew, replay and entitlement.
//
// The scheme is one implementation used in both directions: the gateway
// verifies its clients with Verify and signs its own upstream calls with Sign.
package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash"
	"net/http"
	"strconv"
	"sync"
	"time"

	"streamgate/internal/hexbytes"
)

// The headers of the scheme.
const (
	HeaderAuthorization = "Authorization"
	HeaderTimestamp     = "X-Authorization-Timestamp"
	HeaderSignature     = "X-Authorization-Signature-SHA256"
)

// EmptyBodyHash is the lowercase hex SHA-256 of an empty body, the body hash
// of every GET request.
const EmptyBodyHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// Sentinel errors of the header checks. Missing and malformed headers are a
// client error (HTTP 400); the rest are authentication failures (HTTP 401).
var (
	ErrMissingHeaders   = errors.New("auth: missing authentication headers")
	ErrMalformedHeaders = errors.New("auth: malformed authentication headers")
)

// Credentials are the three authentication headers of a request, parsed.
type Credentials struct {
	KeyID     string
	Timestamp int64  // Unix milliseconds, as sent
	Signature []byte // decoded HMAC
	rawTS     string // the timestamp exactly as sent; it is part of the signed string
	sig       [sha256.Size]byte
}

// BodyHash returns the lowercase hex SHA-256 of body.
func BodyHash(body []byte) string {
	if len(body) == 0 {
		return EmptyBodyHash
	}
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:])
}

// Signature returns the raw HMAC-SHA256, keyed with secret, of the signed
// string "METHOD pathWithQuery bodyHash apiKey timestamp".
func Signature(secret []byte, method, pathWithQuery, bodyHash, apiKey, timestamp string) []byte {
	out, _ := sum(hmac.New(sha256.New, secret), nil, nil, method, pathWithQuery, bodyHash, apiKey, timestamp)
	return out
}

// sum writes the signed string, built in buf, to the keyed, reset mac and
// appends its sum to dst. It returns the sum and buf, for reuse.
func sum(mac hash.Hash, dst, buf []byte, method, pathWithQuery, bodyHash, apiKey, timestamp string) ([]byte, []byte) {
	buf = buf[:0]
	buf = append(buf, method...)
	buf = append(buf, ' ')
	buf = append(buf, pathWithQuery...)
	buf = append(buf, ' ')
	buf = append(buf, bodyHash...)
	buf = append(buf, ' ')
	buf = append(buf, apiKey...)
	buf = append(buf, ' ')
	buf = append(buf, timestamp...)
	mac.Write(buf)
	return mac.Sum(dst), buf
}

// macPool keeps HMAC states keyed with one secret, so that verifying does
// not key SHA-256 afresh for every request. Safe for concurrent use.
type macPool struct{ pool sync.Pool }

// pooledMAC is an HMAC state, a buffer for the signed string and one for
// the sum.
type pooledMAC struct {
	mac hash.Hash
	buf []byte
	out [sha256.Size]byte
}

func newMACPool(secret []byte) *macPool {
	key := append([]byte(nil), secret...)
	return &macPool{pool: sync.Pool{New: func() any {
		return &pooledMAC{mac: hmac.New(sha256.New, key), buf: make([]byte, 0, 256)}
	}}}
}

// valid reports, in constant time, whether c carries the signature of method
// and requestURI under the pool's secret.
func (p *macPool) valid(c *Credentials, method, requestURI, bodyHash string) bool {
	m := p.pool.Get().(*pooledMAC)
	m.mac.Reset()
	var want []byte
	want, m.buf = sum(m.mac, m.out[:0], m.buf, method, requestURI, bodyHash, c.KeyID, c.rawTS)
	ok := hmac.Equal(want, c.Signature)
	p.pool.Put(m)
	return ok
}

// SignatureHex is Signature in lowercase hex, as sent on the wire.
func SignatureHex(secret []byte, method, pathWithQuery, bodyHash, apiKey, timestamp string) string {
	return hex.EncodeToString(Signature(secret, method, pathWithQuery, bodyHash, apiKey, timestamp))
}

// Sign sets the three authentication headers on req for apiKey and secret at
// time now. It signs req.URL.RequestURI(), the request target that will be
// sent on the wire, and an empty body (every endpoint of the API is a GET).
// Any previous authentication headers are replaced.
func Sign(req *http.Request, apiKey string, secret []byte, now time.Time) {
	ts := strconv.FormatInt(now.UnixMilli(), 10)
	sig := SignatureHex(secret, req.Method, req.URL.RequestURI(), EmptyBodyHash, apiKey, ts)
	req.Header.Set(HeaderAuthorization, apiKey)
	req.Header.Set(HeaderTimestamp, ts)
	req.Header.Set(HeaderSignature, sig)
}

// HasCredentials reports whether any of the authentication headers is present.
func HasCredentials(h http.Header) bool {
	return h.Get(HeaderAuthorization) != "" || h.Get(HeaderTimestamp) != "" || h.Get(HeaderSignature) != ""
}

// The headers in canonical form, to read an http.Header without
// canonicalising (and allocating) on every request.
var (
	canonAuthorization = http.CanonicalHeaderKey(HeaderAuthorization)
	canonTimestamp     = http.CanonicalHeaderKey(HeaderTimestamp)
	canonSignature     = http.CanonicalHeaderKey(HeaderSignature)
)

func first(h http.Header, canonicalKey string) string {
	if v := h[canonicalKey]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// ParseCredentials reads the authentication headers. It returns
// ErrMissingHeaders when any is absent and ErrMalformedHeaders when the
// timestamp is not a decimal integer or the signature is not 64 hex digits.
func ParseCredentials(h http.Header) (Credentials, error) {
	var c Credentials
	if err := parseCredentials(h, &c); err != nil {
		return Credentials{}, err
	}
	c.Signature = c.sig[:]
	return c, nil
}

// parseCredentials is ParseCredentials into c, without allocating; it
// leaves c.Signature unset.
func parseCredentials(h http.Header, c *Credentials) error {
	key, ts, sig := first(h, canonAuthorization), first(h, canonTimestamp), first(h, canonSignature)
	if key == "" || ts == "" || sig == "" {
		return ErrMissingHeaders
	}
	if len(key) > 128 || len(ts) > 20 {
		return ErrMalformedHeaders
	}
	millis, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || millis < 0 {
		return ErrMalformedHeaders
	}
	if len(sig) != 2*sha256.Size || !hexbytes.Decode(c.sig[:], sig) {
		return ErrMalformedHeaders
	}
	c.KeyID, c.Timestamp, c.rawTS = key, millis, ts
	return nil
}

// Valid reports, in constant time, whether c carries the signature of method
// and requestURI (the raw request target as received) under secret.
func (c Credentials) Valid(secret []byte, method, requestURI, bodyHash string) bool {
	want := Signature(secret, method, requestURI, bodyHash, c.KeyID, c.rawTS)
	return hmac.Equal(want, c.Signature)
}

// Time returns the timestamp of c.
func (c Credentials) Time() time.Time { return time.UnixMilli(c.Timestamp) }
