package proxy

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"time"

	"streamgate/auth"
	"streamgate/candles"
	"streamgate/config"
	"streamgate/feedid"
	"streamgate/internal/apierror"
)

// The bars endpoints, /api/v1/history and /api/v1/history/rows: a
// stream's open, high, low and close per bar, built by candles from the
// archive's rollups. They are signed, admitted and charged like every
// endpoint (the chain), and entitled like a report read (readCheck). The
// seconds of a request's bars the archive does not cover are filled from
// the upstream first (candles.QueryFilled: the archive fills' page path,
// Gateway.ArchivePages, at the fills' share of the budget, at most
// candles.MaxFillPages pages a request); what is not filled stays in
// "missing".

// historySource holds the network's bars source and its fill, set once
// the archive is open (Gateway.SetHistory); none: the endpoints answer
// 503.
type historySource struct {
	cur atomic.Pointer[historyState]
}

type historyState struct {
	src  candles.Source
	fill candles.Fill // the upstream's pages; its bounds candles' defaults
}

// SetHistory gives every network the archive its bars are read from (an
// archive store: both implement candles.FillStore, and the bars it lacks
// are filled into it from the upstream; a candles.Source alone is read
// and never filled); nil takes it away.
func (g *Gateway) SetHistory(src candles.Source) {
	pages := g.ArchivePages()
	for _, n := range g.networks {
		if src == nil {
			n.history.cur.Store(nil)
		} else {
			n.history.cur.Store(&historyState{src: src, fill: candles.Fill{Pages: pages}})
		}
	}
}

// ErrNoHistory is History's error while the gateway has no archive to read
// bars from (SetHistory).
var ErrNoHistory = errors.New("proxy: bars are served from the archive, which this gateway does not keep (yet)")

// ErrNoNetwork is History's error for a network the gateway does not
// serve.
var ErrNoNetwork = errors.New("proxy: no such network")

// History answers a bars request of network at now as /api/v1/history
// does, for the organisation (no team's entitlement is checked: the admin
// listener's chart): the bars the archive holds, after the fill of those
// it does not cover (within the same bounds), and what the fill did.
// network may be a stream partition's label (network@partition, sharing:
// credential): its bars, filled under its credential.
func (g *Gateway) History(ctx context.Context, network string, rq candles.Request, now time.Time) (candles.Result, candles.Filled, error) {
	name, part := config.SplitPartitionLabel(network)
	n := g.networks[name]
	if n == nil || n.partitionCred(part) == nil {
		return candles.Result{}, candles.Filled{}, ErrNoNetwork
	}
	return n.history.query(ctx, n.label(part), rq, now)
}

// query builds rq's bars from the source, filled when it is a store.
func (h *historySource) query(ctx context.Context, network string, rq candles.Request, now time.Time) (candles.Result, candles.Filled, error) {
	st := h.cur.Load()
	if st == nil {
		return candles.Result{}, candles.Filled{}, ErrNoHistory
	}
	if fs, ok := st.src.(candles.FillStore); ok {
		return candles.QueryFilled(ctx, fs, network, rq, now, st.fill)
	}
	res, err := candles.Query(ctx, st.src, network, rq, now)
	return res, candles.Filled{}, err
}

// StreamNames returns the catalog names of network's streams as the
// organisation's catalog view at hand has them (the one every report
// request consults), empty when none is at hand: it never calls the
// upstream.
func (g *Gateway) StreamNames(network string) map[feedid.ID]string {
	out := map[feedid.ID]string{}
	n := g.networks[network]
	if n == nil {
		return out
	}
	wp := n.catalog.orgHidden.Load()
	if wp == nil {
		return out
	}
	pv := wp.Value()
	if pv == nil {
		return out
	}
	for i := range pv.streams {
		s := &pv.streams[i].Stream
		if id, err := feedid.Parse(s.FeedID); err == nil && s.Name != "" {
			out[id] = s.Name
		}
	}
	return out
}

// historyEndpoint serves /api/v1/history (rows false) and
// /api/v1/history/rows.
type historyEndpoint struct {
	n    *network
	rows bool
}

var errNoArchive = apierror.New(http.StatusServiceUnavailable, "bars are served from the archive, which this gateway does not keep")

func (e historyEndpoint) serve(w http.ResponseWriter, r *http.Request, p *auth.Principal) {
	n := e.n
	var q query
	scanQuery(r.URL.RawQuery, &q)
	if err := q.malformed(); err != nil {
		writeError(w, err)
		return
	}
	feed, err := q.feedID("feedID")
	if err != nil {
		writeError(w, err)
		return
	}
	rq, err := candles.ParseRequest(feed, q.get)
	if err != nil {
		writeError(w, apierror.New(http.StatusBadRequest, err.Error()))
		return
	}
	now := stateOf(r.Context()).clock(n.now)
	if err := rq.CheckSpan(now.Unix()); err != nil {
		writeError(w, apierror.New(http.StatusBadRequest, err.Error()))
		return
	}
	name := "history"
	if e.rows {
		name = "history_rows"
	}
	cred := n.reads.credentialFor(p.Team.Name)
	if err := n.reads.entitled(r.Context(), p, cred, feed); err != nil {
		refuseEntitlement(w, r, err)
		return
	}
	n.reads.audit(r, p, name, feed)
	// The bars of the team's stream partition: with sharing: credential,
	// a team on a credential of its own reads what was fetched under it.
	res, _, err := n.history.query(r.Context(), n.label(cred.part), rq, now)
	if errors.Is(err, ErrNoHistory) {
		writeError(w, errNoArchive)
		return
	}
	if err != nil {
		writeError(w, apierror.New(http.StatusServiceUnavailable, "the archive could not be read; try again"))
		return
	}
	var body []byte
	if e.rows {
		body = candles.AppendRows(make([]byte, 0, 64+len(res.Bars)*128), &res, rq.Precise)
	} else {
		body = candles.AppendHistory(make([]byte, 0, 64+len(res.Bars)*128), &res, rq.Precise)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}
