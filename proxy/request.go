package proxy

import (
	"context"
	"net/http"
	"net/url"

	"streamgate/auth"
)

// entitled refuses, before any upstream call, a stream the team may not read
// or that the credential's catalog does not hold.
func (n *network) entitled(ctx context.Context, p *auth.Principal, cred *credential, feedIDs ...string) error {
	for _, id := range feedIDs {
		if !p.Team.MayRead(id) {
			return errForbidden
		}
	}
	known := n.knownStreams(ctx, cred)
	for _, id := range feedIDs {
		if !known(id) {
			return errForbidden
		}
	}
	return nil
}

// reportQuery is a report request, validated and admitted.
type reportQuery struct {
	feeds []string // one, but for bulk
	ts    int64    // timestamp, or startTimestamp of a page
	limit int      // page size; 0 when absent
	cred  *credential
}

// readQuery validates a report request with parse, checks the team may read
// its streams and that they exist, and writes the audit line. On failure it
// answers the client and reports false: nothing has reached the upstream.
func (n *network) readQuery(w http.ResponseWriter, r *http.Request, p *auth.Principal, endpoint string,
	parse func(url.Values, *reportQuery) error) (reportQuery, bool) {
	var rq reportQuery
	if err := parse(r.URL.Query(), &rq); err != nil {
		writeError(w, err)
		return rq, false
	}
	rq.cred = n.credentialFor(p.Team.Name)
	if err := n.entitled(r.Context(), p, rq.cred, rq.feeds...); err != nil {
		writeError(w, err)
		return rq, false
	}
	n.audit(r, p, endpoint, rq.feeds...)
	return rq, true
}

// oneFeed reads feedID, and then the timestamp parameter named ts, if any.
func oneFeed(ts string) func(url.Values, *reportQuery) error {
	return func(q url.Values, rq *reportQuery) error {
		feed, err := parseFeedID(q, "feedID")
		if err != nil {
			return err
		}
		rq.feeds = []string{feed}
		if ts != "" {
			rq.ts, err = parseTimestamp(q, ts)
		}
		return err
	}
}
