package proxy

import (
	"net/http"
	"net/http/httputil"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"streamgate/don"
	"streamgate/ratelimit"
	"streamgate/wsgate"
)

// network is one network's assembly: its listener's handler (the chain)
// in front of the owners of its endpoints, each built in New with what it
// needs and none holding the network:
//
//   - the middlewares: requestCheck, authenticator, admission, recorder
//     (admission.go);
//   - reads, the read check of every report request: query, credential,
//     entitlement, audit (request.go);
//   - the report sources: report, latest, page (reports.go) and bulk
//     (bulk.go), with the latest entries and the refresher
//     (freshness.go) that schedules their refreshes;
//   - catalog, the catalog views and the discovery endpoints (catalog.go);
//   - up, the upstream client (upstream.go); ans, the answers (respond.go);
//   - streams, the network's WebSocket endpoint (wsgate), which asks the
//     network for the streams of an upgrade and their entitlement
//     (streams.go);
//   - pass-through (passthrough.go), which uses the network's fields
//     directly.
type network struct {
	name   string
	listen string
	hosts  []string

	up  *upstream
	org *credential
	rp  *httputil.ReverseProxy

	reads   *readCheck
	catalog *catalogViews
	ans     *answerer
	report  *reportSource
	latest  *latestSource
	page    *pageSource
	bulk    *bulkSource
	fresh   *refresher // schedules latest refreshes within the budget

	gate    *don.Gate       // verifies reports where they enter; nil: none
	streams *wsgate.Network // the WebSocket endpoint on the hub (Stream); nil: none
	history historySource   // the bars endpoints' archive (history.go)
	// quota is the gateway's daily quota counter: a resumed stream
	// client's fill is charged to its team's (resumeCharge).
	quota ratelimit.Quota

	pol     *atomic.Pointer[policy]
	metrics *Metrics
	now     func() time.Time

	handler http.Handler // the whole chain, observe first
}

func (n *network) policy() *policy { return n.pol.Load() }

// chain is the request path of the network, outermost first: observe
// (request ID, access log, metrics, panics), requestCheck (route, target,
// method, body), authenticator (signature, skew, replay record looked at,
// network), admission (quotas), recorder (the signature, now that the
// request is admitted), then the endpoint the route names.
func chain(network string, accessLog *zap.Logger, m *Metrics, u UsageRecorder, tr trace.Tracer, check requestCheck, authn authenticator,
	admit admission, rec recorder, endpoint http.Handler) http.Handler {
	return observe(network, accessLog, m, u, tr, check.wrap(authn.wrap(admit.wrap(rec.wrap(endpoint)))))
}

// serveRoute calls the endpoint that requestCheck matched.
func (n *network) serveRoute(w http.ResponseWriter, r *http.Request) {
	st := stateOf(r.Context())
	st.route.owner(n).serve(w, r, st.principal)
}

// credentialFor returns the credential that team's calls on n are signed
// with: its own, if configured, else the organisation's.
func (n *network) credentialFor(team string) *credential { return n.reads.credentialFor(team) }
