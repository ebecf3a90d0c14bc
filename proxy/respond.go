package proxy

import (
	"net/http"
	"strings"
	"time"

	"streamgate/cache"
	"streamgate/don"
)

// answerer writes the answers of one network's report and catalog
// endpoints: the cache's headers (X-Cache, Age, Cache-Control), the
// cache result metrics, the raw body or its decoded view.
type answerer struct {
	network string
	gate    *don.Gate
	metrics *Metrics
	now     func() time.Time
	store   *cache.Store // keeps the decoded views; nil: made for each answer
}

// answer writes a cached or fetched entry (held under key), or the error
// that replaced it. Its header values are the request's own
// (answerRoom.setHeader): constant ones as they are, the seconds of Age and
// max-age written into the request's room.
func (a *answerer) answer(w http.ResponseWriter, r *http.Request, kind, key string, outcome cache.Outcome, e *cache.Entry, err error) {
	if err != nil {
		writeError(w, err)
		return
	}
	st := stateOf(r.Context())
	h := w.Header()
	var now time.Time
	if outcome == cache.Hit {
		now = st.clock(a.now) // the request's one reading
	} else {
		now = a.now() // the clock after the fill
	}
	a.markCache(st, h, kind, outcome, e, now)
	st.reports = reportsIn(kind, e.Status, e.Body)
	switch {
	case e.NoStore || e.Status != http.StatusOK && e.Expires.IsZero():
		st.room.setHeader(h, "Cache-Control", "no-store")
	case e.Expires.IsZero():
		st.room.setHeader(h, "Cache-Control", "private, max-age=86400, immutable")
	default:
		left := max(e.Expires.Sub(now), 0)
		st.room.setInt(h, "Cache-Control", "private, max-age=", int64(left/time.Second))
	}
	if e.Status == http.StatusOK && wantsDecoded(r) {
		if body, ok := a.decodedEntry(key, e, now); ok {
			writeDecoded(w, body, e.Status)
			return
		}
	}
	st.room.setHeader(h, "Content-Type", "application/json")
	w.WriteHeader(e.Status)
	w.Write(e.Body)
}

// wantsDecoded reports whether the client asked for the decoded view
// (Accept: application/vnd.streamgate.decoded+json). The raw answers, which
// the SDKs read, are untouched by it.
func wantsDecoded(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), don.DecodedMediaType)
}

// decodedBody returns the decoded view of a report answer body, made from
// the same entry as the raw answer (never another upstream call); each
// report's verification is the one recorded where it entered.
func (a *answerer) decodedBody(body []byte) ([]byte, bool) {
	out, err := don.DecodedBody(body, a.gate.Verification)
	return out, err == nil
}

// decodedEntry returns the decoded view of e, the entry held under key:
// from the cache when it was made before under the same verification
// rules, else made now and kept beside e for as long as e lives. Making
// it costs about forty times a raw hit (a page of 100 reports: decoding
// every field of every report); kept, a decoded hit costs about what a
// raw one does, and the view's bytes count against cache.max_bytes like
// any entry's.
func (a *answerer) decodedEntry(key string, e *cache.Entry, now time.Time) ([]byte, bool) {
	if a.store == nil {
		return a.decodedBody(e.Body)
	}
	dk := cache.DecodedKey(key, a.gate.Epoch(), e.Stored.UnixNano(), len(e.Body))
	if d, st := a.store.GetAt(dk, now); st != cache.Missing {
		return d.Body, true
	}
	body, ok := a.decodedBody(e.Body)
	if ok {
		a.store.Set(dk, &cache.Entry{Status: e.Status, Body: body, Stored: e.Stored,
			Expires: e.Expires, StaleUntil: e.StaleUntil, NoStore: e.NoStore})
	}
	return body, ok
}

// decodedRecord returns the decoded view of rec, the record of the report
// at a timestamp held under key (a bulk answer's), kept as decodedEntry
// keeps a whole body's (a stored time of -1 marks the record alone; a
// report at a timestamp never changes).
func (a *answerer) decodedRecord(key string, rec []byte) ([]byte, bool) {
	dk := cache.DecodedKey(key, a.gate.Epoch(), -1, len(rec))
	if a.store != nil {
		if d, st := a.store.Get(dk); st == cache.Fresh {
			return d.Body, true
		}
	}
	d, err := don.AppendDecodedRecord(nil, rec, a.gate.Verification)
	if err != nil {
		return nil, false
	}
	if a.store != nil {
		a.store.Set(dk, &cache.Entry{Status: http.StatusOK, Body: d, Stored: a.now()})
	}
	return d, true
}

// writeDecoded writes a decoded view.
func writeDecoded(w http.ResponseWriter, body []byte, status int) {
	h := w.Header()
	h.Set("Content-Type", don.DecodedMediaType)
	h.Set("Vary", "Accept")
	w.WriteHeader(status)
	w.Write(body)
}

// answerStream answers latest from the newest report the stream delivered:
// the frame is exactly the {"report":…} body of the REST answer.
func (a *answerer) answerStream(w http.ResponseWriter, r *http.Request, frame []byte, observed int64) {
	a.metrics.cacheResult(a.network, "latest", "stream")
	a.metrics.saved(a.network, "latest")
	st := stateOf(r.Context())
	st.cache = "STREAM"
	st.reports = 1
	h := w.Header()
	st.room.setHeader(h, "X-Cache", "STREAM")
	st.room.setInt(h, "Age", "", max(st.clock(a.now).Unix()-observed, 0))
	st.room.setHeader(h, "Cache-Control", "private, max-age=0")
	if wantsDecoded(r) {
		if body, ok := a.decodedBody(frame); ok {
			writeDecoded(w, body, http.StatusOK)
			return
		}
	}
	st.room.setHeader(h, "Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(frame)
	w.Write(newline)
}

var newline = []byte("\n")

// markCache sets X-Cache and Age, counts the result, and notes it for the
// access log.
func (a *answerer) markCache(st *reqState, h http.Header, kind string, outcome cache.Outcome, e *cache.Entry, now time.Time) {
	label := cacheLabel(outcome)
	if e != nil && e.Status == http.StatusNotFound && outcome == cache.Hit {
		a.metrics.cacheResult(a.network, kind, "negative")
	} else {
		a.metrics.cacheResult(a.network, kind, lowerLabel(label))
	}
	if outcome != cache.Miss {
		a.metrics.saved(a.network, kind)
	}
	st.cache = label
	st.room.setHeader(h, "X-Cache", label)
	if e != nil && !e.Stored.IsZero() {
		age := int64(max(now.Sub(e.Stored), 0) / time.Second)
		st.room.setInt(h, "Age", "", age)
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
