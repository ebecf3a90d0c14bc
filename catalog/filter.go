package catalog

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// ErrBadFilter is wrapped by every error of ParseFilter and ParseHidden. The
// wrapping error's message names the parameter and the expected form; it is
// meant to be sent to the client as the body of a 400 response.
var ErrBadFilter = errors.New("invalid filter")

// The string-list parameters of the discovery endpoint, in the order of
// Filter's lists.
var listParams = [numLists]string{
	"base_asset", "quote_asset", "asset_class", "feed_type",
	"attribute_type", "status", "network_type",
}

const (
	listBaseAsset = iota
	listQuoteAsset
	listAssetClass
	listFeedType
	listAttributeType
	listStatus
	listNetworkType
	numLists
)

// The date parameters, in the order of Filter's dates: for each date field
// of a stream, the "after" then the "before" bound.
var dateParams = [numDates]string{
	"created_after", "created_before",
	"expected_decommission_after", "expected_decommission_before",
	"decommissioned_after", "decommissioned_before",
}

const (
	fieldCreated = iota
	fieldExpectedDecommission
	fieldDecommissioned
	numDateFields
	numDates = 2 * numDateFields
)

// DateLayout is the form of a date filter's value.
const DateLayout = "2006-01-02"

// maxQuoted bounds how much of a bad value an error message repeats.
const maxQuoted = 40

// Bounds of a discovery query: MaxQueryBytes of raw query (checked by the
// server, before the query is parsed) and MaxListItems list items in all
// parameters together. The catalog has a few hundred streams and a handful
// of values per field, so real filters stay far below both.
const (
	MaxQueryBytes = 4096
	MaxListItems  = 64
)

// Filter is a parsed query of the discovery endpoint. Its zero value
// restricts nothing and asks for no hidden streams. A Filter is immutable
// once parsed and safe for concurrent use.
type Filter struct {
	// Hidden is the hidden parameter: the caller asks to see, besides the
	// public streams, the hidden streams its credentials are entitled to.
	// Match does not look at it: the holder of the list decides which
	// hidden streams take part.
	Hidden bool

	lists [numLists][]string // values as given, trimmed, deduplicated case-insensitively
	dates [numDates]dateBound
}

type dateBound struct {
	set   bool
	date  time.Time // the date given, 00:00 UTC
	bound time.Time // after: date+1 day, inclusive; before: date, exclusive
}

// ParseFilter parses the query of a discovery request. Rules:
//
//   - base_asset, quote_asset, asset_class, feed_type, attribute_type,
//     status and network_type are comma-delimited lists; a stream matches
//     when its field equals any item, compared case-insensitively. Items are
//     trimmed of spaces and empty items dropped, so an empty value restricts
//     nothing. A repeated parameter adds its items to the list.
//   - hidden is a boolean in any form strconv.ParseBool accepts, in any
//     case; empty means false. Anything else is an error.
//   - created_after/_before, expected_decommission_after/_before and
//     decommissioned_after/_before take a plain date YYYY-MM-DD (anything
//     else is an error; an empty value restricts nothing). The comparison is
//     strict and in UTC: x_after=D selects instants from D+1 00:00 on,
//     x_before=D selects instants before D 00:00. A stream whose field is
//     null never matches a filter on that field.
//   - Different parameters combine with AND; unknown parameters are ignored.
//
// Of a repeated hidden or date parameter only the first value counts.
// Errors wrap ErrBadFilter.
func ParseFilter(q url.Values) (Filter, error) {
	var f Filter
	items := 0
	for i, name := range listParams {
		var ok bool
		if f.lists[i], ok = parseList(q[name], &items); !ok {
			return Filter{}, fmt.Errorf("%w: too many filter values: at most %d list items in all parameters together", ErrBadFilter, MaxListItems)
		}
	}
	h, err := ParseHidden(q.Get("hidden"))
	if err != nil {
		return Filter{}, err
	}
	f.Hidden = h
	for i, name := range dateParams {
		v := q.Get(name)
		if v == "" {
			continue
		}
		d, ok := parseDate(v)
		if !ok {
			return Filter{}, fmt.Errorf("%w: parameter %s must be a date in the form YYYY-MM-DD, got %s", ErrBadFilter, name, quote(v))
		}
		b := dateBound{set: true, date: d, bound: d}
		if i%2 == 0 { // after
			b.bound = d.AddDate(0, 0, 1)
		}
		f.dates[i] = b
	}
	return f, nil
}

// ParseHidden parses the value of the hidden parameter: any form that
// strconv.ParseBool accepts, in any case; empty is false. Errors wrap
// ErrBadFilter.
func ParseHidden(v string) (bool, error) {
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(strings.ToLower(v))
	if err != nil {
		return false, fmt.Errorf("%w: parameter hidden must be a boolean (true or false), got %s", ErrBadFilter, quote(v))
	}
	return b, nil
}

// parseList splits and deduplicates the values of one list parameter,
// counting its items into *items. It stops and reports false at the first
// item past MaxListItems, so the work is linear in the query's length (the
// duplicate scan is over at most MaxListItems items).
func parseList(vals []string, items *int) ([]string, bool) {
	var out []string
	for _, v := range vals {
		for item := range strings.SplitSeq(v, ",") {
			item = strings.TrimSpace(item)
			if item == "" {
				continue
			}
			if *items++; *items > MaxListItems {
				return nil, false
			}
			if !containsFold(out, item) {
				out = append(out, item)
			}
		}
	}
	return out, true
}

