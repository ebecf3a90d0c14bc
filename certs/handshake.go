package certs

import "strings"

// The reasons of a failed handshake, the label of
// streamgate_tls_handshake_errors_total: a fixed set, derived from the
// error, never an address nor the error's text.
const (
	ReasonPlainHTTP          = "plain_http"          // a plain HTTP request sent to the TLS port
	ReasonBadClientHello     = "bad_client_hello"    // not TLS, or a malformed or oversized handshake message
	ReasonUnsupportedVersion = "unsupported_version" // the client offered only versions below TLS 1.2
	ReasonNoSharedCipher     = "no_shared_cipher"    // no cipher suite (or curve) in common
	ReasonNoSharedProtocol   = "no_shared_protocol"  // ALPN: none of the client's protocols is served
	ReasonBadCertificate     = "bad_certificate"     // the client's certificate missing (require) or not verified
	ReasonClientAlert        = "client_alert"        // the client ended the handshake with an alert: most often it does not trust the certificate served
	ReasonEOF                = "eof"                 // the client closed (or reset) the connection mid-handshake
	ReasonTimeout            = "timeout"             // the handshake did not end within server.read_header_timeout
	ReasonOther              = "other"
)

// HandshakeReasons are every reason HandshakeReason returns.
var HandshakeReasons = []string{
	ReasonPlainHTTP, ReasonBadClientHello, ReasonUnsupportedVersion, ReasonNoSharedCipher, ReasonNoSharedProtocol,
	ReasonBadCertificate, ReasonClientAlert, ReasonEOF, ReasonTimeout, ReasonOther,
}

// handshakeTexts map what a failed handshake's error says to its reason,
// first match wins. The error is only ever seen as text: net/http
// handshakes each connection itself and logs the error it got, formatted,
// to the server's ErrorLog; no tls.Config hook sees a handshake that
// fails before it is called (a record that is not TLS, a ClientHello that
// does not parse) or after (a client's alert). These are crypto/tls's and
// net/http's own messages.
var handshakeTexts = []struct{ text, reason string }{
	{"client sent an HTTP request to an HTTPS server", ReasonPlainHTTP},
	{"i/o timeout", ReasonTimeout},
	{"deadline exceeded", ReasonTimeout},
	{"remote error: tls: ", ReasonClientAlert},
	{"offered only unsupported versions", ReasonUnsupportedVersion},
	{"unsupported versions", ReasonUnsupportedVersion},
	{"supported by both client and server", ReasonNoSharedCipher}, // no cipher suite, no ECDHE curve
	{"unsupported application protocols", ReasonNoSharedProtocol},
	{"client didn't provide a certificate", ReasonBadCertificate},
	{"failed to verify certificate", ReasonBadCertificate},
	{"failed to parse client certificate", ReasonBadCertificate},
	{"client certificate", ReasonBadCertificate},
	{"first record does not look like a TLS handshake", ReasonBadClientHello},
	{"SSLv2 handshake", ReasonBadClientHello},
	{"handshake message of length", ReasonBadClientHello},
	{"oversized record", ReasonBadClientHello},
	{"record overflow", ReasonBadClientHello},
	{"error decoding message", ReasonBadClientHello},
	{"unexpected message", ReasonBadClientHello},
	{"illegal parameter", ReasonBadClientHello},
	{"received record with version", ReasonBadClientHello},
	{"connection reset by peer", ReasonEOF},
	{"broken pipe", ReasonEOF},
	{"use of closed network connection", ReasonEOF},
}

// HandshakeReason classifies the text of a failed handshake's error (as
// net/http logs it after "http: TLS handshake error from ADDR: ").
func HandshakeReason(text string) string {
	if text == "EOF" || text == "unexpected EOF" || strings.HasSuffix(text, ": EOF") {
		return ReasonEOF
	}
	for _, h := range handshakeTexts {
		if strings.Contains(text, h.text) {
			return h.reason
		}
	}
	return ReasonOther
}
