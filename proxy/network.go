package proxy

import (
	"net/http"
	"net/http/httputil"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"streamgate/auth"
	"streamgate/cache"
	"streamgate/cache/shared"
	"streamgate/don"
	"streamgate/ratelimit"
	"streamgate/realtime"
)

// network serves one network: its upstream, its catalog views, its
// pass-through proxy. It holds its collaborators itself; the policy pointer
// is the gateway's, swapped by Reload.
type network struct {
	name    string
	listen  string
	hosts   []string
	maxBulk int
	// passPaths are the paths under /api/v1/ the operator listed for
	// pass-through; every other unknown path is 404.
	passPaths map[string]bool

	up  *upstream
	org *credential
	cat catalogs
	rp  *httputil.ReverseProxy

	hub   *realtime.Hub // nil: no stream for this network
	gate  *don.Gate     // verifies reports where they enter; nil: none
	fresh *refresher    // schedules latest refreshes within the budget
	ws    wsSettings
	conns *teamConns // the gateway's, shared by its networks
	// resume keeps the stream clients' watermarks (wsresume.go); nil:
	// realtime.resume_window is 0.
	resume *resumeStore

	pol      *atomic.Pointer[policy]
	cache    *cache.Store
	shared   *shared.Tier // the cache tier shared with the replicas; nil: off
	limiter  ratelimit.Limiter
	quota    ratelimit.Quota
	metrics  *Metrics
	auditLog *zap.Logger
	now      func() time.Time

	handler http.Handler // the whole chain, observe first

	latestKeys children[string, string] // see latestKey
}

func (n *network) policy() *policy { return n.pol.Load() }

// chain is the request path of the network, outermost first: observe
// (request ID, access log, metrics, panics), checkRequest (route, target,
// method, body), authenticate (signature, skew, replay record looked at,
// network), admit (quotas), record (the signature, now that the request is
// admitted), then the endpoint.
func (n *network) chain(accessLog *zap.Logger) http.Handler {
	return observe(n.name, accessLog, n.metrics,
		n.checkRequest(
			n.authenticate(
				n.admit(
					n.record(
						http.HandlerFunc(n.serveRoute))))))
}

// serveRoute calls the endpoint that checkRequest matched.
func (n *network) serveRoute(w http.ResponseWriter, r *http.Request) {
	st := stateOf(r.Context())
	st.route.serve(n, w, r, st.principal)
}

// credentialFor returns the credential that team's calls on n are signed
// with: its own, if configured, else the organisation's.
func (n *network) credentialFor(team string) *credential {
	if tp := n.policy().teams[team]; tp != nil {
		if c := tp.creds[n.name]; c != nil {
			return c
		}
	}
	return n.org
}

// audit writes the audit trail of a read, when enabled: which team and key
// read which streams on which network.
func (n *network) audit(r *http.Request, p *auth.Principal, endpoint string, feeds ...string) {
	if !n.policy().audit {
		return
	}
	n.auditLog.Info("read",
		zap.String("request_id", stateOf(r.Context()).id),
		zap.String("network", n.name),
		zap.String("team", p.Team.Name),
		zap.String("key_id", p.KeyID),
		zap.String("endpoint", endpoint),
		zap.Strings("feeds", feeds))
}
