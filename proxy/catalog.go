package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
	"weak"

	"streamgate/auth"
	"streamgate/cache"
	"streamgate/catalog"
	"streamgate/feedid"
	"streamgate/internal/apierror"
)

// The upstream views of the catalog. Each is fetched at most once per
// network, credential and lifetime; every filter is evaluated locally.
type catalogView string

const (
	viewAnonymous catalogView = "anon"   // unsigned: the public listing
	viewSigned    catalogView = "signed" // signed: public plus entitled
	viewHidden    catalogView = "hidden" // signed, hidden=true: everything the credential reaches
)

// catalogStale is how long past its lifetime a catalog view is still served
// while the upstream cannot be reached (stale-if-error).
const catalogStale = 24 * time.Hour

// parsedView is a catalog view parsed once, kept as the Value of its cache
// entry (and so under cache.max_bytes, dropped with it): the streams
// indexed for filtering, their JSON exactly as the upstream sent it (so
// fields the gateway does not know pass through), and the set of their IDs.
type parsedView struct {
	entry   *cache.Entry
	expires time.Time // end of the advertised lifetime
	streams []catalog.Indexed
	raw     []json.RawMessage
	ids     map[string]struct{}
}

// catalogViews owns the catalog views of one network: it fetches each
// view (per credential scope) through the cache, parses it once, checks a
// view read from the shared tier, and keeps the organisation's hidden view
// at hand for the entitlement of every report request.
type catalogViews struct {
	network string
	store   *cache.Store
	up      *upstream
	org     *credential
	pol     *atomic.Pointer[policy]
	metrics *Metrics
	ans     *answerer
	now     func() time.Time

	// orgHidden is the organisation's hidden view, which every report
	// request consults for the streams that exist; while it is fresh it is
	// used without a cache lookup. It is weak: the cache entry holds the
	// view (and its cost is counted there), so a view evicted for space is
	// not kept alive here.
	orgHidden atomic.Pointer[weak.Pointer[parsedView]]
}

// view returns the parsed catalog view for cred (nil for anonymous), from
// the cache or the upstream. now is the request's clock reading.
func (c *catalogViews) view(ctx context.Context, view catalogView, cred *credential, now time.Time) (*parsedView, cache.Outcome, error) {
	hot := view == viewHidden && cred == c.org
	if hot {
		if wp := c.orgHidden.Load(); wp != nil {
			if pv := wp.Value(); pv != nil && now.Before(pv.entry.Expires) {
				return pv, cache.Hit, nil
			}
		}
	}
	pol := c.pol.Load()
	scope := ""
	if cred != nil {
		scope = cred.scope
	}
	key := cache.CatalogKey(c.network, scope, string(view))
	target := "/api/v1/discovery"
	if view == viewHidden {
		target += "?hidden=true"
	}
	calls := stateOf(ctx).counter()
	e, outcome, err := c.store.LoadFrom(fillContext(ctx), key, cache.Source{Check: c.check,
		Fill: func(ctx context.Context) (*cache.Entry, error) {
			return c.fill(ctx, calls, target, cred, pol)
		}})
	if err != nil {
		return nil, outcome, err
	}
	pv, ok := viewKind.Value(e)
	if !ok {
		return nil, outcome, errBadUpstream // every catalog fill sets its view
	}
	if hot {
		if wp := c.orgHidden.Load(); wp == nil || wp.Value() != pv {
			w := weak.Make(pv)
			c.orgHidden.Store(&w)
		}
	}
	return pv, outcome, nil
}

// fill fetches a catalog view and parses it.
func (c *catalogViews) fill(ctx context.Context, calls *callCount, target string, cred *credential, pol *policy) (*cache.Entry, error) {
	resp, err := c.up.fetch(ctx, calls, "discovery", target, cred, http.StatusOK)
	if err != nil {
		return nil, err
	}
	ttl := pol.catalogTTL
	if resp.maxAge > 0 && resp.maxAge < ttl {
		ttl = resp.maxAge
	}
	now := c.now()
	pv, err := parseView(resp.body)
	if err != nil {
		c.metrics.integrity(c.network, "discovery")
		return nil, errBadUpstream
	}
	// Refresh in the background from 80 % of the lifetime on, so that a
	// busy catalog never expires in front of a client.
	e := viewKind.With(&cache.Entry{Status: http.StatusOK, Body: resp.body, Stored: now,
		Expires: now.Add(ttl * 8 / 10), StaleUntil: now.Add(ttl + catalogStale)}, pv)
	pv.entry, pv.expires = e, now.Add(ttl)
	return e, nil
}

// known returns the set of the streams cred reaches, from its hidden
// catalog view (for the organisation's credential, the view held at hand
// while fresh). When the catalog cannot be had, it returns nil: every
// stream counts as known, and the upstream then decides, at the cost of
// one call, rather than every report being refused while the catalog is
// down.
func (c *catalogViews) known(ctx context.Context, cred *credential, now time.Time) map[string]struct{} {
	pv, _, err := c.view(ctx, viewHidden, cred, now)
	if err != nil {
		return nil
	}
	return pv.ids
}

// viewKind is the kind of a catalog entry: its value is the view parsed.
// A view costs, besides the body it was parsed from, each stream's JSON
// copied once more as raw, its decoded fields, and its ID in the set.
var viewKind = cache.Kind[*parsedView]{Cost: func(pv *parsedView, e *cache.Entry) int64 {
	return int64(2*len(e.Body) + 256*len(pv.streams))
}}

