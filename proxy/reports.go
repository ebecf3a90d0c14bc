package proxy

import (
	"context"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"streamgate/auth"
	"streamgate/cache"
	"streamgate/don"
	"streamgate/internal/apierror"
	"streamgate/realtime"
)

// pageSettle is how far in the past the last report of a page must lie for a
// page shorter than its limit to count as complete, and so immutable.
const pageSettle = time.Minute

// sourceDeps is what a report source of one network is given at
// construction: the read check in front of it, the cache (whose Store
// asks the shared tier), the upstream, the checks of what enters, the
// answerer, the policy in force, the metrics and the clock.
type sourceDeps struct {
	network string
	reads   *readCheck
	store   *cache.Store
	up      *upstream
	records *checker
	ans     *answerer
	pol     *atomic.Pointer[policy]
	metrics *Metrics
	now     func() time.Time
	arch    *archiveTier // nil: no archive (Gateway.UseArchive)
}

// reportSource answers GET /api/v1/reports: the report of one stream at a
// timestamp, immutable once fetched.
type reportSource struct{ sourceDeps }

func (s *reportSource) serve(w http.ResponseWriter, r *http.Request, p *auth.Principal) {
	rq, ok := s.reads.read(w, r, p, "reports", shapeReport)
	if !ok {
		return
	}
	feed, ts, cred := string(rq.feed), rq.ts, rq.cred // the cache's and the upstream's key
	key := cache.ReportKey(s.network, cred.scope, feed, ts)
	if e, state := s.store.Get(key); state == cache.Fresh {
		s.ans.answer(w, r, "report", key, cache.Hit, e, nil) // as Load answers a fresh entry
		return
	}
	target := "/api/v1/reports?feedID=" + feed + "&timestamp=" + strconv.FormatInt(ts, 10)
	calls := stateOf(r.Context()).counter()
	var fromArchive atomic.Bool
	e, outcome, err := s.store.LoadFrom(fillContext(r.Context()), key, cache.Source{Check: s.records.storedReport(feed, ts),
		Fill: archiveFirst(&fromArchive, func(ctx context.Context) []byte { return s.arch.report(ctx, cred, feed, ts) },
			func(record []byte) *cache.Entry {
				return &cache.Entry{Status: http.StatusOK, Body: reportBody(record), Stored: s.now()}
			},
			func(ctx context.Context) (*cache.Entry, error) {
				resp, err := s.up.fetch(ctx, calls, "reports", target, cred, http.StatusOK, http.StatusNotFound)
				if err != nil {
					return nil, err
				}
				now := s.now()
				if resp.status == http.StatusNotFound {
					return negative(now, resp, s.pol.Load().negativeTTL), nil
				}
				doc, body, err := s.records.checkReport(resp.body, "reports", feed, ts, true)
				if err != nil {
					return nil, err
				}
				s.arch.keep(cred, doc, reportPayload(body))
				return &cache.Entry{Status: http.StatusOK, Body: body, Stored: now}, nil
			})})
	s.ans.answer(w, r, "report", key, archived(outcome, &fromArchive), e, err)
}

// latestSource answers GET /api/v1/reports/latest: from the stream when
// the hub of the credential's stream partition carries the feed; else from the cache, fresh for
// latest_ttl and then stale for latest_max_stale while the refresher
// (freshness.go) refreshes it within the budget. A request with nothing
// held waits at most latest_max_wait. The report fetched is also stored as
// the report at its own timestamp, which never changes.
type latestSource struct {
	sourceDeps
	org     *credential
	hubs    map[string]*realtime.Hub // by stream partition; none: no stream for this network
	fresh   *refresher               // schedules the organisation's refreshes
	entries *latestEntries
}

