package proxy

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"streamgate/auth"
	"streamgate/cache"
	"streamgate/don"
)

// pageSettle is how far in the past the last report of a page must lie for a
// page shorter than its limit to count as complete, and so immutable.
const pageSettle = time.Minute

// serveReport answers GET /api/v1/reports: the report of one stream at a
// timestamp, immutable once fetched.
func (n *network) serveReport(w http.ResponseWriter, r *http.Request, p *auth.Principal) {
	rq, ok := n.readOneFeed(w, r, p, "reports", "timestamp")
	if !ok {
		return
	}
	feed, ts, cred := rq.feed, rq.ts, rq.cred
	key := cache.ReportKey(n.name, cred.scope, feed, ts)
	if e, state := n.cache.Get(key); state == cache.Fresh {
		n.answer(w, r, "report", cache.Hit, e, nil) // as Load answers a fresh entry
		return
	}
	target := "/api/v1/reports?feedID=" + feed + "&timestamp=" + strconv.FormatInt(ts, 10)
	calls := stateOf(r.Context()).counter()
	e, outcome, err := n.cache.LoadFrom(r.Context(), key, cache.Source{Check: n.sharedReport(feed),
		Fill: func(ctx context.Context) (*cache.Entry, error) {
			resp, err := n.fetch(ctx, calls, "reports", target, cred, http.StatusOK, http.StatusNotFound)
			if err != nil {
				return nil, err
			}
			now := n.now()
			if resp.status == http.StatusNotFound {
				return n.negative(now, resp), nil
			}
			_, body, err := n.checkReport(resp.body, "reports", feed, true)
			if err != nil {
				return nil, err
			}
			return &cache.Entry{Status: http.StatusOK, Body: body, Stored: now}, nil
		}})
	n.answer(w, r, "report", outcome, e, err)
}

// serveLatest answers GET /api/v1/reports/latest: from the stream when
// the network's hub carries the feed; else from the cache, fresh for
// latest_ttl and then stale for latest_max_stale while the refresher
// (freshness.go) refreshes it within the budget. A request with nothing
// held waits at most latest_max_wait. The report fetched is also stored as
// the report at its own timestamp, which never changes.
func (n *network) serveLatest(w http.ResponseWriter, r *http.Request, p *auth.Principal) {
	rq, ok := n.readOneFeed(w, r, p, "latest", "")
	if !ok {
		return
	}
	feed, cred := rq.feed, rq.cred
	pol := n.policy()
	if n.hub != nil && pol.latestFromStream && cred == n.org {
		// No older than a report REST would answer stale: observed a
		// second before its fetch, fresh for latest_ttl, stale for
		// latest_max_stale. Older, the stream has gone silent: REST.
		oldest := n.now().Add(-time.Second - pol.latestTTL - pol.latestMaxStale).Unix()
		if frame, obs, ok := n.hub.LatestSince(feed, oldest); ok {
			n.metrics.latestAge(n.name, n.now().Unix()-obs)
			n.answerStream(w, r, frame, obs)
			return
		}
		n.hub.Want(feed) // polled often, it gets streamed
	}
	key := n.latestKey(cred, feed)
	e, state := n.cache.Get(key)
	if state == cache.Fresh {
		// As Load answers a fresh entry, without making its fill.
		if obs, ok := latestKind.Value(e); ok {
			n.metrics.latestAge(n.name, stateOf(r.Context()).clock(n.now).Unix()-obs)
		}
		n.answer(w, r, "latest", cache.Hit, e, nil)
		return
	}
	calls := stateOf(r.Context()).counter()
	src := cache.Source{Check: n.sharedLatest(feed),
		Fill: func(ctx context.Context) (*cache.Entry, error) {
			resp, err := n.fetch(ctx, calls, "latest", "/api/v1/reports/latest?feedID="+feed, cred, http.StatusOK)
			if err != nil {
				return nil, err
			}
			doc, body, err := n.checkReport(resp.body, "latest", feed, true)
			if err != nil {
				return nil, err
			}
			return n.latestEntry(cred, feed, doc, body), nil
		}}
	ctx := r.Context()
	scheduled := n.fresh != nil && cred == n.org
	if scheduled {
		// The refresher makes the call within the budget; a stale entry
		// is answered meanwhile, and its refresh leaves the leading
		// replica its grace first (shared.go).
		team, waited := p.Team.Name, state == cache.Missing
		if !waited {
			src.Grace = n.fresh.grace()
		}
		src.Fill = func(ctx context.Context) (*cache.Entry, error) {
			calls.add()
			return n.fresh.refresh(ctx, feed, team, waited)
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, pol.latestMaxWait)
		defer cancel()
	}
	e, outcome, err := n.cache.LoadFrom(ctx, key, src)
	if scheduled && outcome != cache.Hit {
		// Demand for a refresh that is pending (hits cost the queue
		// nothing: they take no lock).
		n.fresh.ask(feed, p.Team.Name)
	}
	if scheduled && err != nil && ctx.Err() != nil && r.Context().Err() == nil {
		n.metrics.latestWaitTimedOut(n.name)
		err = errLatestWait
	}
	if err == nil {
		if obs, ok := latestKind.Value(e); ok {
			n.metrics.latestAge(n.name, n.now().Unix()-obs)
		}
	}
	n.answer(w, r, "latest", outcome, e, err)
}

