package proxy

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"streamgate/auth"
	"streamgate/cache"
)

// pageSettle is how far in the past the last report of a page must lie for a
// page shorter than its limit to count as complete, and so immutable.
const pageSettle = time.Minute

// serveReport answers GET /api/v1/reports: the report of one stream at a
// timestamp, immutable once fetched.
func (n *network) serveReport(w http.ResponseWriter, r *http.Request, p *auth.Principal) {
	rq, ok := n.readQuery(w, r, p, "reports", oneFeed("timestamp"))
	if !ok {
		return
	}
	feed, ts, cred := rq.feeds[0], rq.ts, rq.cred
	key := cache.ReportKey(n.name, cred.scope, feed, ts)
	target := "/api/v1/reports?feedID=" + feed + "&timestamp=" + strconv.FormatInt(ts, 10)
	st := stateOf(r.Context())
	e, outcome, err := n.cache.Load(r.Context(), key, func(ctx context.Context) (*cache.Entry, error) {
		resp, err := n.fetch(ctx, st, "reports", target, cred, http.StatusOK, http.StatusNotFound)
		if err != nil {
			return nil, err
		}
		now := n.now()
		if resp.status == http.StatusNotFound {
			return n.negative(now, resp), nil
		}
		_, body, err := n.checkReport(resp.body, "reports", feed)
		if err != nil {
			return nil, err
		}
		return &cache.Entry{Status: http.StatusOK, Body: body, Stored: now}, nil
	})
	n.answer(w, r, "report", outcome, e, err)
}

// serveLatest answers GET /api/v1/reports/latest, always coalesced and kept
// for latest_ttl. The report it fetches is also stored as the report at its
// own timestamp, which never changes.
func (n *network) serveLatest(w http.ResponseWriter, r *http.Request, p *auth.Principal) {
	rq, ok := n.readQuery(w, r, p, "latest", oneFeed(""))
	if !ok {
		return
	}
	feed, cred := rq.feeds[0], rq.cred
	pol := n.policy()
	if n.hub != nil && pol.latestFromStream && cred == n.org {
		if frame, obs, ok := n.hub.Latest(feed); ok {
			n.answerStream(w, r, frame, obs)
			return
		}
		n.hub.Want(feed) // polled often, it gets streamed
	}
	ttl := pol.latestTTL
	key := cache.LatestKey(n.name, cred.scope, feed)
	st := stateOf(r.Context())
	e, outcome, err := n.cache.Load(r.Context(), key, func(ctx context.Context) (*cache.Entry, error) {
		resp, err := n.fetch(ctx, st, "latest", "/api/v1/reports/latest?feedID="+feed, cred, http.StatusOK)
		if err != nil {
			return nil, err
		}
		doc, body, err := n.checkReport(resp.body, "latest", feed)
		if err != nil {
			return nil, err
		}
		now := n.now()
		n.cache.Set(cache.ReportKey(n.name, cred.scope, feed, doc.ObservationsTimestamp),
			&cache.Entry{Status: http.StatusOK, Body: body, Stored: now})
		return &cache.Entry{Status: http.StatusOK, Body: body, Stored: now, Expires: now.Add(ttl), NoStore: ttl <= 0}, nil
	})
	n.answer(w, r, "latest", outcome, e, err)
}

// servePage answers GET /api/v1/reports/page. A page is kept when it can no
// longer change: it is full, or its last report settled in the past.
func (n *network) servePage(w http.ResponseWriter, r *http.Request, p *auth.Principal) {
	rq, ok := n.readQuery(w, r, p, "page", func(q url.Values, rq *reportQuery) error {
		if err := oneFeed("startTimestamp")(q, rq); err != nil {
			return err
		}
		var err error
		rq.limit, err = parseLimit(q)
		return err
	})
	if !ok {
		return
	}
	feed, start, limit, cred := rq.feeds[0], rq.ts, rq.limit, rq.cred
	target := "/api/v1/reports/page?feedID=" + feed + "&startTimestamp=" + strconv.FormatInt(start, 10)
	if limit > 0 {
		target += "&limit=" + strconv.Itoa(limit)
	}
	key := cache.PageKey(n.name, cred.scope, feed, start, limit)
	st := stateOf(r.Context())
	e, outcome, err := n.cache.Load(r.Context(), key, func(ctx context.Context) (*cache.Entry, error) {
		resp, err := n.fetch(ctx, st, "page", target, cred, http.StatusOK)
		if err != nil {
			return nil, err
		}
		var doc struct {
			Reports []json.RawMessage `json:"reports"`
		}
		if err := json.Unmarshal(resp.body, &doc); err != nil || doc.Reports == nil {
			n.metrics.integrity(n.name, "page")
			return nil, errBadUpstream
		}
		now := n.now()
		last := int64(-1)
		for _, raw := range doc.Reports {
			var rd reportDoc
			if err := json.Unmarshal(raw, &rd); err != nil || normalFeedID(rd.FeedID) != feed ||
				rd.ObservationsTimestamp < start || rd.ObservationsTimestamp <= last {
				n.metrics.integrity(n.name, "page")
				return nil, errBadUpstream
			}
			last = rd.ObservationsTimestamp
			// Each report of the page is also the report at its timestamp.
			n.cache.Set(cache.ReportKey(n.name, cred.scope, feed, rd.ObservationsTimestamp),
				&cache.Entry{Status: http.StatusOK, Body: reportBody(raw), Stored: now})
		}
		complete := (limit > 0 && len(doc.Reports) == limit) ||
			(last >= 0 && time.Unix(last, 0).Add(pageSettle).Before(now))
		switch {
		case complete:
			return &cache.Entry{Status: http.StatusOK, Body: resp.body, Stored: now}, nil
		case len(doc.Reports) == 0:
			return n.negative(now, resp), nil
		}
		return &cache.Entry{Status: http.StatusOK, Body: resp.body, Stored: now, NoStore: true}, nil
	})
	n.answer(w, r, "page", outcome, e, err)
}
