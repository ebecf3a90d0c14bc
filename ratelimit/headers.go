package ratelimit

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Header field names written by SetHeaders.
const (
	HeaderRateLimitPolicy = "RateLimit-Policy"
	HeaderRateLimit       = "RateLimit"
	HeaderRetryAfter      = "Retry-After"
)

// maxSFInteger is the largest Integer of RFC 9651 structured fields.
const maxSFInteger = 999_999_999_999_999

// SetHeaders adds d to h as the fields of
// draft-ietf-httpapi-ratelimit-headers-10 (September 2025):
//
//	RateLimit-Policy: "<policy>";q=<burst>;w=<window>
//	RateLimit: "<policy>";r=<remaining>;t=<seconds>
//
// and, when d was refused, sets Retry-After to the whole seconds of
// RetryAfter, rounded up, at least 1 (keeping a larger value already set).
//
// The window w is the time in which the bucket refills from empty
// (Burst/Rate seconds, rounded up, at least 1); for a daily quota that is
// 86400. When the event was allowed, t is the seconds until the bucket is
// full again (Decision.Reset, rounded up). When it was refused, t equals
// Retry-After, because the draft says Retry-After SHOULD NOT point earlier
// than t, and the next token arrives well before the bucket is full.
//
// The fields are lists: SetHeaders adds one member to each, so calling it
// for the team rate and again for the daily quota advertises both. policy
// names the policy; it is written as a structured-field String, with
// characters outside printable ASCII replaced by '?'. An unlimited
// decision adds nothing. (Draft -11 of May 2026 keeps this syntax and
// calls t the "effective window".)
func (d Decision) SetHeaders(h http.Header, policy string) {
	if d.Limit.Rate <= 0 {
		return
	}
	name := sfString(policy)
	window := ceilFloat(float64(d.Limit.Burst)/d.Limit.Rate - 1e-9)
	if window < 1 {
		window = 1
	}
	t := ceilSeconds(d.Reset)
	if !d.Allowed {
		t = ceilSeconds(d.RetryAfter)
		if t < 1 {
			t = 1
		}
	}

	b := make([]byte, 0, 64)
	b = append(b, name...)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, clampSF(int64(d.Limit.Burst)), 10)
	b = append(b, ";w="...)
	b = strconv.AppendInt(b, clampSF(window), 10)
	h.Add(HeaderRateLimitPolicy, string(b))

	b = b[:0]
	b = append(b, name...)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, clampSF(int64(max(d.Remaining, 0))), 10)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, clampSF(t), 10)
	h.Add(HeaderRateLimit, string(b))

	if !d.Allowed {
		if old, err := strconv.ParseInt(h.Get(HeaderRetryAfter), 10, 64); err == nil && old > t {
			return
		}
		h.Set(HeaderRetryAfter, strconv.FormatInt(t, 10))
	}
}

// ceilSeconds returns d in whole seconds, rounded up; 0 for d <= 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

func ceilFloat(f float64) int64 {
	if f >= maxSFInteger {
		return maxSFInteger
	}
	return int64(math.Ceil(f))
}

func clampSF(n int64) int64 { return min(max(n, 0), maxSFInteger) }

// sfString returns s as a structured-field String (RFC 9651 section 3.3.3).
func sfString(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('?')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
