package proxy

import (
	"net/http"
	"strings"

	"streamgate/auth"
)

// route is one endpoint of the API: its path, its name (the metric label
// and the access log's endpoint), the methods it answers (the Allow header
// of a 405), whether it may be called without a signature, and the owner
// of the network that serves it.
type route struct {
	path      string
	name      string
	allow     string // "GET" or "GET, HEAD"
	anonymous bool   // served unsigned when auth.anonymous_catalog is on and no credentials are sent
	owner     func(n *network) endpoint
}

// endpoint is what serves a route: a report source, the catalog views, or
// one of the network's own endpoints (root, ws, pass-through).
type endpoint interface {
	serve(w http.ResponseWriter, r *http.Request, p *auth.Principal)
}

// routes is the route table of a network. Anything else under /api/v1/ is
// 404 unless the operator listed it in networks.<name>.upstream.pass_through.
var routes = []route{
	{path: "/", name: "root", allow: "GET, HEAD", owner: func(n *network) endpoint { return rootEndpoint{n} }},
	{path: "/api/v1/discovery", name: "discovery", allow: "GET", anonymous: true, owner: func(n *network) endpoint { return discoveryEndpoint{n.catalog} }},
	{path: "/api/v1/feeds", name: "feeds", allow: "GET", owner: func(n *network) endpoint { return feedsEndpoint{n.catalog} }},
	{path: "/api/v1/reports", name: "reports", allow: "GET", owner: func(n *network) endpoint { return n.report }},
	{path: "/api/v1/reports/latest", name: "latest", allow: "GET", owner: func(n *network) endpoint { return n.latest }},
	{path: "/api/v1/reports/bulk", name: "bulk", allow: "GET", owner: func(n *network) endpoint { return n.bulk }},
	{path: "/api/v1/reports/page", name: "page", allow: "GET", owner: func(n *network) endpoint { return n.page }},
	{path: "/api/v1/ws", name: "ws", allow: "GET", owner: func(n *network) endpoint { return wsEndpoint{n} }},
	{path: "/api/v1/history", name: "history", allow: "GET", owner: func(n *network) endpoint { return historyEndpoint{n, false} }},
	{path: "/api/v1/history/rows", name: "history_rows", allow: "GET", owner: func(n *network) endpoint { return historyEndpoint{n, true} }},
}

// passThroughRoute serves a path the operator listed for pass-through.
var passThroughRoute = &route{name: "other", allow: "GET, HEAD", owner: func(n *network) endpoint { return passEndpoint{n} }}

// The endpoints that are not a type of their own: each a one-pointer
// value, so that naming it allocates nothing.
type (
	rootEndpoint      struct{ n *network }
	wsEndpoint        struct{ n *network }
	passEndpoint      struct{ n *network }
	discoveryEndpoint struct{ c *catalogViews }
	feedsEndpoint     struct{ c *catalogViews }
)

func (e rootEndpoint) serve(w http.ResponseWriter, r *http.Request, p *auth.Principal) {
	e.n.streams.ServeRoot(w, r, p)
}
func (e wsEndpoint) serve(w http.ResponseWriter, r *http.Request, p *auth.Principal) {
	e.n.streams.ServeWS(w, r, p)
}
func (e passEndpoint) serve(w http.ResponseWriter, r *http.Request, p *auth.Principal) {
	e.n.passThrough(w, r, p)
}
func (e discoveryEndpoint) serve(w http.ResponseWriter, r *http.Request, p *auth.Principal) {
	e.c.serveDiscovery(w, r, p)
}
func (e feedsEndpoint) serve(w http.ResponseWriter, r *http.Request, p *auth.Principal) {
	e.c.serveFeeds(w, r, p)
}

// routeByPath indexes routes (filled by init: the handlers refer back to
// the table through endpointOf).
var routeByPath map[string]*route

func init() {
	routeByPath = make(map[string]*route, len(routes))
	for i := range routes {
		routeByPath[routes[i].path] = &routes[i]
	}
}

// endpointOf names the endpoint of a request, from a fixed list: it is a
// metric label.
func endpointOf(r *http.Request) string {
	_, name := routeOf(r)
	return name
}

// routeOf returns the route of the request's path, if any, and the name
// of its endpoint (endpointOf).
func routeOf(r *http.Request) (*route, string) {
	if rt, ok := routeByPath[r.URL.Path]; ok {
		return rt, rt.name
	}
	if strings.HasPrefix(r.URL.Path, "/api/v1/") {
		return nil, "other"
	}
	return nil, "unknown"
}

// checkTarget refuses a request target that could mean another path
// upstream than the one routed here: dot segments ("/a/../b", "/./"),
// empty segments ("//"), backslashes, and encoded slashes, dots or
// backslashes anywhere in the path. The gateway never forwards a path it
// did not match exactly.
func checkTarget(r *http.Request) error {
	raw := r.RequestURI
	if raw == "" {
		raw = r.URL.RequestURI()
	}
	if raw == "*" || (raw != "" && raw[0] != '/') {
		return errBadTarget // "*" (OPTIONS) or an absolute form the API never uses
	}
	path, _, _ := strings.Cut(raw, "?")
	if !CleanPath(path) {
		return errBadTarget
	}
	return nil
}

// CleanPath reports whether a raw (still encoded) request path is in the
// only form the gateway forwards: starting with '/', no empty, "." or ".."
// segment, no backslash, and no percent-encoded '/', '.' or '\'.
func CleanPath(path string) bool {
	if path == "" || path[0] != '/' {
		return false
	}
	if path == "/" {
		return true
	}
	for seg := range strings.SplitSeq(path[1:], "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
	}
	for i := 0; i < len(path); i++ {
		switch path[i] {
		case '\\':
			return false
		case '%':
			if i+2 >= len(path) {
				return false
			}
			switch strings.ToLower(path[i+1 : i+3]) {
			case "2e", "2f", "5c":
				return false
			}
		}
	}
	return true
}

// hasBody reports whether the client declared a request body. The API takes
// none, and upstream calls are signed over the empty body.
func hasBody(r *http.Request) bool {
	return r.ContentLength != 0 || len(r.TransferEncoding) > 0
}
