package proxy

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"streamgate/auth"
	"streamgate/internal/apierror"
	"streamgate/ratelimit"
)

// writeError writes err as the JSON error body of the API:
// {"error": "...", "message": "..."}: "error" is the catalog's field and
// "message" the field the TypeScript SDK shows.
func writeError(w http.ResponseWriter, err error) {
	var ua *upstreamAnswer
	if errors.As(err, &ua) {
		ua.write(w)
		return
	}
	status, msg, retry := statusOf(err)
	apierror.Write(w, status, msg, retry)
}

// statusOf maps an error to the status, message and Retry-After of its
// answer. It is the one place where errors become HTTP statuses.
func statusOf(err error) (status int, msg string, retryAfter time.Duration) {
	var (
		ae *apierror.Error
		be *ratelimit.BudgetError
		rf *auth.ReplayFullError
	)
	switch {
	case errors.As(err, &ae):
		return ae.Status, ae.Msg, ae.RetryAfter
	case errors.As(err, &be):
		return http.StatusServiceUnavailable, "upstream budget exhausted: too many upstream calls right now, retry after the time in Retry-After", max(be.RetryAfter, time.Second)
	case errors.As(err, &rf):
		return http.StatusServiceUnavailable, "the gateway's replay record is full: too many requests right now, retry after the time in Retry-After", max(rf.RetryAfter, time.Second)
	case errors.Is(err, ratelimit.ErrUnavailable):
		return http.StatusServiceUnavailable, "quota service unavailable, try again shortly", time.Second
	case errors.Is(err, auth.ErrMissingHeaders):
		return http.StatusBadRequest, "missing authentication headers: Authorization, X-Authorization-Timestamp and X-Authorization-Signature-SHA256 are required", 0
	case errors.Is(err, auth.ErrMalformedHeaders):
		return http.StatusBadRequest, "malformed authentication headers: the timestamp must be Unix milliseconds and the signature 64 hex digits", 0
	case errors.Is(err, auth.ErrUnknownKey), errors.Is(err, auth.ErrBadSignature):
		return http.StatusUnauthorized, "authentication failed: unknown key or signature mismatch", 0
	case errors.Is(err, auth.ErrSkew):
		return http.StatusUnauthorized, "authentication failed: timestamp outside the allowed clock skew", 0
	case errors.Is(err, auth.ErrClientCert):
		return http.StatusUnauthorized, "authentication failed: this key is bound to a client certificate; connect over TLS with that certificate", 0
	case errors.Is(err, auth.ErrReplay):
		return http.StatusUnauthorized, "authentication failed: this signature was already used; sign every request afresh", 0
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable, "upstream did not answer in time", time.Second
	case errors.Is(err, context.Canceled):
		return 499, "client closed the request", 0
	default:
		return http.StatusBadGateway, "upstream unavailable", time.Second
	}
}

// upstreamAnswer is an upstream answer that is neither a success nor
// cacheable. It travels as an error, so that it is never cached and reaches
// every waiter of its fill, and is passed on to the client unchanged, with
// its Retry-After.
type upstreamAnswer struct {
	status     int
	body       []byte
	retryAfter time.Duration
}

func (e *upstreamAnswer) Error() string { return "proxy: upstream answered " + strconv.Itoa(e.status) }

func passOn(resp *upstreamResponse) error {
	return &upstreamAnswer{status: resp.status, body: resp.body, retryAfter: resp.retryAfter}
}

// errUpstreamThrottled is the gateway's answer for an upstream 429: the
// upstream's budget is the gateway's business (it pauses and slows down,
// ratelimit/adapt.go), so a client never sees the upstream's 429 or its
// body, but a 503 of the gateway's with the pause as Retry-After.
const errUpstreamThrottled = "the upstream is slowing this gateway down (its rate budget): retry after the time in Retry-After"

func (e *upstreamAnswer) write(w http.ResponseWriter) {
	if e.status == http.StatusTooManyRequests {
		writeError(w, &apierror.Error{Status: http.StatusServiceUnavailable, Msg: errUpstreamThrottled, RetryAfter: max(e.retryAfter, time.Second)})
		return
	}
	retry := e.retryAfter
	if retry <= 0 && e.status >= 500 {
		retry = time.Second // a 5xx is worth a retry, but not at once
	}
	if retry > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int((retry+time.Second-1)/time.Second)))
	}
	w.Header().Set("Cache-Control", "no-store")
	writeRaw(w, e.status, e.body)
}

var (
	errNotFound    = apierror.New(http.StatusNotFound, "no such endpoint")
	errMethod      = apierror.New(http.StatusMethodNotAllowed, "method not allowed: see the Allow header")
	errBody        = apierror.New(http.StatusBadRequest, "request body not allowed: the API takes none")
	errBadTarget   = apierror.New(http.StatusBadRequest, "invalid request path: dot segments, empty segments, backslashes and encoded slashes or dots are refused")
	errForbidden   = apierror.New(http.StatusUnauthorized, "stream not found or not permitted for this key")
	errNetwork     = apierror.New(http.StatusUnauthorized, "this key may not use this network")
	errBadUpstream = apierror.New(http.StatusBadGateway, "upstream answered with an invalid response")
)
