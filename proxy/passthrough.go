package proxy

import (
	"context"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"streamgate/auth"
)

type credKey struct{}

// reverseProxy forwards what the gateway does not answer itself (HEAD /, the
// WebSocket endpoint, any other path under /api/v1/) to the upstream,
// re-signed: the client's authentication headers are replaced by a
// signature of the outgoing request with the credential chosen for the
// caller. Upgrades (WebSocket) pass through.
func (n *network) reverseProxy(base *url.URL, transport http.RoundTripper) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Transport: transport,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(base)
			pr.Out.Host = base.Host
			for _, h := range []string{auth.HeaderAuthorization, auth.HeaderTimestamp, auth.HeaderSignature, "Cookie"} {
				pr.Out.Header.Del(h)
			}
			if cred, ok := pr.In.Context().Value(credKey{}).(*credential); ok && cred != nil {
				auth.Sign(pr.Out, cred.key, cred.secret, time.Now())
			}
		},
		ModifyResponse: func(resp *http.Response) error {
			resp.Header.Del("Set-Cookie")
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			n.g.metrics.upstreamError(n.name, endpointOf(r), errReason(err))
			writeError(w, err)
		},
	}
}

// passThrough forwards a request through the reverse proxy, within the
// upstream budget.
func (n *network) passThrough(w http.ResponseWriter, r *http.Request, p *auth.Principal) {
	var cred *credential
	if p != nil {
		cred = n.credentialFor(p.Team.Name)
	}
	endpoint := endpointOf(r)
	if n.up.budget != nil {
		if err := n.up.budget.Wait(r.Context(), budgetKey(endpoint, cred), n.up.limit); err != nil {
			writeError(w, err)
			return
		}
	}
	stateOf(r.Context()).upstreamCall()
	ctx := context.WithValue(r.Context(), credKey{}, cred)
	n.rp.ServeHTTP(w, r.WithContext(ctx))
}
