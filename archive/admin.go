package archive

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"streamgate/feedid"
	"streamgate/internal/apierror"
)

// Admin serves the archive's operator endpoints on the admin listener:
//
//	POST /archive/fill?network=N&feedID=ID&from=T&to=T   202 {"fill":{…}}: a fill job queued (at most MaxFillDays)
//	GET  /archive/fills                                    200 {"fills":[…]}: every job and its progress
//	GET  /archive/export?network=N&feedID=ID&from=T&to=T&format=jsonl|csv
//
// T is unix seconds or an RFC 3339 time. Bad parameters are 400 JSON
// errors naming the bounds, before any work.
type Admin struct {
	Store    Store
	Filler   *Filler  // nil: no fills (the fill endpoints answer 503)
	Networks []string // the networks the gateway serves
	// Retention is the archive's retention; 0 keeps everything. A span
	// older than it is refused: it would be deleted, and is never served.
	Retention time.Duration
	Now       func() time.Time // nil: time.Now
}

// MaxFillDays bounds the span of one fill: [from, to] at most this many
// days long (to − from ≤ MaxFillDays × 86,400 s), whatever the retention
// (with retention 0 too, which keeps everything but would otherwise let a
// fill from 1970 ask the upstream for half a century of pages). 31 days
// cover the default retention (720h) in one fill: 26,784 pages of 100
// reports a stream, about an hour and a half at the fill share of a
// budget of 10 requests a second. A longer history is several fills,
// which run one after the other.
const MaxFillDays = 31

// Admin endpoints' paths.
const (
	PathFill   = "/archive/fill"
	PathFills  = "/archive/fills"
	PathExport = "/archive/export"
)

func (a *Admin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case PathFill:
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			apierror.Write(w, http.StatusMethodNotAllowed, "use POST to start a fill", 0)
			return
		}
		a.fill(w, r)
	case PathFills:
		a.fills(w, r)
	case PathExport:
		a.export(w, r)
	default:
		apierror.Write(w, http.StatusNotFound, "not found", 0)
	}
}

func (a *Admin) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

// span is what a fill or an export names.
type span struct {
	network  string
	stream   feedid.ID
	from, to uint32
}

// parseSpan reads network, feedID, from and to, refused with the reason.
func (a *Admin) parseSpan(r *http.Request) (span, error) {
	q := r.URL.Query()
	var s span
	s.network = q.Get("network")
	if !slices.Contains(a.Networks, s.network) {
		return s, fmt.Errorf("parameter network must be one of %s", strings.Join(a.Networks, ", "))
	}
	id, err := feedid.Parse(q.Get("feedID"))
	if err != nil {
		return s, errors.New("parameter feedID must be a stream ID (0x and 64 hex digits)")
	}
	s.stream = id
	now := a.now()
	if s.from, err = parseTime(q.Get("from"), "from"); err != nil {
		return s, err
	}
	if q.Get("to") == "" {
		s.to = uint32(now.Unix())
	} else if s.to, err = parseTime(q.Get("to"), "to"); err != nil {
		return s, err
	}
	if s.from > s.to {
		return s, fmt.Errorf("parameter from (%d) is after to (%d)", s.from, s.to)
	}
	if a.Retention > 0 {
		oldest := uint32(now.Add(-a.Retention).Unix())
		if s.from < oldest {
			return s, fmt.Errorf("parameter from (%d) is older than the archive's retention (%s): the oldest second kept is %d", s.from, a.Retention, oldest)
		}
	}
	return s, nil
}

// parseTime reads unix seconds or an RFC 3339 time.
func parseTime(v, name string) (uint32, error) {
	if v == "" {
		return 0, fmt.Errorf("missing parameter %s (unix seconds or RFC 3339)", name)
	}
	if n, err := strconv.ParseUint(v, 10, 32); err == nil {
		return uint32(n), nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil || t.Unix() < 0 || t.Unix() > 1<<32-1 {
		return 0, fmt.Errorf("parameter %s must be unix seconds or an RFC 3339 time", name)
	}
	return uint32(t.Unix()), nil
}

func (a *Admin) fill(w http.ResponseWriter, r *http.Request) {
	if a.Filler == nil {
		apierror.Write(w, http.StatusServiceUnavailable, "this gateway has no archive to fill", 0)
		return
	}
	s, err := a.parseSpan(r)
	if err == nil && uint64(s.to-s.from) > MaxFillDays*86400 {
		err = fmt.Errorf("the span from %d to %d is %.1f days long; a fill spans at most %d days (to - from <= %d seconds): split it into several fills",
			s.from, s.to, float64(s.to-s.from)/86400, MaxFillDays, MaxFillDays*86400)
	}
	if err != nil {
		apierror.Write(w, http.StatusBadRequest, err.Error(), 0)
		return
	}
	p, err := a.Filler.Submit(r.Context(), s.network, s.stream, s.from, s.to)
	if errors.Is(err, ErrFillSpan) {
		apierror.Write(w, http.StatusBadRequest, strings.TrimPrefix(err.Error(), "archive: fill: "), 0)
		return
	}
	if err != nil {
		apierror.Write(w, http.StatusServiceUnavailable, "the fill could not be stored: the archive is unavailable", 0)
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"fill": p})
}

func (a *Admin) fills(w http.ResponseWriter, _ *http.Request) {
	var out []FillProgress
	if a.Filler != nil {
		out = a.Filler.Progress()
	}
	if out == nil {
		out = []FillProgress{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"fills": out})
}

func (a *Admin) export(w http.ResponseWriter, r *http.Request) {
	s, err := a.parseSpan(r)
	if err != nil {
		apierror.Write(w, http.StatusBadRequest, err.Error(), 0)
		return
	}
	format := r.URL.Query().Get("format")
	switch format {
	case "", ExportJSONLines:
		format = ExportJSONLines
		w.Header().Set("Content-Type", "application/jsonl")
	case ExportCSV:
		w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	default:
		apierror.Write(w, http.StatusBadRequest, "parameter format must be jsonl or csv", 0)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="%s-%s-%d-%d.%s"`, s.network, s.stream, s.from, s.to, format))
	// Errors after the first byte cannot change the status: the answer is
	// cut short, and a reader of JSON lines or CSV sees a last line
	// without its end; the count of reports is in the trailer.
	w.Header().Set("Trailer", "X-Archive-Reports, X-Archive-Error")
	n, err := Export(r.Context(), a.Store, s.network, s.stream, s.from, s.to, format, w)
	w.Header().Set("X-Archive-Reports", strconv.Itoa(n))
	if err != nil {
		w.Header().Set("X-Archive-Error", "the archive could not be read to the end")
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		apierror.Write(w, http.StatusInternalServerError, "internal error", 0)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
