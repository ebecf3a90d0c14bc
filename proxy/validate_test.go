package proxy

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const feedV3 = "0x000359843a543ee2fe414dc14c7e7920ef10f4372990b79d6361cdc0dd1ba782"

func TestParseFeedIDs(t *testing.T) {
	upper := "0x000359843A543EE2FE414DC14C7E7920EF10F4372990B79D6361CDC0DD1BA782"
	other := "0x0007" + feedV3[6:]
	tests := []struct {
		name, query string
		want        []string
		bad         bool
	}{
		{"raw comma", "feedIDs=" + feedV3 + "," + other, []string{feedV3, other}, false},
		{"encoded comma", "feedIDs=" + feedV3 + "%2C" + other, []string{feedV3, other}, false},
		{"lower-case encoded comma", "feedIDs=" + feedV3 + "%2c" + other, []string{feedV3, other}, false},
		{"duplicates dropped, case folded, order kept", "feedIDs=" + other + "," + feedV3 + "," + upper, []string{other, feedV3}, false},
		{"spaces around items", "feedIDs=" + feedV3 + "%20,%20" + other, []string{feedV3, other}, false},
		{"missing", "timestamp=1", nil, true},
		{"empty item", "feedIDs=" + feedV3 + ",", nil, true},
		{"bad item", "feedIDs=" + feedV3 + ",0x1", nil, true},
		{"too many", "feedIDs=" + strings.Repeat(feedV3+",", maxBulkStreams) + feedV3, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q, err := url.ParseQuery(tc.query)
			require.NoError(t, err)
			got, err := parseFeedIDs(q)
			if tc.bad {
				assertBadRequest(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestParseNumbers(t *testing.T) {
	for _, tc := range []struct {
		v  string
		ok bool
	}{{"1700000000", true}, {"1", true}, {"0", false}, {"-1", false}, {"+5", false}, {"1e9", false}, {"17000000000000", false}, {"", false}, {" 5", false}} {
		_, err := parseTimestamp(url.Values{"timestamp": {tc.v}}, "timestamp")
		if tc.ok {
			assert.NoError(t, err, tc.v)
		} else {
			assertBadRequest(t, err)
		}
	}
	for _, tc := range []struct {
		v    string
		want int
		ok   bool
	}{{"10", 10, true}, {"1", 1, true}, {strconv.Itoa(maxPageLimit), maxPageLimit, true}, {strconv.Itoa(maxPageLimit + 1), 0, false}, {"0", 0, false}, {"-3", 0, false}, {"ten", 0, false}, {"", 0, false}} {
		got, err := parseLimit(url.Values{"limit": {tc.v}})
		if tc.ok {
			assert.NoError(t, err, tc.v)
			assert.Equal(t, tc.want, got)
		} else {
			assertBadRequest(t, err)
		}
	}
	n, err := parseLimit(url.Values{})
	assert.NoError(t, err)
	assert.Zero(t, n, "absent limit")
}

func assertBadRequest(t *testing.T, err error) {
	t.Helper()
	var ae *apiError
	if assert.True(t, errors.As(err, &ae), "an apiError, got %v", err) {
		assert.Equal(t, http.StatusBadRequest, ae.status)
	}
}

// FuzzQuery feeds raw query strings to every validator: none panics, and
// what they accept is well-formed.
func FuzzQuery(f *testing.F) {
	f.Add("feedID=" + feedV3 + "&timestamp=1700000000")
	f.Add("feedIDs=" + feedV3 + "%2C" + feedV3 + "&timestamp=1&limit=5")
	f.Add("startTimestamp=99&limit=100000")
	f.Add("feedIDs=,,%2c&timestamp=-1")
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		// The readers in place accept only what url.ParseQuery reads the
		// same way.
		var pq plainQuery
		if readPlainQuery(raw, &pq) {
			if err != nil || len(q) != pq.n {
				t.Fatalf("%q read in place as %d parameters; url.ParseQuery: %v, %v", raw, pq.n, q, err)
			}
			for k := range q {
				if q.Get(k) != pq.get(k) {
					t.Fatalf("%q: %s is %q in place, %q by url.ParseQuery", raw, k, pq.get(k), q.Get(k))
				}
			}
		}
		if ids, ts, ok := plainBulkQuery(raw); ok && (err != nil || q.Get("feedIDs") != ids || q.Get("timestamp") != ts) {
			t.Fatalf("%q: bulk read in place as %q, %q; url.ParseQuery: %v, %v", raw, ids, ts, q, err)
		}
		if err != nil {
			return
		}
		if id, err := parseFeedID(q, "feedID"); err == nil {
			if !validFeedID(id) || id != strings.ToLower(id) {
				t.Fatalf("accepted %q", id)
			}
		}
		if ids, err := parseFeedIDs(q); err == nil {
			if len(ids) == 0 || len(ids) > maxBulkStreams {
				t.Fatalf("accepted %d ids", len(ids))
			}
			seen := map[string]bool{}
			for _, id := range ids {
				if !validFeedID(id) || seen[id] {
					t.Fatalf("accepted %q twice or malformed", id)
				}
				seen[id] = true
			}
		}
		if ts, err := parseTimestamp(q, "timestamp"); err == nil && (ts <= 0 || ts > 1<<40) {
			t.Fatalf("accepted timestamp %d", ts)
		}
		if n, err := parseLimit(q); err == nil && (n < 0 || n > maxPageLimit) {
			t.Fatalf("accepted limit %d", n)
		}
	})
}

// The queries read in place give what url.ParseQuery gives, or are left
// to it.
func TestPlainQueries(t *testing.T) {
	id1, id2 := "0x"+strings.Repeat("a1", 32), "0x"+strings.Repeat("B2", 32)
	for _, raw := range []string{
		"feedID=" + id1,
		"feedID=" + id1 + "&timestamp=1750000000",
		"timestamp=1750000000&feedID=" + id1,
		"feedID=" + id1 + "&feedID=" + id2,
		"feedID=%30x" + id1[2:],
		"feedID=" + id1 + ";x=1",
		"feedID",
		"",
		"a=1&b=2&c=3&d=4&e=5",
	} {
		var q plainQuery
		if !readPlainQuery(raw, &q) {
			continue
		}
		want, err := url.ParseQuery(raw)
		require.NoError(t, err, raw)
		assert.Equal(t, len(want), q.n, raw)
		for k := range want {
			assert.Equal(t, want.Get(k), q.get(k), "%s: %s", raw, k)
		}
	}
	for _, tc := range []struct {
		raw   string
		plain bool
	}{
		{"feedIDs=" + id1 + "%2C" + id2 + "&timestamp=1750000000", true},
		{"feedIDs=" + id1 + "%2c" + id2 + "&timestamp=1750000000", true},
		{"timestamp=1750000000&feedIDs=" + id1 + "," + id2, true},
		{"feedIDs=" + id1 + "%2C" + id2 + "%20&timestamp=1750000000", false},
		{"feedIDs=" + id1 + "+" + "&timestamp=1750000000", false},
		{"feedIDs=" + id1 + "&timestamp=1750000000&x=1", false},
		{"feedIDs=" + id1 + "&feedIDs=" + id2, false},
		{"feedIDs=" + id1, false},
	} {
		ids, ts, ok := plainBulkQuery(tc.raw)
		assert.Equal(t, tc.plain, ok, tc.raw)
		if ok {
			want, err := url.ParseQuery(tc.raw)
			require.NoError(t, err)
			assert.Equal(t, want.Get("feedIDs"), ids, tc.raw)
			assert.Equal(t, want.Get("timestamp"), ts, tc.raw)
		}
	}
}