func (s *latestSource) serve(w http.ResponseWriter, r *http.Request, p *auth.Principal) {
	rq, ok := s.reads.read(w, r, p, "latest", shapeLatest)
	if !ok {
		return
	}
	feed, cred := string(rq.feed), rq.cred // the cache's and the upstream's key
	pol := s.pol.Load()
	now := stateOf(r.Context()).clock(s.now) // the request's one reading (the Store's clock too)
	// The stream of the request's credential's partition: the
	// organisation's, or with sharing: credential a team's own.
	if hub := s.hubs[cred.part]; hub != nil && pol.latestFromStream && (cred == s.org || cred.part != "") {
		// No older than a report REST would answer stale: observed a
		// second before its fetch, fresh for latest_ttl, stale for
		// latest_max_stale. Older, the stream has gone silent: REST.
		oldest := now.Add(-time.Second - pol.latestTTL - pol.latestMaxStale).Unix()
		if frame, obs, ok := hub.LatestSince(rq.feed, oldest); ok {
			s.metrics.latestAge(s.network, now.Unix()-obs)
			s.ans.answerStream(w, r, frame, obs)
			return
		}
		hub.Want(rq.feed) // polled often, it gets streamed
	}
	key := s.entries.key(cred, feed)
	e, state := s.store.GetAt(key, now)
	if state == cache.Fresh {
		// As Load answers a fresh entry, without making its fill.
		if obs, ok := latestKind.Value(e); ok {
			s.metrics.latestAge(s.network, now.Unix()-obs)
		}
		s.ans.answer(w, r, "latest", key, cache.Hit, e, nil)
		return
	}
	calls := stateOf(r.Context()).counter()
	src := cache.Source{Check: s.entries.check(feed),
		Fill: func(ctx context.Context) (*cache.Entry, error) {
			resp, err := s.up.fetch(ctx, calls, "latest", "/api/v1/reports/latest?feedID="+feed, cred, http.StatusOK)
			if err != nil {
				return nil, err
			}
			doc, body, err := s.records.checkReport(resp.body, "latest", feed, anySecond, true)
			if err != nil {
				return nil, err
			}
			return s.entries.entry(cred, feed, doc, body), nil
		}}
	ctx := fillContext(r.Context())
	scheduled := s.fresh != nil && cred == s.org
	if scheduled {
		// The refresher makes the call within the budget; a stale entry
		// is answered meanwhile, and its refresh leaves the leading
		// replica its grace first (shared.go).
		team, waited := p.Team.Name, state == cache.Missing
		if !waited {
			src.Grace = s.fresh.grace()
		}
		src.Fill = func(ctx context.Context) (*cache.Entry, error) {
			calls.add()
			return s.fresh.refresh(ctx, feed, team, waited)
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, pol.latestMaxWait)
		defer cancel()
	}
	e, outcome, err := s.store.LoadFrom(ctx, key, src)
	if scheduled && outcome != cache.Hit {
		// Demand for a refresh that is pending (hits cost the queue
		// nothing: they take no lock).
		s.fresh.ask(feed, p.Team.Name)
	}
	if scheduled && err != nil && ctx.Err() != nil && r.Context().Err() == nil {
		s.metrics.latestWaitTimedOut(s.network)
		err = errLatestWait
	}
	if err == nil {
		if obs, ok := latestKind.Value(e); ok {
			s.metrics.latestAge(s.network, s.now().Unix()-obs)
		}
	}
	s.ans.answer(w, r, "latest", key, outcome, e, err)
}

// latestKeysMax bounds the latest keys a network keeps made.
const latestKeysMax = 4096

// latestEntries makes, names and checks the latest entries of a network,
// for its latest source and its refresher.
type latestEntries struct {
	network string
	org     *credential
	store   *cache.Store
	records *checker
	pol     *atomic.Pointer[policy]
	now     func() time.Time
	arch    *archiveTier // nil: no archive

	keys children[string, string] // see key
}

// key returns cache.LatestKey of cred and feed. The organisation's keys
// are made once for each of up to latestKeysMax streams, so that a hit
// does not build its key; their bytes are reserved in the Store, so that
// they count against cache.max_bytes like every entry. Other credentials'
// keys are made each time.
func (l *latestEntries) key(cred *credential, feed string) string {
	if cred != l.org {
		return cache.LatestKey(l.network, cred.scope, feed)
	}
	if m := l.keys.m.Load(); m != nil {
		if k, ok := (*m)[feed]; ok {
			return k
		}
		if len(*m) >= latestKeysMax {
			return cache.LatestKey(l.network, cred.scope, feed)
		}
	}
	return l.keys.get(feed, func() string {
		k := cache.LatestKey(l.network, cred.scope, feed)
		l.store.Reserve(latestKeyCost(feed, k))
		return k
	})
}

// latestKeyCost is what one made latest key holds: the feed and the key
// strings and their map slot (about 64 bytes with the map's overhead).
func latestKeyCost(feed, key string) int64 {
	return int64(len(feed) + len(key) + 64)
}

// errLatestWait answers a latest request that had nothing held and whose
// report did not come within latest_max_wait.
var errLatestWait = &apierror.Error{Status: http.StatusServiceUnavailable, RetryAfter: time.Second,
	Msg: "no report of this stream yet within the upstream's rate budget: retry after the time in Retry-After"}

