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
	ids := n.knownStreams(ctx, cred)
	if ids == nil {
		return nil
	}
	for _, id := range feedIDs {
		if _, ok := ids[id]; !ok {
			return errForbidden
		}
	}
	return nil
}

// authErrorStream is the access log's auth_error of a request refused
// because the team may not read one of its streams, or the stream does not
// exist for the credential (as "network" is for a network the team may not
// use). For a WebSocket it is the operator's only clue: the SDKs show just
// "expected 101, got 401".
const authErrorStream = "stream"

// refuseEntitlement answers err, a refusal of entitled, and notes it in
// the request's access line.
func refuseEntitlement(w http.ResponseWriter, r *http.Request, err error) {
	if err == errForbidden {
		stateOf(r.Context()).authError = authErrorStream
	}
	writeError(w, err)
}

// reportQuery is a report request, validated and admitted.
type reportQuery struct {
	feed  string   // the stream of a one-stream request (readOneFeed)
	feeds []string // one, but for bulk; nil from readOneFeed
	ts    int64    // timestamp, or startTimestamp of a page
	limit int      // page size; 0 when absent
	cred  *credential
}

// readQuery validates a report request with parse, checks the team may read
// its streams and that they exist, and writes the audit line. On failure it
// answers the client and reports false: nothing has reached the upstream.
// The query is r.URL.Query(), unless values are given (readBulkQuery gives
// noValues, having read the query itself).
func (n *network) readQuery(w http.ResponseWriter, r *http.Request, p *auth.Principal, endpoint string,
	parse func(url.Values, *reportQuery) error, values ...url.Values) (reportQuery, bool) {
	var rq reportQuery
	q := noValues
	if len(values) == 0 {
		q = r.URL.Query()
	}
	if err := parse(q, &rq); err != nil {
		writeError(w, err)
		return rq, false
	}
	rq.cred = n.credentialFor(p.Team.Name)
	if err := n.entitled(r.Context(), p, rq.cred, rq.feeds...); err != nil {
		refuseEntitlement(w, r, err)
		return rq, false
	}
	if n.policy().audit {
		n.audit(r, p, endpoint, rq.feeds...)
	}
	return rq, true
}

// readOneFeed is readQuery for a request of one stream: feedID and, when
// ts is not empty, the timestamp parameter named ts. A plain query (see
// readPlainQuery) is read without allocating; any other goes through
// readQuery. It sets rq.feed.
func (n *network) readOneFeed(w http.ResponseWriter, r *http.Request, p *auth.Principal, endpoint, ts string) (reportQuery, bool) {
	var q plainQuery
	if !readPlainQuery(r.URL.RawQuery, &q) {
		rq, ok := n.readQuery(w, r, p, endpoint, oneFeedParsers[ts])
		if ok {
			rq.feed = rq.feeds[0]
		}
		return rq, ok
	}
	var rq reportQuery
	var err error
	if rq.feed, err = checkFeedID("feedID", q.get("feedID")); err == nil && ts != "" {
		rq.ts, err = checkTimestamp(ts, q.get(ts))
	}
	if err != nil {
		writeError(w, err)
		return rq, false
	}
	rq.cred = n.credentialFor(p.Team.Name)
	if err := n.entitled(r.Context(), p, rq.cred, rq.feed); err != nil {
		refuseEntitlement(w, r, err)
		return rq, false
	}
	if n.policy().audit {
		n.audit(r, p, endpoint, rq.feed)
	}
	return rq, true
}

// noValues is the query a parser that reads the query itself is given.
var noValues = url.Values{}

// oneFeedParsers are the parsers of oneFeed that readOneFeed uses, made
// once.
var oneFeedParsers = map[string]func(url.Values, *reportQuery) error{
	"": oneFeed(""), "timestamp": oneFeed("timestamp"),
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
