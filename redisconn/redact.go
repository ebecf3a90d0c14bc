package redisconn

import (
	"net/url"
	"strings"
)

// Redact returns an address as a configuration gives it (a redis://,
// rediss:// or unix:// URL, or HOST:PORT) with any password it holds
// replaced, for an error or a log line. It is the one redaction of a
// Redis address: check's messages, the client's errors and its log lines
// all print an address through it, whatever field it came from.
func Redact(addr string) string {
	if u, err := url.Parse(addr); err == nil && u.User != nil {
		if _, ok := u.User.Password(); ok {
			return u.Redacted()
		}
		return addr
	}
	// Not a URL (an unescaped character, or no scheme): what comes before
	// the last '@' of the authority is a user and password.
	rest, scheme := addr, ""
	if i := strings.Index(addr, "://"); i >= 0 {
		scheme, rest = addr[:i+3], addr[i+3:]
	}
	if end := strings.IndexAny(rest, "/?#"); end >= 0 {
		if at := strings.LastIndex(rest[:end], "@"); at >= 0 {
			return scheme + "xxxxx" + rest[at:]
		}
		return addr
	}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		return scheme + "xxxxx" + rest[at:]
	}
	return addr
}
