package redisconn

import (
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"redis://:pw@h:1":          "redis://:xxxxx@h:1",
		"rediss://user:pw@h:1/2":   "rediss://user:xxxxx@h:1/2",
		"redis://user@h:1":         "redis://user@h:1",
		"user:pw@h:1":              "xxxxx@h:1",
		"pw@h:1":                   "xxxxx@h:1",
		"redis://:p w@h:1/0?x=@":   "redis://xxxxx@h:1/0?x=@",
		"redis://:p%zz@h:1":        "redis://xxxxx@h:1",
		"h:1":                      "h:1",
		"[::1]:6379":               "[::1]:6379",
		"unix:///run/redis.sock":   "unix:///run/redis.sock",
		"unix://:pw@/run/r.sock":   "unix://:xxxxx@/run/r.sock",
		"redis://h:1/0?client=a@b": "redis://h:1/0?client=a@b",
	} {
		assert.Equal(t, want, Redact(in), "Redact(%q)", in)
	}
}

// TestNewRedactsTheURL: a URL the client cannot parse is named in the
// error without its password (url.Parse's own error quotes it whole).
func TestNewRedactsTheURL(t *testing.T) {
	_, err := NewURL("redis://:Hunter2%zz@h:1", "", Options{})
	if assert.Error(t, err) {
		assert.NotContains(t, err.Error(), "Hunter2")
		assert.Contains(t, err.Error(), "xxxxx@h:1")
	}
}

// FuzzRedact: whatever the address, Redact leaves no password that a URL
// parser would find, and nothing before an '@' of the authority.
func FuzzRedact(f *testing.F) {
	for _, s := range []string{"redis://:pw@h:1", "user:pw@h:1", "redis://:p w@h:1/0", "h:1", "unix://:pw@/s", "a@b@c:1", "://@"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r := Redact(s)
		if u, err := url.Parse(r); err == nil && u.User != nil {
			if pw, ok := u.User.Password(); ok && pw != "xxxxx" {
				t.Fatalf("Redact(%q) = %q keeps password %q", s, r, pw)
			}
		}
		rest := r
		if i := strings.Index(rest, "://"); i >= 0 {
			rest = rest[i+3:]
		}
		if end := strings.IndexAny(rest, "/?#"); end >= 0 {
			rest = rest[:end]
		}
		if at := strings.LastIndex(rest, "@"); at >= 0 && !strings.HasSuffix(rest[:at], "xxxxx") && rest[:at] != "" {
			if u, err := url.Parse(s); !(err == nil && u.User != nil) {
				t.Fatalf("Redact(%q) = %q keeps a user part", s, r)
			}
		}
	})
}
