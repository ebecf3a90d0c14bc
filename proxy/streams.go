package proxy

import (
	"net/http"

	"streamgate/auth"
	"streamgate/feedid"
	"streamgate/realtime"
	"streamgate/wsgate"
)

// A network is the REST side of its WebSocket endpoint (wsgate): the
// upgrade's streams read and entitled as a bulk request's are, the keys in
// force for a reload's recheck, and a resumed fill's charge (resumeCharge).
var _ wsgate.REST = (*network)(nil)

// ReadStreams reads an upgrade's feedIDs with the read check of every
// report request (query, credential, entitlement, audit); when the team
// signs with a credential of its own that is served from the network's
// stream partition (sharing: organisation), the streams must exist for the
// organisation's too: the stream is the organisation's. With sharing:
// credential such a team's stream is its own credential's (Partition).
func (n *network) ReadStreams(w http.ResponseWriter, r *http.Request, p *auth.Principal) ([]feedid.ID, bool) {
	rq, ok := n.reads.read(w, r, p, "ws", shapeStreams)
	if !ok {
		return nil, false
	}
	if rq.cred != n.org && rq.cred.part == "" {
		if err := n.reads.entitled(r.Context(), p, n.org, rq.feeds...); err != nil {
			refuseEntitlement(w, r, err)
			return nil, false
		}
	}
	return rq.feeds, true
}

// Keys returns the key store of the policy in force.
func (n *network) Keys() *auth.KeyStore { return n.policy().keys }

// Charge is resumeCharge.
func (n *network) Charge(team string) realtime.FillCharge { return n.resumeCharge(team) }
