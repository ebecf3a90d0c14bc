package proxy

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

const (
	// maxBulkStreams bounds the stream IDs of one bulk request.
	maxBulkStreams = 1000
	// maxPageLimit bounds limit on /reports/page.
	maxPageLimit = 10000
)

// validFeedID reports whether s is "0x" followed by 64 hex digits.
func validFeedID(s string) bool {
	if len(s) != 66 || s[0] != '0' || (s[1] != 'x' && s[1] != 'X') {
		return false
	}
	for i := 2; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// normalFeedID returns the canonical lower-case form of a valid stream ID.
func normalFeedID(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; 'A' <= c && c <= 'Z' {
			return strings.ToLower(s)
		}
	}
	return s
}

func parseFeedID(q url.Values, name string) (string, error) {
	return checkFeedID(name, q.Get(name))
}

// checkFeedID is parseFeedID of the value v of parameter name.
func checkFeedID(name, v string) (string, error) {
	if v == "" {
		return "", errorf(http.StatusBadRequest, "missing query parameter "+name)
	}
	if !validFeedID(v) {
		return "", errorf(http.StatusBadRequest, "invalid "+name+": a stream ID is 0x followed by 64 hex digits")
	}
	return normalFeedID(v), nil
}

// parseTimestamp reads a Unix timestamp in seconds.
func parseTimestamp(q url.Values, name string) (int64, error) {
	return checkTimestamp(name, q.Get(name))
}

// checkTimestamp is parseTimestamp of the value v of parameter name.
func checkTimestamp(name, v string) (int64, error) {
	if v == "" {
		return 0, errorf(http.StatusBadRequest, "missing query parameter "+name)
	}
	ts, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ts <= 0 || ts > 1<<40 || v[0] == '+' {
		return 0, errorf(http.StatusBadRequest, "invalid "+name+": a Unix timestamp in seconds is expected")
	}
	return ts, nil
}

// parseLimit reads the optional page size; 0 means absent.
func parseLimit(q url.Values) (int, error) {
	v, ok := q["limit"]
	if !ok {
		return 0, nil
	}
	n, err := strconv.Atoi(v[0])
	if err != nil || n <= 0 || n > maxPageLimit || v[0][0] == '+' {
		return 0, errorf(http.StatusBadRequest, "invalid limit: a whole number from 1 to "+strconv.Itoa(maxPageLimit)+" is expected")
	}
	return n, nil
}

// parseFeedIDs reads a bulk list. The query is already decoded, so a comma
// sent raw or as %2C arrives the same. Duplicates are dropped, order kept.
func parseFeedIDs(q url.Values) ([]string, error) {
	return checkFeedIDs(q.Get("feedIDs"))
}

// checkFeedIDs is parseFeedIDs of the value v of feedIDs, decoded.
func checkFeedIDs(v string) ([]string, error) {
	if v == "" {
		return nil, errorf(http.StatusBadRequest, "missing query parameter feedIDs")
	}
	n := strings.Count(v, ",") + 1
	if n > maxBulkStreams {
		return nil, errorf(http.StatusBadRequest, "too many stream IDs in feedIDs: at most "+strconv.Itoa(maxBulkStreams))
	}
	ids := make([]string, 0, n)
	var seen map[string]struct{} // for long lists; short ones are searched
	if n > 32 {
		seen = make(map[string]struct{}, n)
	}
	for part := range strings.SplitSeq(v, ",") {
		part = strings.TrimSpace(part)
		if !validFeedID(part) {
			return nil, errorf(http.StatusBadRequest, "invalid feedIDs: a comma-separated list of stream IDs (0x followed by 64 hex digits) is expected")
		}
		part = normalFeedID(part)
		if seen != nil {
			if _, dup := seen[part]; dup {
				continue
			}
			seen[part] = struct{}{}
		} else if slices.Contains(ids, part) {
			continue
		}
		ids = append(ids, part)
	}
	return ids, nil
}

// plainQuery is a raw query read without allocating: at most
// len(plainQuery.k) distinct parameters, each "name=value" with nothing
// escaped. Its values are what url.ParseQuery would give.
type plainQuery struct {
	n    int
	k, v [4]string
}

// readPlainQuery reads raw into q and reports whether raw is plain: no
// '%', '+' or ';', no empty or valueless part, no repeated name, and at
// most four parts. Any other query is for url.ParseQuery.
func readPlainQuery(raw string, q *plainQuery) bool {
	if raw == "" || strings.ContainsAny(raw, "%+;") {
		return false
	}
	for part := range strings.SplitSeq(raw, "&") {
		k, v, ok := strings.Cut(part, "=")
		if !ok || k == "" || q.n == len(q.k) {
			return false
		}
		for i := range q.n {
			if q.k[i] == k {
				return false
			}
		}
		q.k[q.n], q.v[q.n] = k, v
		q.n++
	}
	return true
}

// get returns the value of name, or "".
func (q *plainQuery) get(name string) string {
	for i := range q.n {
		if q.k[i] == name {
			return q.v[i]
		}
	}
	return ""
}
