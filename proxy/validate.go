package proxy

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"streamgate/feedid"
	"streamgate/internal/apierror"
)

const (
	// maxBulkStreams bounds the stream IDs of one bulk request.
	maxBulkStreams = 1000
	// maxPageLimit bounds limit on /reports/page.
	maxPageLimit = 10000
)

// query is a request's query, read once by scanQuery: in place, without
// allocating, when it is plain, else by url.ParseQuery. get and has answer
// as url.Values' Get and Has do on what url.ParseQuery (as URL.Query,
// ignoring its error) gives; FuzzQuery holds the two readings equal.
type query struct {
	n    int
	k, v [8]string
	vals url.Values // the fallback's reading; nil when read in place
	err  error      // url.ParseQuery's error: the query is malformed
}

// scanQuery reads raw into q. A query is read in place when it has no
// '+' or ';', no '%' but the escaped commas "%2C" and "%2c" in a value, and
// at most len(q.k) distinct names; any other is read by url.ParseQuery.
// In place, as there, a part without '=' is a name with an empty value,
// an empty part is skipped, and the first value of a repeated name is the
// one get returns.
func scanQuery(raw string, q *query) {
	if strings.ContainsAny(raw, "+;") {
		q.fallback(raw)
		return
	}
	for rest := raw; rest != ""; {
		var part string
		part, rest, _ = strings.Cut(rest, "&")
		if part == "" {
			continue
		}
		k, v, _ := strings.Cut(part, "=")
		if strings.IndexByte(k, '%') >= 0 {
			q.fallback(raw)
			return
		}
		if esc := strings.Count(v, "%"); esc > 0 {
			if esc != strings.Count(v, "%2C")+strings.Count(v, "%2c") {
				q.fallback(raw) // another escape: url.ParseQuery decides (and may refuse it)
				return
			}
			v = strings.ReplaceAll(strings.ReplaceAll(v, "%2C", ","), "%2c", ",")
		}
		if q.index(k) >= 0 {
			continue // url.Values.Get gives the first
		}
		if q.n == len(q.k) {
			q.fallback(raw)
			return
		}
		q.k[q.n], q.v[q.n] = k, v
		q.n++
	}
}

func (q *query) fallback(raw string) {
	q.vals, q.err = url.ParseQuery(raw) // as URL.Query: what parsed before an error counts
	if q.vals == nil {
		q.vals = url.Values{}
	}
}

// malformed returns the 400 of a query url.ParseQuery refused (a bad
// escape such as %zz), nil for a well-formed one: named for what it is,
// not as the parameter it hid.
func (q *query) malformed() error {
	if q.err == nil {
		return nil
	}
	msg := q.err.Error()
	if u, ok := q.err.(url.EscapeError); ok {
		msg = "invalid escape " + strconv.Quote(string(u))
	}
	return apierror.New(http.StatusBadRequest, "malformed query: "+msg+" (a % must start an escape of two hex digits)")
}

func (q *query) index(name string) int {
	for i := range q.n {
		if q.k[i] == name {
			return i
		}
	}
	return -1
}

// get returns the first value of name, or "".
func (q *query) get(name string) string {
	if q.vals != nil {
		return q.vals.Get(name)
	}
	if i := q.index(name); i >= 0 {
		return q.v[i]
	}
	return ""
}

// has reports whether name is in the query.
func (q *query) has(name string) bool {
	if q.vals != nil {
		return q.vals.Has(name)
	}
	return q.index(name) >= 0
}

// feedID reads the stream ID of parameter name.
func (q *query) feedID(name string) (feedid.ID, error) {
	v := q.get(name)
	if v == "" {
		return "", apierror.New(http.StatusBadRequest, "missing query parameter "+name)
	}
	id, err := feedid.Parse(v)
	if err != nil {
		return "", apierror.New(http.StatusBadRequest, "invalid "+name+": a stream ID is 0x followed by 64 hex digits")
	}
	return id, nil
}

// timestamp reads the Unix timestamp in seconds of parameter name.
func (q *query) timestamp(name string) (int64, error) {
	v := q.get(name)
	if v == "" {
		return 0, apierror.New(http.StatusBadRequest, "missing query parameter "+name)
	}
	ts, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ts <= 0 || ts > 1<<40 || v[0] == '+' {
		return 0, apierror.New(http.StatusBadRequest, "invalid "+name+": a Unix timestamp in seconds is expected")
	}
	return ts, nil
}

// limit reads the optional page size; 0 means absent.
func (q *query) limit() (int, error) {
	if !q.has("limit") {
		return 0, nil
	}
	v := q.get("limit")
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 || n > maxPageLimit || v[0] == '+' {
		return 0, apierror.New(http.StatusBadRequest, "invalid limit: a whole number from 1 to "+strconv.Itoa(maxPageLimit)+" is expected")
	}
	return n, nil
}

// feedIDs reads a bulk list. The query is decoded, so a comma sent raw or
// as %2C arrives the same. Duplicates are dropped, order kept.
func (q *query) feedIDs() ([]feedid.ID, error) {
	v := q.get("feedIDs")
	if v == "" {
		return nil, apierror.New(http.StatusBadRequest, "missing query parameter feedIDs")
	}
	n := strings.Count(v, ",") + 1
	if n > maxBulkStreams {
		return nil, apierror.New(http.StatusBadRequest, "too many stream IDs in feedIDs: at most "+strconv.Itoa(maxBulkStreams))
	}
	ids := make([]feedid.ID, 0, n)
	var seen map[feedid.ID]struct{} // for long lists; short ones are searched
	if n > 32 {
		seen = make(map[feedid.ID]struct{}, n)
	}
	for part := range strings.SplitSeq(v, ",") {
		id, err := feedid.Parse(strings.TrimSpace(part))
		if err != nil {
			return nil, apierror.New(http.StatusBadRequest, "invalid feedIDs: a comma-separated list of stream IDs (0x followed by 64 hex digits) is expected")
		}
		if seen != nil {
			if _, dup := seen[id]; dup {
				continue
			}
			seen[id] = struct{}{}
		} else if slices.Contains(ids, id) {
			continue
		}
		ids = append(ids, id)
	}
	return ids, nil
}
