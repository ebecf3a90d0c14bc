package proxy

import (
	"net/http"
	"sync/atomic"

	"streamgate/auth"
	"streamgate/candles"
	"streamgate/internal/apierror"
)

// The bars endpoints, /api/v1/history and /api/v1/history/rows: a
// stream's open, high, low and close per bar, built by candles from the
// archive's rollups. They are signed, admitted and charged like every
// endpoint (the chain), entitled like a report read (readCheck), and
// never call the upstream.

// historySource holds the network's bars source, set once the archive is
// open (Gateway.SetHistory); none: the endpoints answer 503.
type historySource struct {
	src atomic.Pointer[candles.Source]
}

// SetHistory gives every network the archive its bars are read from (an
// archive store: both implement candles.Source); nil takes it away.
func (g *Gateway) SetHistory(src candles.Source) {
	for _, n := range g.networks {
		if src == nil {
			n.history.src.Store(nil)
		} else {
			n.history.src.Store(&src)
		}
	}
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
	if err := n.reads.entitled(r.Context(), p, n.reads.credentialFor(p.Team.Name), feed); err != nil {
		refuseEntitlement(w, r, err)
		return
	}
	n.reads.audit(r, p, name, feed)
	src := n.history.src.Load()
	if src == nil {
		writeError(w, errNoArchive)
		return
	}
	res, err := candles.Query(r.Context(), *src, n.name, rq, now)
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