func parseView(body []byte) (*parsedView, error) {
	var doc struct {
		Feeds []json.RawMessage `json:"feeds"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, err
	}
	if doc.Feeds == nil {
		return nil, errors.New("proxy: catalog without feeds")
	}
	pv := &parsedView{raw: doc.Feeds, streams: make([]catalog.Indexed, len(doc.Feeds)), ids: make(map[string]struct{}, len(doc.Feeds))}
	for i, raw := range doc.Feeds {
		var s catalog.Stream
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, err
		}
		s.FeedID = feedid.Canon(s.FeedID)
		pv.streams[i] = catalog.NewIndexed(s)
		pv.ids[s.FeedID] = struct{}{}
	}
	return pv, nil
}

// serveDiscovery answers GET /api/v1/discovery from a cached view, filtered
// locally, restricted to the team's streams.
func (c *catalogViews) serveDiscovery(w http.ResponseWriter, r *http.Request, p *auth.Principal) {
	if len(r.URL.RawQuery) > catalog.MaxQueryBytes {
		writeCatalogError(w, http.StatusBadRequest, "query too long: a discovery query has at most "+strconv.Itoa(catalog.MaxQueryBytes)+" bytes")
		return
	}
	f, err := catalog.ParseFilter(r.URL.Query())
	if err != nil {
		writeCatalogError(w, http.StatusBadRequest, err.Error())
		return
	}
	view, cred := viewAnonymous, (*credential)(nil)
	if p != nil {
		view, cred = viewSigned, credentialFor(c.pol.Load(), c.network, c.org, p.Team.Name)
		if f.Hidden {
			view = viewHidden
		}
	}
	pv, outcome, err := c.view(r.Context(), view, cred, stateOf(r.Context()).clock(c.now))
	if err != nil {
		writeError(w, err)
		return
	}
	c.markCatalog(w, r, outcome, pv)
	out := make([]byte, 0, len(pv.entry.Body))
	out = append(out, `{"feeds":[`...)
	first := true
	for i := range pv.streams {
		x := &pv.streams[i]
		if !f.MatchIndexed(x) || (p != nil && !p.Team.MayRead(feedid.ID(x.Stream.FeedID))) {
			continue
		}
		if !first {
			out = append(out, ',')
		}
		first = false
		out = append(out, pv.raw[i]...)
	}
	out = append(out, "]}\n"...)
	c.writeCatalog(w, pv, out, p == nil)
}

// serveFeeds answers the older list GET /api/v1/feeds: the IDs of the
// team's streams, hidden ones only with hidden=true.
func (c *catalogViews) serveFeeds(w http.ResponseWriter, r *http.Request, p *auth.Principal) {
	var q query
	scanQuery(r.URL.RawQuery, &q)
	if err := q.malformed(); err != nil {
		writeError(w, err)
		return
	}
	hidden, err := catalog.ParseHidden(q.get("hidden"))
	if err != nil {
		writeCatalogError(w, http.StatusBadRequest, err.Error())
		return
	}
	view := viewSigned
	if hidden {
		view = viewHidden
	}
	pv, outcome, err := c.view(r.Context(), view, credentialFor(c.pol.Load(), c.network, c.org, p.Team.Name), stateOf(r.Context()).clock(c.now))
	if err != nil {
		writeError(w, err)
		return
	}
	c.markCatalog(w, r, outcome, pv)
	out := make([]byte, 0, 80*len(pv.streams)+16)
	out = append(out, `{"feeds":[`...)
	first := true
	for i := range pv.streams {
		id := pv.streams[i].Stream.FeedID
		if !p.Team.MayRead(feedid.ID(id)) {
			continue
		}
		if !first {
			out = append(out, ',')
		}
		first = false
		out = append(out, `{"feedID":"`...)
		out = append(out, id...)
		out = append(out, `"}`...)
	}
	out = append(out, "]}\n"...)
	c.writeCatalog(w, pv, out, false)
}

// markCatalog labels a catalog answer. A view being refreshed in the
// background while still inside its advertised lifetime is a HIT for the
// client; past its lifetime it is STALE, with a Warning saying whether the
// refresh failed (stale-if-error) or is under way.
func (c *catalogViews) markCatalog(w http.ResponseWriter, r *http.Request, outcome cache.Outcome, pv *parsedView) {
	stale := outcome == cache.StaleHit || outcome == cache.StaleError
	if stale && c.now().Before(pv.expires) {
		outcome, stale = cache.Hit, false
	}
	c.ans.markCache(stateOf(r.Context()), w.Header(), "catalog", outcome, pv.entry, c.now())
	if stale {
		warning := `110 - "Response is Stale"`
		if outcome == cache.StaleError || c.now().After(pv.expires.Add(time.Minute)) {
			warning = `111 - "Revalidation Failed"`
		}
		w.Header().Set("Warning", warning)
	}
}

// writeCatalog writes a catalog answer. Only the anonymous listing is the
// same for everyone and may be kept by a shared cache in front; a team's
// answer (its streams, hidden ones included) is private. Both vary with the
// authentication: the same URL signed or not gets another answer.
func (c *catalogViews) writeCatalog(w http.ResponseWriter, pv *parsedView, body []byte, public bool) {
	left := max(pv.expires.Sub(c.now()), 0)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	scope := "private, max-age="
	if public {
		scope = "public, max-age="
	}
	h.Set("Cache-Control", scope+strconv.Itoa(int(left/time.Second)))
	h.Set("Vary", "Authorization")
	w.WriteHeader(http.StatusOK)
	w.Write(body)
}

// writeCatalogError writes the catalog's error shape, with "message" too.
func writeCatalogError(w http.ResponseWriter, status int, msg string) {
	writeError(w, &apierror.Error{Status: status, Msg: msg})
}
