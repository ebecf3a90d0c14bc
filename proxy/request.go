package proxy

import (
	"context"
	"net/http"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"streamgate/auth"
	"streamgate/feedid"
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
func (c *readCheck) audit(r *http.Request, p *auth.Principal, endpoint string, feeds ...feedid.ID) {
	if !c.pol.Load().audit {
		return
	}
	c.auditLog.Info("read",
		zap.String("request_id", stateOf(r.Context()).id),
		zap.String("network", c.network),
		zap.String("team", p.Team.Name),
		zap.String("key_id", p.KeyID),
		zap.String("endpoint", endpoint),
		zap.Strings("feeds", feedid.Strings(feeds)))
}

// entitled refuses, before any upstream call, a stream the team may not read
// or that the credential's catalog does not hold.
func (c *readCheck) entitled(ctx context.Context, p *auth.Principal, cred *credential, feedIDs ...feedid.ID) error {
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
		if _, ok := ids[string(id)]; !ok {
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
	feed  feedid.ID   // the stream of a one-stream request
	feeds []feedid.ID // the streams of a bulk or WebSocket request
	ts    int64       // timestamp, or startTimestamp of a page
	limit int         // page size; 0 when absent
	cred  *credential
}

// queryShape is what a report endpoint reads of its query.
type queryShape int

const (
	shapeLatest  queryShape = iota // feedID
	shapeReport                    // feedID, timestamp
	shapePage                      // feedID, startTimestamp, limit (optional)
	shapeBulk                      // feedIDs, timestamp
	shapeStreams                   // feedIDs (the WebSocket's)
)

// read reads and validates the parameters of shape from q into rq.
func (sh queryShape) read(q *query, rq *reportQuery) (err error) {
	switch sh {
	case shapeBulk, shapeStreams:
		if rq.feeds, err = q.feedIDs(); err != nil || sh == shapeStreams {
			return err
		}
		rq.ts, err = q.timestamp("timestamp")
		return err
	}
	if rq.feed, err = q.feedID("feedID"); err != nil {
		return err
	}
	switch sh {
	case shapeReport:
		rq.ts, err = q.timestamp("timestamp")
	case shapePage:
		if rq.ts, err = q.timestamp("startTimestamp"); err == nil {
			rq.limit, err = q.limit()
		}
	}
	return err
}

// read reads a report request's query (scanQuery: in place when plain),
// validates it as shape says, checks the team may read its streams and
// that they exist, and writes the audit line. On failure it answers the
// client and reports false: nothing has reached the upstream.
func (c *readCheck) read(w http.ResponseWriter, r *http.Request, p *auth.Principal, endpoint string, shape queryShape) (reportQuery, bool) {
	var (
		q  query
		rq reportQuery
	)
	scanQuery(r.URL.RawQuery, &q)
	if err := q.malformed(); err != nil {
		writeError(w, err)
		return rq, false
	}
	if err := shape.read(&q, &rq); err != nil {
		writeError(w, err)
		return rq, false
	}
	rq.cred = c.credentialFor(p.Team.Name)
	var err error
	if rq.feeds != nil {
		err = c.entitled(r.Context(), p, rq.cred, rq.feeds...)
	} else {
		err = c.entitled(r.Context(), p, rq.cred, rq.feed)
	}
	if err != nil {
		refuseEntitlement(w, r, err)
		return rq, false
	}
	if c.pol.Load().audit {
		if rq.feeds != nil {
			c.audit(r, p, endpoint, rq.feeds...)
		} else {
			c.audit(r, p, endpoint, rq.feed)
		}
	}
	return rq, true
}
