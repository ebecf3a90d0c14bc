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

	"streamgate/feedid"
	"streamgate/internal/apierror"
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
			var q query
			scanQuery(tc.query, &q)
			got, err := q.feedIDs()
			if tc.bad {
				assertBadRequest(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, feedid.Strings(got))
		})
	}
}

func TestParseNumbers(t *testing.T) {
	for _, tc := range []struct {
		v  string
		ok bool
	}{{"1700000000", true}, {"1", true}, {"0", false}, {"-1", false}, {"+5", false}, {"1e9", false}, {"17000000000000", false}, {"", false}, {" 5", false}} {
		_, err := scanned(url.Values{"timestamp": {tc.v}}).timestamp("timestamp")
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
		got, err := scanned(url.Values{"limit": {tc.v}}).limit()
		if tc.ok {
			assert.NoError(t, err, tc.v)
			assert.Equal(t, tc.want, got)
		} else {
			assertBadRequest(t, err)
		}
	}
	n, err := scanned(url.Values{}).limit()
	assert.NoError(t, err)
	assert.Zero(t, n, "absent limit")
}

// scanned is the query of v, encoded and read by scanQuery.
func scanned(v url.Values) *query {
	var q query
	scanQuery(v.Encode(), &q)
	return &q
}

func assertBadRequest(t *testing.T, err error) {
	t.Helper()
	var ae *apierror.Error
	if assert.True(t, errors.As(err, &ae), "an apierror.Error, got %v", err) {
		assert.Equal(t, http.StatusBadRequest, ae.Status)
	}
}

// FuzzQuery is a differential test of scanQuery against url.ParseQuery
// (as URL.Query reads it, error ignored): every name either reading holds,
// and the names the endpoints read, get the same value and presence; a
// query read in place holds exactly the names url.ParseQuery finds. Then
// every validator: none panics, and what they accept is well-formed.
func FuzzQuery(f *testing.F) {
	f.Add("feedID=" + feedV3 + "&timestamp=1700000000")
	f.Add("feedIDs=" + feedV3 + "%2C" + feedV3 + "&timestamp=1&limit=5")
	f.Add("startTimestamp=99&limit=100000")
	f.Add("feedIDs=,,%2c&timestamp=-1")
	f.Add("a=1&&=2&a=3&b&c=%2C%2c&d=%zz")
	f.Add("x=%2C%41&limit=&limit=7")
	f.Add("a=1&b=2&c=3&d=4&e=5&f=6&g=7&h=8&i=9")
	f.Fuzz(func(t *testing.T, raw string) {
		want, perr := url.ParseQuery(raw)
		var q query
		scanQuery(raw, &q)
		if (q.malformed() != nil) != (perr != nil) {
			t.Fatalf("%q: malformed %v, url.ParseQuery's error %v", raw, q.malformed(), perr)
		}
		names := []string{"feedID", "feedIDs", "timestamp", "startTimestamp", "limit", "hidden", ""}
		for k := range want {
			names = append(names, k)
		}
		for i := range q.n {
			names = append(names, q.k[i])
		}
		for _, k := range names {
			if q.get(k) != want.Get(k) || q.has(k) != want.Has(k) {
				t.Fatalf("%q: %q is %q (present %v) scanned, %q (present %v) by url.ParseQuery",
					raw, k, q.get(k), q.has(k), want.Get(k), want.Has(k))
			}
		}
		if q.vals == nil && q.n != len(want) {
			t.Fatalf("%q read in place as %d names; url.ParseQuery: %v", raw, q.n, want)
		}
		if id, err := q.feedID("feedID"); err == nil {
			if !feedid.Valid(id) || string(id) != strings.ToLower(string(id)) {
				t.Fatalf("accepted %q", id)
			}
		}
		if ids, err := q.feedIDs(); err == nil {
			if len(ids) == 0 || len(ids) > maxBulkStreams {
				t.Fatalf("accepted %d ids", len(ids))
			}
			seen := map[feedid.ID]bool{}
			for _, id := range ids {
				if !feedid.Valid(id) || seen[id] {
					t.Fatalf("accepted %q twice or malformed", id)
				}
				seen[id] = true
			}
		}
		if ts, err := q.timestamp("timestamp"); err == nil && (ts <= 0 || ts > 1<<40) {
			t.Fatalf("accepted timestamp %d", ts)
		}
		if n, err := q.limit(); err == nil && (n < 0 || n > maxPageLimit) {
			t.Fatalf("accepted limit %d", n)
		}
	})
}

// The queries scanQuery reads in place give what url.ParseQuery gives;
// the others are left to it.
func TestScanQuery(t *testing.T) {
	id1, id2 := "0x"+strings.Repeat("a1", 32), "0x"+strings.Repeat("B2", 32)
	for _, tc := range []struct {
		raw     string
		inPlace bool
	}{
		{"feedID=" + id1, true},
		{"feedID=" + id1 + "&timestamp=1750000000", true},
		{"timestamp=1750000000&feedID=" + id1, true},
		{"feedID=" + id1 + "&feedID=" + id2, true}, // the first counts, as Get gives it
		{"feedID=%30x" + id1[2:], false},
		{"feedID=" + id1 + ";x=1", false},
		{"feedID", true},
		{"", true},
		{"a=1&&b=2", true},
		{"a=1&b=2&c=3&d=4&e=5&f=6&g=7&h=8&i=9", false},
		{"feedIDs=" + id1 + "%2C" + id2 + "&timestamp=1750000000", true},
		{"feedIDs=" + id1 + "%2c" + id2 + "&timestamp=1750000000", true},
		{"timestamp=1750000000&feedIDs=" + id1 + "," + id2, true},
		{"feedIDs=" + id1 + "%2C" + id2 + "%20&timestamp=1750000000", false},
		{"feedIDs=" + id1 + "+" + "&timestamp=1750000000", false},
		{"feedIDs=" + id1 + "&timestamp=1750000000&x=1", true},
		{"fee%64IDs=" + id1, false},
	} {
		var q query
		scanQuery(tc.raw, &q)
		assert.Equal(t, tc.inPlace, q.vals == nil, tc.raw)
		want, _ := url.ParseQuery(tc.raw)
		for _, k := range []string{"feedID", "feedIDs", "timestamp", "a", "b", "i", "x"} {
			assert.Equal(t, want.Get(k), q.get(k), "%s: %s", tc.raw, k)
			assert.Equal(t, want.Has(k), q.has(k), "%s: %s", tc.raw, k)
		}
	}
}

// A plain one-stream query is read without allocating.
func TestScanQueryInPlaceAllocatesNothing(t *testing.T) {
	raw := "feedID=" + feedV3 + "&timestamp=1750000000"
	allocs := testing.AllocsPerRun(100, func() {
		var q query
		scanQuery(raw, &q)
		var rq reportQuery
		if err := shapeReport.read(&q, &rq); err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, allocs)
}
