package ratelimit

import (
	"math"
	"net/http"
	"strconv"
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
	pol, state, _ := d.Members(policy, Limit{}, "", make([]byte, 0, 64))
	h.Add(HeaderRateLimitPolicy, pol)
	h.Add(HeaderRateLimit, string(state))

	if !d.Allowed {
		t := d.resetSeconds()
		if old, err := strconv.ParseInt(h.Get(HeaderRetryAfter), 10, 64); err == nil && old > t {
			return
		}
		h.Set(HeaderRetryAfter, strconv.FormatInt(t, 10))
	}
}

// Members renders the two members that SetHeaders adds for d under
// policy: the RateLimit-Policy member, which is madeValue when the caller
// made it with PolicyValue for the limit made and that is d's limit, else
// made here; and the RateLimit member, appended to dst (without allocating
// when dst has room). ok is false for an unlimited decision, which is not
// advertised. It is the one renderer of both fields: SetHeaders uses it,
// and so does a caller that keeps the values in storage of its own.
func (d Decision) Members(policy string, made Limit, madeValue string, dst []byte) (pol string, state []byte, ok bool) {
	if d.Limit.Rate <= 0 {
		return "", dst, false
	}
	pol = madeValue
	if madeValue == "" || d.Limit != made {
		pol = d.PolicyValue(policy)
	}
	return pol, d.AppendRateLimit(dst, policy), true
}

// PolicyValue returns the member of the RateLimit-Policy field that
// SetHeaders adds for d: "<policy>";q=<burst>;w=<window>. It depends on
// d.Limit and policy alone, so a caller may compute it once per limit.
// It is empty for an unlimited decision.
func (d Decision) PolicyValue(policy string) string {
	if d.Limit.Rate <= 0 {
		return ""
	}
	window := ceilFloat(float64(d.Limit.Burst)/d.Limit.Rate - 1e-9)
	if window < 1 {
		window = 1
	}
	b := appendSFString(make([]byte, 0, 64), policy)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, clampSF(int64(d.Limit.Burst)), 10)
	b = append(b, ";w="...)
	b = strconv.AppendInt(b, clampSF(window), 10)
	return string(b)
}

// AppendRateLimit appends to dst the member of the RateLimit field that
// SetHeaders adds for d, "<policy>";r=<remaining>;t=<seconds>, without
// allocating when dst has room. It appends nothing for an unlimited
// decision.
func (d Decision) AppendRateLimit(dst []byte, policy string) []byte {
	if d.Limit.Rate <= 0 {
		return dst
	}
	dst = appendSFString(dst, policy)
	dst = append(dst, ";r="...)
	dst = strconv.AppendInt(dst, clampSF(int64(max(d.Remaining, 0))), 10)
	dst = append(dst, ";t="...)
	return strconv.AppendInt(dst, clampSF(d.resetSeconds()), 10)
}

// resetSeconds is t of the RateLimit field: the seconds until the bucket
// is full again when d was allowed, else Retry-After (at least 1).
func (d Decision) resetSeconds() int64 {
	if d.Allowed {
		return ceilSeconds(d.Reset)
	}
	return max(ceilSeconds(d.RetryAfter), 1)
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

// appendSFString appends s as a structured-field String (RFC 9651
// section 3.3.3): quoted, '"' and '\\' escaped, characters outside
// printable ASCII replaced by '?'.
func appendSFString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c < 0x20 || c > 0x7e:
			dst = append(dst, '?')
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}