// parseDate accepts exactly YYYY-MM-DD with a valid day.
func parseDate(v string) (time.Time, bool) {
	if len(v) != len(DateLayout) {
		return time.Time{}, false
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if i == 4 || i == 7 {
			if c != '-' {
				return time.Time{}, false
			}
		} else if c < '0' || c > '9' {
			return time.Time{}, false
		}
	}
	d, err := time.Parse(DateLayout, v)
	if err != nil {
		return time.Time{}, false
	}
	return d, true
}

func quote(v string) string {
	if len(v) > maxQuoted {
		v = v[:maxQuoted] + "..."
	}
	return strconv.Quote(v)
}

func containsFold(list []string, v string) bool {
	for _, w := range list {
		if strings.EqualFold(w, v) {
			return true
		}
	}
	return false
}

// Values returns f as a canonical query: parsing it again gives a Filter
// equal to f. Parameters that restrict nothing are left out.
func (f Filter) Values() url.Values {
	q := url.Values{}
	for i, name := range listParams {
		if len(f.lists[i]) > 0 {
			q.Set(name, strings.Join(f.lists[i], ","))
		}
	}
	if f.Hidden {
		q.Set("hidden", "true")
	}
	for i, name := range dateParams {
		if f.dates[i].set {
			q.Set(name, f.dates[i].date.Format(DateLayout))
		}
	}
	return q
}

// Match reports whether s passes every restriction of f. It parses the
// dates of s only for the date filters that are set; a date field that is
// null or not RFC 3339 never matches such a filter. MatchIndexed is the
// faster form for a list matched many times.
func (f Filter) Match(s *Stream) bool {
	if !f.matchLists(s) {
		return false
	}
	for field := range numDateFields {
		after, before := &f.dates[2*field], &f.dates[2*field+1]
		if !after.set && !before.set {
			continue
		}
		t, ok := parseStamp(dateField(s, field))
		if !ok || !inBounds(t, after, before) {
			return false
		}
	}
	return true
}

// MatchIndexed is Match on a stream whose dates were parsed beforehand.
func (f Filter) MatchIndexed(x *Indexed) bool { return f.matchIndexed(x) }

func (f *Filter) matchIndexed(x *Indexed) bool {
	if !f.matchLists(&x.Stream) {
		return false
	}
	for field := range numDateFields {
		after, before := &f.dates[2*field], &f.dates[2*field+1]
		if !after.set && !before.set {
			continue
		}
		if !x.has[field] || !inBounds(x.times[field], after, before) {
			return false
		}
	}
	return true
}

func (f *Filter) matchLists(s *Stream) bool {
	for i := range numLists {
		list := f.lists[i]
		if len(list) > 0 && !containsFold(list, listField(s, i)) {
			return false
		}
	}
	return true
}

func inBounds(t time.Time, after, before *dateBound) bool {
	if after.set && t.Before(after.bound) {
		return false
	}
	if before.set && !t.Before(before.bound) {
		return false
	}
	return true
}

func listField(s *Stream, i int) string {
	switch i {
	case listBaseAsset:
		return s.BaseAsset
	case listQuoteAsset:
		return s.QuoteAsset
	case listAssetClass:
		return s.AssetClass
	case listFeedType:
		return s.FeedType
	case listAttributeType:
		return s.AttributeType
	case listStatus:
		return s.Status
	default:
		return s.NetworkType
	}
}

func dateField(s *Stream, field int) *string {
	switch field {
	case fieldCreated:
		return &s.CreatedAt
	case fieldExpectedDecommission:
		return s.ExpectedDecommissionAt
	default:
		return s.DecommissionedAt
	}
}

func parseStamp(p *string) (time.Time, bool) {
	if p == nil {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339, *p)
	if err != nil {
		return time.Time{}, false
	}
	return t, true
}

// Indexed is a Stream with its dates parsed once, for lists that are
// matched many times (a cached catalog, the simulator's streams).
type Indexed struct {
	Stream Stream
	times  [numDateFields]time.Time
	has    [numDateFields]bool // false: null or not RFC 3339
}

// NewIndexed parses the dates of s.
func NewIndexed(s Stream) Indexed {
	x := Indexed{Stream: s}
	for field := range numDateFields {
		x.times[field], x.has[field] = parseStamp(dateField(&x.Stream, field))
	}
	return x
}

// Index returns the streams indexed, in the same order.
func Index(streams []Stream) []Indexed {
	out := make([]Indexed, len(streams))
	for i := range streams {
		out[i] = NewIndexed(streams[i])
	}
	return out
}

// Select returns the streams of xs that f matches, in order. The result is
// never nil, so that it encodes as [] when empty.
func (f Filter) Select(xs []Indexed) []Stream {
	out := make([]Stream, 0, len(xs))
	for i := range xs {
		if f.matchIndexed(&xs[i]) {
			out = append(out, xs[i].Stream)
		}
	}
	return out
}
