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

// reportDoc is the part of a report record the gateway checks.
type reportDoc struct {
	FeedID                string `json:"feedID"`
	ValidFromTimestamp    int64  `json:"validFromTimestamp"`
	ObservationsTimestamp int64  `json:"observationsTimestamp"`
	FullReport            string `json:"fullReport"`
}

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
	e, outcome, err := n.g.cache.Load(r.Context(), key, func(ctx context.Context) (*cache.Entry, error) {
		stateOf(ctx).upstreamCall()
		resp, err := n.up.get(ctx, "reports", target, cred)
		if err != nil {
			return nil, err
		}
		now := n.g.now()
		switch resp.status {
		case http.StatusOK:
			_, body, err := n.checkReport(resp.body, "reports", feed)
			if err != nil {
				return nil, err
			}
			return &cache.Entry{Status: http.StatusOK, Body: body, Stored: now}, nil
		case http.StatusNotFound:
			return n.negative(now, resp), nil
		}
		return nil, passOn(resp)
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
	ttl := n.g.policy().latestTTL
	key := cache.LatestKey(n.name, cred.scope, feed)
	e, outcome, err := n.g.cache.Load(r.Context(), key, func(ctx context.Context) (*cache.Entry, error) {
		stateOf(ctx).upstreamCall()
		resp, err := n.up.get(ctx, "latest", "/api/v1/reports/latest?feedID="+feed, cred)
		if err != nil {
			return nil, err
		}
		if resp.status != http.StatusOK {
			return nil, passOn(resp)
		}
		doc, body, err := n.checkReport(resp.body, "latest", feed)
		if err != nil {
			return nil, err
		}
		now := n.g.now()
		n.g.cache.Set(cache.ReportKey(n.name, cred.scope, feed, doc.ObservationsTimestamp),
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
	e, outcome, err := n.g.cache.Load(r.Context(), key, func(ctx context.Context) (*cache.Entry, error) {
		stateOf(ctx).upstreamCall()
		resp, err := n.up.get(ctx, "page", target, cred)
		if err != nil {
			return nil, err
		}
		if resp.status != http.StatusOK {
			return nil, passOn(resp)
		}
		var doc struct {
			Reports []json.RawMessage `json:"reports"`
		}
		if err := json.Unmarshal(resp.body, &doc); err != nil || doc.Reports == nil {
			n.g.metrics.integrity(n.name, "page")
			return nil, errBadUpstream
		}
		now := n.g.now()
		last := int64(-1)
		for _, raw := range doc.Reports {
			var rd reportDoc
			if err := json.Unmarshal(raw, &rd); err != nil || normalFeedID(rd.FeedID) != feed ||
				rd.ObservationsTimestamp < start || rd.ObservationsTimestamp <= last {
				n.g.metrics.integrity(n.name, "page")
				return nil, errBadUpstream
			}
			last = rd.ObservationsTimestamp
			// Each report of the page is also the report at its timestamp.
			n.g.cache.Set(cache.ReportKey(n.name, cred.scope, feed, rd.ObservationsTimestamp),
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

// negative is a short-lived entry for "no report yet".
func (n *network) negative(now time.Time, resp *upstreamResponse) *cache.Entry {
	ttl := n.g.policy().negativeTTL
	return &cache.Entry{Status: resp.status, Body: resp.body, Stored: now, Expires: now.Add(ttl), NoStore: ttl <= 0}
}

// checkReport parses a {"report": …} body and refuses one that is not of the
// stream asked for: such an answer is an upstream error, never a cache entry.
// It returns the body in the form every stored report has (see reportBody).
func (n *network) checkReport(body []byte, endpoint, feed string) (*reportDoc, []byte, error) {
	var doc struct {
		Report json.RawMessage `json:"report"`
	}
	var rd reportDoc
	if err := json.Unmarshal(body, &doc); err != nil || len(doc.Report) == 0 ||
		json.Unmarshal(doc.Report, &rd) != nil || normalFeedID(rd.FeedID) != feed {
		n.g.metrics.integrity(n.name, endpoint)
		return nil, nil, errBadUpstream
	}
	return &rd, reportBody(doc.Report), nil
}

// The form of every stored report: {"report":<record>} and a newline, the
// record exactly as the upstream sent it. Bulk answers cut the record out of
// it without parsing again.
const (
	reportPrefix = `{"report":`
	reportSuffix = "}\n"
)

// reportBody wraps a report record checked by the caller.
func reportBody(record []byte) []byte {
	body := make([]byte, 0, len(reportPrefix)+len(record)+len(reportSuffix))
	return append(append(append(body, reportPrefix...), record...), reportSuffix...)
}

// answer writes a cached or fetched entry, or the error that replaced it.
func (n *network) answer(w http.ResponseWriter, r *http.Request, kind string, outcome cache.Outcome, e *cache.Entry, err error) {
	if err != nil {
		writeError(w, err)
		return
	}
	n.markCache(w, r, kind, outcome, e)
	h := w.Header()
	switch {
	case e.NoStore || e.Status != http.StatusOK && e.Expires.IsZero():
		h.Set("Cache-Control", "no-store")
	case e.Expires.IsZero():
		h.Set("Cache-Control", "private, max-age=86400, immutable")
	default:
		left := max(e.Expires.Sub(n.g.now()), 0)
		h.Set("Cache-Control", "private, max-age="+strconv.Itoa(int(left/time.Second)))
	}
	writeRaw(w, e.Status, e.Body)
}

// markCache sets X-Cache and Age, counts the result, and notes it for the
// access log.
func (n *network) markCache(w http.ResponseWriter, r *http.Request, kind string, outcome cache.Outcome, e *cache.Entry) {
	label := cacheLabel(outcome)
	if e != nil && e.Status == http.StatusNotFound && outcome == cache.Hit {
		n.g.metrics.cacheResult(kind, "negative")
	} else {
		n.g.metrics.cacheResult(kind, lowerLabel(label))
	}
	if outcome != cache.Miss {
		n.g.metrics.saved(n.name, kind)
	}
	stateOf(r.Context()).cache = label
	h := w.Header()
	h.Set("X-Cache", label)
	if e != nil && !e.Stored.IsZero() {
		h.Set("Age", strconv.Itoa(int(max(n.g.now().Sub(e.Stored), 0)/time.Second)))
	}
}

func cacheLabel(o cache.Outcome) string {
	switch o {
	case cache.Hit:
		return "HIT"
	case cache.Coalesced:
		return "COALESCED"
	case cache.StaleHit, cache.StaleError:
		return "STALE"
	}
	return "MISS"
}

func lowerLabel(s string) string {
	switch s {
	case "HIT":
		return "hit"
	case "COALESCED":
		return "coalesced"
	case "STALE":
		return "stale"
	}
	return "miss"
}

// writeRaw writes a JSON body with status.
func writeRaw(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(body)
}
