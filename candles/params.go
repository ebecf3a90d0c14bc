package candles

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"streamgate/archive"
	"streamgate/don"
	"streamgate/feedid"
)

// MaxBars is the most bars one request may span: from–to (cut at the
// bar in progress) at its resolution. A longer span is refused, before
// any read, with the bars it would take and this bound.
const MaxBars = 5000

// Resolution is a bar's size: its seconds and the name the client gave.
type Resolution struct {
	Seconds uint32
	Name    string
}

// resolutions are the names a client may give: TradingView's (minutes, 1D
// a UTC day) and the suffixed forms.
var resolutions = map[string]uint32{
	"1": 60, "5": 300, "15": 900, "30": 1800, "60": 3600, "240": 14400, "1D": 86400,
	"1m": 60, "5m": 300, "15m": 900, "30m": 1800, "1h": 3600, "4h": 14400, "1d": 86400,
	"D": 86400,
}

// ResolutionNames lists the accepted resolutions, for error texts and the
// documentation.
const ResolutionNames = "1, 5, 15, 30, 60, 240, 1D (minutes; 1D a UTC day) or 1m, 5m, 15m, 30m, 1h, 4h, 1d"

// ParseResolution reads a resolution.
func ParseResolution(s string) (Resolution, error) {
	sec, ok := resolutions[s]
	if !ok {
		return Resolution{}, fmt.Errorf("invalid resolution %q: one of %s is expected", s, ResolutionNames)
	}
	return Resolution{Seconds: sec, Name: s}, nil
}

// defaultFields are the default field of each schema: the benchmark price
// (V1 to V4, V10), the first of V6's five prices, V13's last traded price
// (its book's best bid and ask are fields of their own) and V14's mid.
var defaultFields = map[don.Schema]string{
	don.SchemaV1: "price", don.SchemaV2: "price", don.SchemaV3: "price", don.SchemaV4: "price",
	don.SchemaV5: "rate", don.SchemaV6: "price", don.SchemaV7: "exchangeRate", don.SchemaV8: "midPrice",
	don.SchemaV9: "navPerShare", don.SchemaV10: "price", don.SchemaV11: "mid", don.SchemaV12: "navPerShare",
	don.SchemaV13: "lastTradedPrice", don.SchemaV14: "midPrice",
}

// DefaultField returns the field bars of a schema's streams show unless
// the request names another, "" for a schema not decoded.
func DefaultField(s don.Schema) string { return defaultFields[s] }

// Fields returns the fields bars may be built of for a schema's streams:
// its scaled fields (18 decimals), in schema order.
func Fields(s don.Schema) []string { return archive.ScaledFields(s) }

// Request is a bars request, validated.
type Request struct {
	Stream     feedid.ID
	Schema     don.Schema
	Resolution Resolution
	From, To   uint32 // the bars whose open time is in [From, To]
	Field      string
	Precise    bool // values as exact decimal strings
}

// ParseRequest reads and validates the parameters of a bars request (get
// returns a query parameter, "" when absent) for stream: resolution, from
// and to (inclusive Unix seconds), field (optional: the schema's
// default), precise (optional: true or false). Its errors are texts for
// the client.
func ParseRequest(stream feedid.ID, get func(string) string) (Request, error) {
	rq := Request{Stream: stream}
	b, ok := feedid.Bytes(string(stream))
	if !ok {
		return rq, fmt.Errorf("invalid feedID")
	}
	rq.Schema = don.SchemaOf(b[:])
	names := Fields(rq.Schema)
	if len(names) == 0 {
		return rq, fmt.Errorf("feedID %s is of schema %s, whose reports streamgate does not decode: it has no bars", stream, rq.Schema)
	}
	r := get("resolution")
	if r == "" {
		return rq, fmt.Errorf("missing query parameter resolution: one of %s", ResolutionNames)
	}
	var err error
	if rq.Resolution, err = ParseResolution(r); err != nil {
		return rq, err
	}
	from, err := unixSeconds(get, "from")
	if err != nil {
		return rq, err
	}
	to, err := unixSeconds(get, "to")
	if err != nil {
		return rq, err
	}
	if from > to {
		return rq, fmt.Errorf("invalid span: from (%d) is after to (%d)", from, to)
	}
	rq.From, rq.To = from, to
	rq.Field = get("field")
	if rq.Field == "" {
		rq.Field = DefaultField(rq.Schema)
	} else if !slices.Contains(names, rq.Field) {
		return rq, fmt.Errorf("invalid field %q: the fields of schema %s are %s", rq.Field, rq.Schema, strings.Join(names, ", "))
	}
	switch p := get("precise"); p {
	case "", "false", "0":
	case "true", "1":
		rq.Precise = true
	default:
		return rq, fmt.Errorf("invalid precise %q: true or false is expected", p)
	}
	return rq, nil
}

func unixSeconds(get func(string) string, name string) (uint32, error) {
	v := get(name)
	if v == "" {
		return 0, fmt.Errorf("missing query parameter %s", name)
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil || n > math.MaxUint32 {
		return 0, fmt.Errorf("invalid %s: a Unix timestamp in seconds from 0 to %d is expected", name, uint32(math.MaxUint32))
	}
	return uint32(n), nil
}

// Span returns the open times of the first and last bar of rq at the
// time now (bars that have not opened yet are not asked for), and how
// many bars that is (0: none).
func (rq Request) Span(now int64) (first, last int64, n int) {
	res := int64(rq.Resolution.Seconds)
	first = (int64(rq.From) + res - 1) / res * res
	last = int64(rq.To) / res * res
	if now >= 0 {
		last = min(last, now/res*res)
	}
	if first > last {
		return first, last, 0
	}
	return first, last, int((last-first)/res) + 1
}

// CheckSpan refuses a request of more than MaxBars bars at now.
func (rq Request) CheckSpan(now int64) error {
	if _, _, n := rq.Span(now); n > MaxBars {
		return fmt.Errorf("invalid span: from %d to %d at resolution %s is %d bars, at most %d are served in one request",
			rq.From, rq.To, rq.Resolution.Name, n, MaxBars)
	}
	return nil
}