// latestKind is the kind of a latest entry: its value is its report's
// observationsTimestamp.
var latestKind cache.Kind[int64]

// entry is the latest entry of a report just fetched, fresh for
// latest_ttl and served stale for latest_max_stale after; its value is the
// report's observationsTimestamp (latestKind). The report is also stored
// as the report at its own timestamp.
func (l *latestEntries) entry(cred *credential, feed string, doc *reportDoc, body []byte) *cache.Entry {
	pol := l.pol.Load()
	now := l.now()
	l.arch.keep(cred, doc, reportPayload(body))
	l.store.Set(cache.ReportKey(l.network, cred.scope, feed, doc.ObservationsTimestamp),
		&cache.Entry{Status: http.StatusOK, Body: body, Stored: now})
	e := latestKind.With(&cache.Entry{Status: http.StatusOK, Body: body, Stored: now, Expires: now.Add(pol.latestTTL),
		NoStore: pol.latestTTL <= 0}, doc.ObservationsTimestamp)
	if pol.latestMaxStale > 0 {
		e.StaleUntil = e.Expires.Add(pol.latestMaxStale)
	}
	return e
}

// pageSource answers GET /api/v1/reports/page. A page is kept when it can
// no longer change: it is full, or its last report settled in the past.
type pageSource struct{ sourceDeps }

func (s *pageSource) serve(w http.ResponseWriter, r *http.Request, p *auth.Principal) {
	rq, ok := s.reads.read(w, r, p, "page", shapePage)
	if !ok {
		return
	}
	feed, start, limit, cred := string(rq.feed), rq.ts, rq.limit, rq.cred // the cache's and the upstream's key
	target := "/api/v1/reports/page?feedID=" + feed + "&startTimestamp=" + strconv.FormatInt(start, 10)
	if limit > 0 {
		target += "&limit=" + strconv.Itoa(limit)
	}
	key := cache.PageKey(s.network, cred.scope, feed, start, limit)
	calls := stateOf(r.Context()).counter()
	var fromArchive atomic.Bool
	e, outcome, err := s.store.LoadFrom(fillContext(r.Context()), key, cache.Source{Check: s.records.storedPage(feed, start),
		Fill: archiveFirst(&fromArchive, func(ctx context.Context) []byte { return s.arch.page(ctx, cred, feed, start, limit) },
			func(body []byte) *cache.Entry {
				return &cache.Entry{Status: http.StatusOK, Body: body, Stored: s.now()}
			},
			func(ctx context.Context) (*cache.Entry, error) {
				return s.fill(ctx, calls, target, cred, feed, start, limit)
			})})
	s.ans.answer(w, r, "page", key, archived(outcome, &fromArchive), e, err)
}

// fill fetches a page; the entry is kept only when the page is complete.
func (s *pageSource) fill(ctx context.Context, calls *callCount, target string, cred *credential, feed string, start int64, limit int) (*cache.Entry, error) {
	resp, err := s.up.fetch(ctx, calls, "page", target, cred, http.StatusOK)
	if err != nil {
		return nil, err
	}
	recs, reports, err := parsePage(resp.body, feed, start)
	if err != nil {
		return nil, s.records.readError(don.EntryUpstream, "page", err)
	}
	if err := s.records.verifyAll(don.EntryUpstream, recs); err != nil {
		return nil, err
	}
	now := s.now()
	last := int64(-1)
	for i, raw := range reports {
		// Each report of the page is also the report at its timestamp.
		last = recs[i].ObservationsTimestamp
		s.store.Set(cache.ReportKey(s.network, cred.scope, feed, last),
			&cache.Entry{Status: http.StatusOK, Body: reportBody(raw), Stored: now})
	}
	s.store.Wait() // visible before the answer goes out: the next ask is a hit
	complete := (limit > 0 && len(reports) == limit) ||
		(last >= 0 && time.Unix(last, 0).Add(pageSettle).Before(now))
	s.arch.keepPage(cred, feed, start, recs, reports, complete)
	switch {
	case complete:
		return &cache.Entry{Status: http.StatusOK, Body: resp.body, Stored: now}, nil
	case len(reports) == 0:
		return negative(now, resp, s.pol.Load().negativeTTL), nil
	}
	return &cache.Entry{Status: http.StatusOK, Body: resp.body, Stored: now, NoStore: true}, nil
}
