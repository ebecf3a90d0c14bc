package proxy

import (
	"net/http"
	"net/url"

	"streamgate/auth"
)

// serveWS checks a WebSocket upgrade to /api/v1/ws?feedIDs=… like a bulk
// read before anything goes upstream: every stream ID well-formed (400),
// readable by the team and known to the credential's catalog (401 for any
// one that is not), and an audit line with the streams. Only then is the
// upgrade forwarded, re-signed.
func (n *network) serveWS(w http.ResponseWriter, r *http.Request, p *auth.Principal) {
	if _, ok := n.readQuery(w, r, p, "ws", func(q url.Values, rq *reportQuery) (err error) {
		rq.feeds, err = parseFeedIDs(q)
		return err
	}); !ok {
		return
	}
	n.passThrough(w, r, p)
}
