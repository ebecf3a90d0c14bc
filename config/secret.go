package config

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// Redacted is what a non-empty Secret prints as.
const Redacted = "REDACTED"

// Secret is a string that never shows itself: every way of printing,
// logging or marshalling it (fmt with any verb, JSON, YAML, text, slog, zap)
// gives REDACTED, or "" for an empty Secret, so that an unset secret is
// still visible as unset. Reveal returns the value for the code that signs
// or verifies with it.
//
// Caveats: fmt calls no methods on unexported fields, nor on anything it
// prints after a verb that does not suit a pointer (%s of a pointer in a
// map): it then prints the pointed-to value raw. The configuration types
// therefore keep every Secret in an exported field, and the pointer types
// that its maps hold (*Network, *Credentials) implement fmt.Formatter.
// Reflection that reads unexported data (deep-printing debug libraries)
// bypasses these methods altogether.
type Secret string

// Reveal returns the secret itself. Call it only where the value is used.
func (s Secret) Reveal() string { return string(s) }

func (s Secret) redacted() string {
	if s == "" {
		return ""
	}
	return Redacted
}

// String returns REDACTED, or "" for an empty Secret.
func (s Secret) String() string { return s.redacted() }

// GoString returns config.Secret("REDACTED") for %#v.
func (s Secret) GoString() string { return fmt.Sprintf("config.Secret(%q)", s.redacted()) }

// Format makes every fmt verb (%v, %+v, %#v, %s, %q, %x, %d, ...) print the
// redacted form.
func (s Secret) Format(f fmt.State, verb rune) {
	switch {
	case verb == 'v' && f.Flag('#'):
		_, _ = fmt.Fprint(f, s.GoString())
	case verb == 'q':
		_, _ = fmt.Fprintf(f, "%q", s.redacted())
	default:
		_, _ = fmt.Fprint(f, s.redacted())
	}
}

// MarshalJSON encodes the redacted form as a JSON string.
func (s Secret) MarshalJSON() ([]byte, error) { return json.Marshal(s.redacted()) }

// MarshalText returns the redacted form.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.redacted()), nil }

// MarshalYAML returns the redacted form. A configuration marshalled to YAML
// and read again therefore fails validation instead of running with
// "REDACTED" as a secret.
func (s Secret) MarshalYAML() (any, error) { return s.redacted(), nil }

// LogValue makes slog log the redacted form.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.redacted()) }

var (
	_ fmt.Stringer   = Secret("")
	_ fmt.GoStringer = Secret("")
	_ fmt.Formatter  = Secret("")
	_ json.Marshaler = Secret("")
	_ slog.LogValuer = Secret("")

	_ fmt.Formatter = (*Network)(nil)
	_ fmt.Formatter = (*Upstream)(nil)
	_ fmt.Formatter = (*Credentials)(nil)
)

// The configuration's maps hold *Network and *Credentials. fmt prints a
// pointer met inside a map or struct with a verb that does not suit
// pointers (%s, %q, %t, ...) as a "bad verb", printing the pointed-to value
// without calling any method, so a Secret in it would show. These Format
// methods print the value instead, with the same verb, through a copy of
// its type that has no methods, so that fmt walks the fields and each
// Secret redacts itself. *Upstream needs one too: it would otherwise get
// the method of its embedded Credentials.

type (
	plainNetwork     Network
	plainUpstream    Upstream
	plainCredentials Credentials
)

// Format prints the network with any verb, its secrets redacted.
func (n *Network) Format(f fmt.State, verb rune) {
	if n == nil {
		_, _ = io.WriteString(f, "<nil>")
		return
	}
	formatPointer(f, verb, "Network", plainNetwork(*n))
}

// Format prints the upstream with any verb, its secret redacted.
func (u *Upstream) Format(f fmt.State, verb rune) {
	if u == nil {
		_, _ = io.WriteString(f, "<nil>")
		return
	}
	formatPointer(f, verb, "Upstream", plainUpstream(*u))
}

// Format prints the credentials with any verb, the secret redacted.
func (c *Credentials) Format(f fmt.State, verb rune) {
	if c == nil {
		_, _ = io.WriteString(f, "<nil>")
		return
	}
	formatPointer(f, verb, "Credentials", plainCredentials(*c))
}

// formatPointer prints "&" and the plain value v with the directive of f;
// with %#v it restores the type's own name.
func formatPointer(f fmt.State, verb rune, name string, v any) {
	s := fmt.Sprintf(fmt.FormatString(f, verb), v)
	if verb == 'v' && f.Flag('#') {
		s = strings.Replace(s, "config.plain"+name, "config."+name, 1)
	}
	_, _ = io.WriteString(f, "&"+s)
}
