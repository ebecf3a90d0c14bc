package cache

import (
	"strconv"
	"strings"
)

// Kind names a kind of entry; it is the first segment of every key, so that
// metrics can be labelled by kind (see KindOf) without labelling by key.
type Kind string

// The kinds of entry.
const (
	KindReport  Kind = "report"  // a report at a timestamp, or "no data yet" for it
	KindLatest  Kind = "latest"  // the latest report of a feed
	KindPage    Kind = "page"    // a page of reports
	KindCatalog Kind = "catalog" // one upstream view of the catalog
	KindBulk    Kind = "bulk"    // an upstream bulk call in flight (coalesced, never stored)
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
	b.Grow(len(KindReport) + 1 + fieldLen(network) + fieldLen(scope) + fieldLen(feedID) + intLen(ts))
	b.WriteString(string(KindReport))
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
	b.Grow(len(KindLatest) + 1 + fieldLen(network) + fieldLen(scope) + fieldLen(feedID))
	b.WriteString(string(KindLatest))
	b.WriteByte('/')
	writeField(&b, network)
	writeField(&b, scope)
	writeField(&b, feedID)
	return b.String()
}

// PageKey is the key of the page of limit reports of feedID from start.
func PageKey(network, scope, feedID string, start int64, limit int) string {
	var b strings.Builder
	b.Grow(len(KindPage) + 1 + fieldLen(network) + fieldLen(scope) + fieldLen(feedID) +
		intLen(start) + 1 + intLen(int64(limit)))
	b.WriteString(string(KindPage))
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
	n := len(KindBulk) + 1 + fieldLen(network) + fieldLen(scope) + intLen(ts) + 1
	for _, f := range feedIDs {
		n += fieldLen(f)
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteString(string(KindBulk))
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
	b.Grow(len(KindCatalog) + 1 + fieldLen(network) + fieldLen(scope) + fieldLen(view))
	b.WriteString(string(KindCatalog))
	b.WriteByte('/')
	writeField(&b, network)
	writeField(&b, scope)
	writeField(&b, view)
	return b.String()
}

// KindOf returns the kind of a key made by this package's builders, or ""
// for any other string.
func KindOf(key string) Kind {
	i := strings.IndexByte(key, '/')
	if i < 0 {
		return ""
	}
	switch k := Kind(key[:i]); k {
	case KindReport, KindLatest, KindPage, KindCatalog, KindBulk:
		return k
	}
	return ""
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
