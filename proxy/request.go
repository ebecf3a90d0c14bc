package proxy

import (
	"context"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"streamgate/auth"
)

// readCheck is the check every read of a network's reports goes through
// before its source looks at the cache: the query read and validated, the
// credential the team's calls are signed with, the entitlement (the team's
// list and the credential's catalog), and the audit line.
type readCheck struct {
	network  string
	org      *credential
	catalog  *catalogViews
	pol      *atomic.Pointer[policy]
	auditLog *zap.Logger
	now      func() time.Time
}

// credentialFor returns the credential that team's calls on the network
// are signed with: its own, if configured, else the organisation's.
func (c *readCheck) credentialFor(team string) *credential {
	return credentialFor(c.pol.Load(), c.network, c.org, team)
}

// credentialFor returns the credential that team's calls on network are
// signed with under pol: its own, if configured, else org.
func credentialFor(pol *policy, network string, org *credential, team string) *credential {
	if tp := pol.teams[team]; tp != nil {
		if cred := tp.creds[network]; cred != nil {
			return cred
		}
	}
	return org
}

// audit writes the audit trail of a read, when enabled: which team and key
// read which streams on which network.
func (c *readCheck) audit(r *http.Request, p *auth.Principal, endpoint string, feeds ...string) {
	if !c.pol.Load().audit {
		return
	}
	c.auditLog.Info("read",
		zap.String("request_id", stateOf(r.Context()).id),
		zap.String("network", c.network),
		zap.String("team", p.Team.Name),
		zap.String("key_id", p.KeyID),
		zap.String("endpoint", endpoint),
		zap.Strings("feeds", feeds))
}

// entitled refuses, before any upstream call, a stream the team may not read
// or that the credential's catalog does not hold.
func (c *readCheck) entitled(ctx context.Context, p *auth.Principal, cred *credential, feedIDs ...string) error {
	for _, id := range feedIDs {
		if !p.Team.MayRead(id) {
			return errForbidden
		}
	}
	ids := c.catalog.known(ctx, cred, stateOf(ctx).clock(c.now))
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
	feed  string   // the stream of a one-stream request (readCheck.one)
	feeds []string // one, but for bulk; nil from readCheck.one
	ts    int64    // timestamp, or startTimestamp of a page
	limit int      // page size; 0 when absent
	cred  *credential
}

// query validates a report request with parse, checks the team may read
// its streams and that they exist, and writes the audit line. On failure it
// answers the client and reports false: nothing has reached the upstream.
// The query is r.URL.Query(), unless values are given (bulk gives
// noValues, having read the query itself).
func (c *readCheck) query(w http.ResponseWriter, r *http.Request, p *auth.Principal, endpoint string,
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
	rq.cred = c.credentialFor(p.Team.Name)
	if err := c.entitled(r.Context(), p, rq.cred, rq.feeds...); err != nil {
		refuseEntitlement(w, r, err)
		return rq, false
	}
	if c.pol.Load().audit {
		c.audit(r, p, endpoint, rq.feeds...)
	}
	return rq, true
}

// one is query for a request of one stream: feedID and, when
// ts is not empty, the timestamp parameter named ts. A plain query (see
// readPlainQuery) is read without allocating; any other goes through
// query. It sets rq.feed.
func (c *readCheck) one(w http.ResponseWriter, r *http.Request, p *auth.Principal, endpoint, ts string) (reportQuery, bool) {
	var q plainQuery
	if !readPlainQuery(r.URL.RawQuery, &q) {
		rq, ok := c.query(w, r, p, endpoint, oneFeedParsers[ts])
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
	rq.cred = c.credentialFor(p.Team.Name)
	if err := c.entitled(r.Context(), p, rq.cred, rq.feed); err != nil {
		refuseEntitlement(w, r, err)
		return rq, false
	}
	if c.pol.Load().audit {
		c.audit(r, p, endpoint, rq.feed)
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
