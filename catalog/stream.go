// Package catalog holds the stream record of the Data Streams catalog and the
// filters of its discovery endpoint.
//
// The model: a catalog is a list of Stream records; a Filter, parsed once
// from the query of GET /api/v1/discovery, keeps the records it matches.
// The simulator answers the discovery endpoint with this code and the gateway
// filters its cached copy of the upstream catalog with the very same code, so
// both always agree on what a query selects.
//
// Hidden streams are not a property of the record (the real API has no such
// field): which hidden streams a caller may see is decided by whoever holds
// the list, from the caller's credentials and Filter.Hidden.
package catalog

// Stream is one stream record of the catalog. The JSON
// names and order are those of the real API; a null date is a nil pointer.
type Stream struct {
	FeedID                 string  `json:"feedId"`
	Name                   string  `json:"name"`
	AssetName              string  `json:"assetName"`
	BaseAsset              string  `json:"baseAsset"`
	QuoteAsset             string  `json:"quoteAsset"`
	AssetClass             string  `json:"assetClass"`
	FeedType               string  `json:"feedType"`
	AttributeType          string  `json:"attributeType"`
	MarketHours            string  `json:"marketHours"`
	SchemaVersion          string  `json:"schemaVersion"`
	ServiceLevel           string  `json:"serviceLevel"`
	NetworkType            string  `json:"networkType"`
	Status                 string  `json:"status"`
	CreatedAt              string  `json:"createdAt"`
	ExpectedDecommissionAt *string `json:"expectedDecommissionAt"`
	DecommissionedAt       *string `json:"decommissionedAt"`
}

// FeedsResponse is the body of GET /api/v1/discovery: {"feeds": [...]}.
// Feeds is never nil in a response: an empty result is [].
type FeedsResponse struct {
	Feeds []Stream `json:"feeds"`
}

// FeedRef is an entry of the older list GET /api/v1/feeds. Note the JSON
// name feedID, spelt differently from Stream's feedId.
type FeedRef struct {
	FeedID string `json:"feedID"`
}

// FeedRefsResponse is the body of GET /api/v1/feeds: {"feeds":[{"feedID":"0x..."}]}.
type FeedRefsResponse struct {
	Feeds []FeedRef `json:"feeds"`
}

// Values of the status field.
const (
	StatusLive    = "live"
	StatusTesting = "testing"
)
