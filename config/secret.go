package config

import (
	"encoding/json"
	"fmt"
	"log/slog"
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
// prints after a verb that does not suit a pointer (%s of a pointer inside
// a struct). The configuration types therefore keep every Secret in an
// exported field and hold no pointers: their maps have struct values.
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
)
