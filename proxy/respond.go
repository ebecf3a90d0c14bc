package proxy

import (
	"net/http"
	"strconv"
	"time"

	"streamgate/cache"
)

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
		left := max(e.Expires.Sub(n.now()), 0)
		h.Set("Cache-Control", "private, max-age="+strconv.Itoa(int(left/time.Second)))
	}
	writeRaw(w, e.Status, e.Body)
}

// answerStream answers latest from the newest report the stream delivered:
// the frame is exactly the {"report":…} body of the REST answer.
func (n *network) answerStream(w http.ResponseWriter, r *http.Request, frame []byte, observed int64) {
	n.metrics.cacheResult(n.name, "latest", "stream")
	n.metrics.saved(n.name, "latest")
	stateOf(r.Context()).cache = "STREAM"
	h := w.Header()
	h.Set("X-Cache", "STREAM")
	h.Set("Age", strconv.FormatInt(max(n.now().Unix()-observed, 0), 10))
	h.Set("Cache-Control", "private, max-age=0")
	h.Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(frame)
	w.Write(newline)
}

var newline = []byte("\n")

// markCache sets X-Cache and Age, counts the result, and notes it for the
// access log.
func (n *network) markCache(w http.ResponseWriter, r *http.Request, kind string, outcome cache.Outcome, e *cache.Entry) {
	label := cacheLabel(outcome)
	if e != nil && e.Status == http.StatusNotFound && outcome == cache.Hit {
		n.metrics.cacheResult(n.name, kind, "negative")
	} else {
		n.metrics.cacheResult(n.name, kind, lowerLabel(label))
	}
	if outcome != cache.Miss {
		n.metrics.saved(n.name, kind)
	}
	stateOf(r.Context()).cache = label
	h := w.Header()
	h.Set("X-Cache", label)
	if e != nil && !e.Stored.IsZero() {
		h.Set("Age", strconv.Itoa(int(max(n.now().Sub(e.Stored), 0)/time.Second)))
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