// latestKeysMax bounds the latest keys a network keeps made.
const latestKeysMax = 4096

// latestKey returns cache.LatestKey of the organisation's credential and
// feed, made once for each of up to latestKeysMax streams, so that a hit
// does not build its key; other credentials' keys are made each time.
func (n *network) latestKey(cred *credential, feed string) string {
	if cred != n.org {
		return cache.LatestKey(n.name, cred.scope, feed)
	}
	if m := n.latestKeys.m.Load(); m != nil {
		if k, ok := (*m)[feed]; ok {
			return k
		}
		if len(*m) >= latestKeysMax {
			return cache.LatestKey(n.name, cred.scope, feed)
		}
	}
	return n.latestKeys.get(feed, func() string { return cache.LatestKey(n.name, cred.scope, feed) })
}

// errLatestWait answers a latest request that had nothing held and whose
// report did not come within latest_max_wait.
var errLatestWait = &apiError{status: http.StatusServiceUnavailable, retryAfter: time.Second,
	msg: "no report of this stream yet within the upstream's rate budget: retry after the time in Retry-After"}

// latestKind is the kind of a latest entry: its value is its report's
// observationsTimestamp.
var latestKind cache.Kind[int64]

// latestEntry is the latest entry of a report just fetched, fresh for
// latest_ttl and served stale for latest_max_stale after; its value is the
// report's observationsTimestamp (latestKind). The report is also stored as the report
// at its own timestamp.
func (n *network) latestEntry(cred *credential, feed string, doc *reportDoc, body []byte) *cache.Entry {
	pol := n.policy()
	now := n.now()
	n.cache.Set(cache.ReportKey(n.name, cred.scope, feed, doc.ObservationsTimestamp),
		&cache.Entry{Status: http.StatusOK, Body: body, Stored: now})
	e := latestKind.With(&cache.Entry{Status: http.StatusOK, Body: body, Stored: now, Expires: now.Add(pol.latestTTL),
		NoStore: pol.latestTTL <= 0}, doc.ObservationsTimestamp)
	if pol.latestMaxStale > 0 {
		e.StaleUntil = e.Expires.Add(pol.latestMaxStale)
	}
	return e
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
	calls := stateOf(r.Context()).counter()
	e, outcome, err := n.cache.LoadFrom(r.Context(), key, cache.Source{Check: n.sharedPage(feed, start),
		Fill: func(ctx context.Context) (*cache.Entry, error) {
			return n.fillPage(ctx, calls, target, cred, feed, start, limit)
		}})
	n.answer(w, r, "page", outcome, e, err)
}

// fillPage fetches a page; the entry is kept only when the page is complete.
func (n *network) fillPage(ctx context.Context, calls *callCount, target string, cred *credential, feed string, start int64, limit int) (*cache.Entry, error) {
	resp, err := n.fetch(ctx, calls, "page", target, cred, http.StatusOK)
	if err != nil {
		return nil, err
	}
	reports, stamps, ok := parsePage(resp.body, feed, start)
	if !ok {
		n.metrics.integrity(n.name, "page")
		return nil, errBadUpstream
	}
	if err := n.verifyRaw(don.EntryUpstream, reports); err != nil {
		return nil, err
	}
	now := n.now()
	last := int64(-1)
	for i, raw := range reports {
		// Each report of the page is also the report at its timestamp.
		last = stamps[i]
		n.cache.Set(cache.ReportKey(n.name, cred.scope, feed, last),
			&cache.Entry{Status: http.StatusOK, Body: reportBody(raw), Stored: now})
	}
	complete := (limit > 0 && len(reports) == limit) ||
		(last >= 0 && time.Unix(last, 0).Add(pageSettle).Before(now))
	switch {
	case complete:
		return &cache.Entry{Status: http.StatusOK, Body: resp.body, Stored: now}, nil
	case len(reports) == 0:
		return n.negative(now, resp), nil
	}
	return &cache.Entry{Status: http.StatusOK, Body: resp.body, Stored: now, NoStore: true}, nil
}
