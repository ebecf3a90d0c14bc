package proxy

import (
	"context"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"streamgate/auth"
	"streamgate/internal/apierror"
)

type credKey struct{}

// passState is what one forwarded request carries through the reverse
// proxy: the credential it is signed with, its endpoint, and the timer that
// bounds it until the upstream's answer arrives.
type passState struct {
	cred     *credential
	endpoint string
	start    time.Time
	timer    *time.Timer
}

// reverseProxy forwards a request for a path the operator listed in
// networks.<name>.pass_through (GET or HEAD, matched, authenticated and
// admitted like any other) to the upstream, re-signed: the client's
// authentication headers are replaced by a signature of the outgoing
// request with the credential chosen for the caller. The gateway answers
// GET and HEAD / and the WebSocket endpoint itself (ws.go): neither is
// forwarded. An upgrade the upstream grants on a listed path (101) passes
// through, unbounded by the timeout from then on.
func (n *network) reverseProxy(base *url.URL, transport http.RoundTripper) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Transport: transport,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(base)
			pr.Out.Host = base.Host
			for _, h := range []string{auth.HeaderAuthorization, auth.HeaderTimestamp, auth.HeaderSignature, "Cookie"} {
				pr.Out.Header.Del(h)
			}
			if ps, ok := pr.In.Context().Value(credKey{}).(*passState); ok && ps.cred != nil {
				auth.Sign(pr.Out, ps.cred.key, ps.cred.secret, time.Now())
			}
		},
		ModifyResponse: func(resp *http.Response) error {
			ps := resp.Request.Context().Value(credKey{}).(*passState) // set by passThrough
			if resp.StatusCode == http.StatusSwitchingProtocols {
				ps.timer.Stop() // an upgraded connection lives on
			}
			n.metrics.upstreamCall(n.name, ps.endpoint, resp.StatusCode, time.Since(ps.start))
			n.up.answered.Store(true)
			if err := n.up.refusedCredential(ps.endpoint, ps.cred, resp.StatusCode); err != nil {
				resp.Body.Close()
				return err
			}
			resp.Header.Del("Set-Cookie")
			if resp.StatusCode == http.StatusTooManyRequests {
				n.up.throttled(budgetKey(ps.endpoint, ps.cred), parseRetryAfter(resp.Header.Get("Retry-After")))
			}
			if resp.StatusCode >= 500 && resp.Header.Get("Retry-After") == "" {
				resp.Header.Set("Retry-After", "1")
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if context.Cause(r.Context()) == errPassTimeout {
				err = errPassTimeout
				n.metrics.upstreamError(n.name, endpointOf(r), "timeout")
			} else if _, ours := err.(*apierror.Error); !ours {
				n.metrics.upstreamError(n.name, endpointOf(r), errReason(err))
			}
			writeError(w, err)
		},
	}
}

// errPassTimeout is the cause of a forwarded request's end when the
// upstream did not answer within its timeout.
var errPassTimeout = &apierror.Error{Status: http.StatusServiceUnavailable, Msg: "upstream did not answer in time", RetryAfter: time.Second}

// passThrough forwards a request for a listed path through the reverse
// proxy, within the upstream budget, bounded by the upstream timeout until
// the answer's headers arrive (an upgraded connection is not bound after
// that).
func (n *network) passThrough(w http.ResponseWriter, r *http.Request, p *auth.Principal) {
	var cred *credential
	if p != nil {
		cred = n.credentialFor(p.Team.Name)
	}
	endpoint := stateOf(r.Context()).endpoint
	key := budgetKey(endpoint, cred)
	sent, err := n.up.budget.Depart(r.Context(), key, n.up.limit)
	if err != nil {
		writeError(w, err)
		return
	}
	// Like every upstream call, the hold covers the write, not a connect
	// that outlasts the interval (departure).
	tctx, departed := n.up.depart(r.Context(), key, sent)
	defer departed()
	stateOf(r.Context()).counter().add()
	ctx, cancel := context.WithCancelCause(tctx)
	defer cancel(nil)
	ps := &passState{cred: cred, endpoint: endpoint, start: time.Now(), timer: time.AfterFunc(n.up.timeout, func() { cancel(errPassTimeout) })}
	defer ps.timer.Stop()
	n.rp.ServeHTTP(w, r.WithContext(context.WithValue(ctx, credKey{}, ps)))
}
