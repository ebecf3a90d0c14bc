package cache

import (
	"strconv"
	"strings"
)

// The kinds of entry. A key's kind is its first segment, so that the keys
// of different kinds never collide.
const (
	kindReport  = "report"  // a report at a timestamp, or "no data yet" for it
	kindLatest  = "latest"  // the latest report of a feed
	kindPage    = "page"    // a page of reports
	kindCatalog = "catalog" // one upstream view of the catalog
	kindBulk    = "bulk"    // an upstream bulk call in flight (coalesced, never stored)
	kindDecoded = "decoded" // the decoded view of another entry
)

// Keys have the form
//
//	kind/len:network/len:scope/len:feedID/timestamp
//
// with every string field prefixed by its length in decimal, so that no
// network, scope, feed or view name, whatever bytes it holds, can make two
// different requests share a key. scope is "" for entries fetched with the
// organisation's shared credential, or the name of the team whose own
// credential fetched them: entries of one team's scope are never found under
// another's. Each builder makes one allocation.

// ReportKey is the key of the report of feedID at timestamp ts.
func ReportKey(network, scope, feedID string, ts int64) string {
	var b strings.Builder
	b.Grow(len(kindReport) + 1 + fieldLen(network) + fieldLen(scope) + fieldLen(feedID) + intLen(ts))
	b.WriteString(kindReport)
	b.WriteByte('/')
	writeField(&b, network)
	writeField(&b, scope)
	writeField(&b, feedID)
	writeInt(&b, ts)
	return b.String()
}

// LatestKey is the key of the latest report of feedID.
func LatestKey(network, scope, feedID string) string {
	var b strings.Builder
	b.Grow(len(kindLatest) + 1 + fieldLen(network) + fieldLen(scope) + fieldLen(feedID))
	b.WriteString(kindLatest)
	b.WriteByte('/')
	writeField(&b, network)
	writeField(&b, scope)
	writeField(&b, feedID)
	return b.String()
}

// PageKey is the key of the page of limit reports of feedID from start.
func PageKey(network, scope, feedID string, start int64, limit int) string {
	var b strings.Builder
	b.Grow(len(kindPage) + 1 + fieldLen(network) + fieldLen(scope) + fieldLen(feedID) +
		intLen(start) + 1 + intLen(int64(limit)))
	b.WriteString(kindPage)
	b.WriteByte('/')
	writeField(&b, network)
	writeField(&b, scope)
	writeField(&b, feedID)
	writeInt(&b, start)
	b.WriteByte('/')
	writeInt(&b, int64(limit))
	return b.String()
}

// BulkKey is the key of one upstream bulk call for feedIDs (in the order
// given) at timestamp ts: identical calls in flight at once share it.
func BulkKey(network, scope string, ts int64, feedIDs []string) string {
	n := len(kindBulk) + 1 + fieldLen(network) + fieldLen(scope) + intLen(ts) + 1
	for _, f := range feedIDs {
		n += fieldLen(f)
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteString(kindBulk)
	b.WriteByte('/')
	writeField(&b, network)
	writeField(&b, scope)
	writeInt(&b, ts)
	b.WriteByte('/')
	for _, f := range feedIDs {
		writeField(&b, f)
	}
	return b.String()
}

// CatalogKey is the key of the catalog view named view (for example
// anonymous, authenticated, hidden) of network.
func CatalogKey(network, scope, view string) string {
	var b strings.Builder
	b.Grow(len(kindCatalog) + 1 + fieldLen(network) + fieldLen(scope) + fieldLen(view))
	b.WriteString(kindCatalog)
	b.WriteByte('/')
	writeField(&b, network)
	writeField(&b, scope)
	writeField(&b, view)
	return b.String()
}

// DecodedKey is the key of the decoded view of the entry held under key,
// stored at stored with a body of n bytes (so that a new entry under key,
// a refreshed latest say, never finds the view of the one before), made
// under the verification rules of epoch (don.Gate.Epoch: a reload gives
// new views).
func DecodedKey(key string, epoch uint64, stored int64, n int) string {
	var b strings.Builder
	b.Grow(len(kindDecoded) + 1 + fieldLen(key) + 3*21)
	b.WriteString(kindDecoded)
	b.WriteByte('/')
	writeField(&b, key)
	b.Write(strconv.AppendUint(nil, epoch, 10))
	b.WriteByte('/')
	writeInt(&b, stored)
	b.WriteByte('/')
	writeInt(&b, int64(n))
	return b.String()
}

// fieldLen is the length of s written by writeField: "len:s/".
func fieldLen(s string) int {
	return intLen(int64(len(s))) + 1 + len(s) + 1
}

func writeField(b *strings.Builder, s string) {
	writeInt(b, int64(len(s)))
	b.WriteByte(':')
	b.WriteString(s)
	b.WriteByte('/')
}

func writeInt(b *strings.Builder, v int64) {
	var buf [20]byte
	b.Write(strconv.AppendInt(buf[:0], v, 10))
}

// intLen is the number of bytes of v in decimal.
func intLen(v int64) int {
	n := 1
	u := uint64(v)
	if v < 0 {
		n++
		u = uint64(-(v + 1)) + 1 // -MinInt64 overflows; this does not
	}
	for u >= 10 {
		u /= 10
		n++
	}
	return n
}
