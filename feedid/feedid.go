// Package feedid is the one grammar of stream IDs (feed IDs): "0x" and
// 64 hex digits, in any case, as the Data Streams API takes them. The
// canonical form, the one the gateway keys everything by (cache keys,
// hubs, entitlements), is lower-case. The configuration, the REST path and
// the real-time hub all read stream IDs here, so that what `check`
// accepts is what the gateway serves.
package feedid

import (
	"fmt"
	"strings"

	"streamgate/internal/hexbytes"
)

// Len is the length of a stream ID: "0x" and 64 hex digits.
const Len = 66

// ID is a stream ID in canonical form.
type ID string

// Parse reads a stream ID in any case and returns its canonical form.
func Parse(s string) (ID, error) {
	if !Valid(s) {
		return "", fmt.Errorf("feedid: %q is not a stream ID (0x and 64 hex digits)", s)
	}
	return ID(Canon(s)), nil
}

// Bytes returns the 32 bytes that s, a stream ID in any case, names; ok is
// false when s is not a stream ID.
func Bytes(s string) (b [32]byte, ok bool) {
	if !Valid(s) || !hexbytes.Decode(b[:], s[2:]) {
		return [32]byte{}, false
	}
	return b, true
}

// String returns the canonical form.
func (id ID) String() string { return string(id) }

// MarshalText returns the canonical form.
func (id ID) MarshalText() ([]byte, error) { return []byte(id), nil }

// UnmarshalText reads a stream ID in any case with Parse, so that an ID
// decoded from JSON, YAML or a flag is canonical, or refused.
func (id *ID) UnmarshalText(text []byte) error {
	p, err := Parse(string(text))
	if err != nil {
		return err
	}
	*id = p
	return nil
}

// ParseAll reads every item with Parse; the error is the first item's
// that is not a stream ID.
func ParseAll(items []string) ([]ID, error) {
	ids := make([]ID, len(items))
	for i, item := range items {
		id, err := Parse(item)
		if err != nil {
			return nil, err
		}
		ids[i] = id
	}
	return ids, nil
}

// Strings returns the canonical forms of ids, for the APIs that take
// text (a log field, a joined list).
func Strings(ids []ID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = string(id)
	}
	return out
}

// Valid reports whether s is a stream ID in any case: "0x" (or "0X") and
// 64 hex digits.
func Valid[T ~string | ~[]byte](s T) bool {
	if len(s) != Len || s[0] != '0' || (s[1] != 'x' && s[1] != 'X') {
		return false
	}
	for i := 2; i < len(s); i++ {
		if !isHex(s[i]) {
			return false
		}
	}
	return true
}

// Canonical reports whether s is a stream ID in canonical form: "0x" and
// 64 lower-case hex digits.
func Canonical[T ~string | ~[]byte](s T) bool {
	if len(s) != Len || s[0] != '0' || s[1] != 'x' {
		return false
	}
	for i := 2; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Canon returns s in lower case, without allocating when it already is:
// the canonical form of a valid stream ID.
func Canon(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; 'A' <= c && c <= 'Z' {
			return strings.ToLower(s)
		}
	}
	return s
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}
