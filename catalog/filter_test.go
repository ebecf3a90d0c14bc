package catalog

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func ptr(s string) *string { return &s }

// sample returns a small catalog with every kind of date field.
func sample() []Stream {
	return []Stream{
		{FeedID: "0x01", Name: "ETH/USD", BaseAsset: "ETH", QuoteAsset: "USD", AssetClass: "Crypto", FeedType: "Crypto",
			AttributeType: "CexPrice", SchemaVersion: "V3", NetworkType: "mainnet", Status: "live",
			CreatedAt: "2023-03-05T23:59:59Z"},
		{FeedID: "0x02", Name: "BTC/USD", BaseAsset: "BTC", QuoteAsset: "USD", AssetClass: "Crypto", FeedType: "Crypto",
			AttributeType: "CexPrice", SchemaVersion: "V3", NetworkType: "mainnet", Status: "testing",
			CreatedAt: "2023-03-06T00:00:00Z", ExpectedDecommissionAt: ptr("2027-01-01T00:00:00Z")},
		{FeedID: "0x03", Name: "AAPL/USD", BaseAsset: "AAPL", QuoteAsset: "USD", AssetClass: "Equities", FeedType: "Equities",
			AttributeType: "RegularHoursEquityPrice", SchemaVersion: "V11", NetworkType: "testnet", Status: "live",
			CreatedAt:              "2023-03-06T01:00:00+02:00", // 2023-03-05T23:00:00Z
			ExpectedDecommissionAt: ptr("2024-06-30T00:00:00Z"), DecommissionedAt: ptr("2024-06-30T12:00:00Z")},
		{FeedID: "0x04", Name: "EUR/USD", BaseAsset: "EUR", QuoteAsset: "USD", AssetClass: "Forex", FeedType: "Forex",
			AttributeType: "ForexPrice", SchemaVersion: "V11", NetworkType: "mainnet", Status: "live",
			CreatedAt: "not a date"},
	}
}

func TestParseFilterErrors(t *testing.T) {
	tests := []struct {
		name, query, param string
	}{
		{"hidden not a boolean", "hidden=yes", "hidden"},
		{"hidden with spaces", "hidden=%20true", "hidden"},
		{"date with time", "created_after=2024-01-01T00:00:00Z", "created_after"},
		{"date short month", "created_before=2024-1-01", "created_before"},
		{"date day out of range", "expected_decommission_after=2024-02-30", "expected_decommission_after"},
		{"date month out of range", "expected_decommission_before=2024-13-01", "expected_decommission_before"},
		{"date slashes", "decommissioned_after=2024/01/01", "decommissioned_after"},
		{"date words", "decommissioned_before=yesterday", "decommissioned_before"},
		{"date signed year", "created_after=+024-01-01", "created_after"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q, err := url.ParseQuery(tc.query)
			require.NoError(t, err)
			_, err = ParseFilter(q)
			require.ErrorIs(t, err, ErrBadFilter)
			assert.Contains(t, err.Error(), tc.param)
			if strings.HasSuffix(tc.param, "hidden") {
				assert.Contains(t, err.Error(), "boolean")
			} else {
				assert.Contains(t, err.Error(), "YYYY-MM-DD")
			}
		})
	}
}

func TestParseHidden(t *testing.T) {
	for v, want := range map[string]bool{
		"": false, "true": true, "TRUE": true, "True": true, "tRuE": true, "t": true, "T": true, "1": true,
		"false": false, "FALSE": false, "fAlSe": false, "f": false, "0": false,
	} {
		got, err := ParseHidden(v)
		require.NoError(t, err, v)
		assert.Equal(t, want, got, v)
	}
	for _, v := range []string{"yes", "no", "2", "on", " true", "truee"} {
		_, err := ParseHidden(v)
		assert.ErrorIs(t, err, ErrBadFilter, v)
	}
}

func TestMatch(t *testing.T) {
	streams := sample()
	tests := []struct {
		name  string
		query string
		want  []string // feed IDs
	}{
		{"no filter", "", []string{"0x01", "0x02", "0x03", "0x04"}},
		{"unknown parameter ignored", "colour=red&feedID=0x01", []string{"0x01", "0x02", "0x03", "0x04"}},
		{"empty value restricts nothing", "base_asset=&status=", []string{"0x01", "0x02", "0x03", "0x04"}},
		{"only commas restrict nothing", "base_asset=,,", []string{"0x01", "0x02", "0x03", "0x04"}},
		{"one value", "base_asset=ETH", []string{"0x01"}},
		{"case-insensitive", "base_asset=eth", []string{"0x01"}},
		{"list matches any", "base_asset=eth,Btc", []string{"0x01", "0x02"}},
		{"list items trimmed", "base_asset=eth%2C%20btc%20", []string{"0x01", "0x02"}},
		{"repeated parameter adds", "base_asset=eth&base_asset=aapl", []string{"0x01", "0x03"}},
		{"misspelt value matches nothing", "base_asset=ETHH", nil},
		{"quote_asset", "quote_asset=usd", []string{"0x01", "0x02", "0x03", "0x04"}},
		{"asset_class", "asset_class=equities,FOREX", []string{"0x03", "0x04"}},
		{"asset_class with space in value", "asset_class=Tokenized%20Asset", nil},
		{"feed_type", "feed_type=crypto", []string{"0x01", "0x02"}},
		{"attribute_type", "attribute_type=regularhoursequityprice", []string{"0x03"}},
		{"status", "status=TESTING", []string{"0x02"}},
		{"network_type", "network_type=testnet", []string{"0x03"}},
		{"parameters combine with AND", "asset_class=crypto&status=live", []string{"0x01"}},
		{"AND that matches nothing", "asset_class=equities&status=testing", nil},
		// created: 0x01 2023-03-05T23:59:59Z, 0x02 2023-03-06T00:00:00Z,
		// 0x03 2023-03-05T23:00:00Z (given at +02:00), 0x04 malformed.
		{"created_after excludes the date itself", "created_after=2023-03-05", []string{"0x02"}},
		{"created_after the day before", "created_after=2023-03-04", []string{"0x01", "0x02", "0x03"}},
		{"created_before excludes the date itself", "created_before=2023-03-06", []string{"0x01", "0x03"}},
		{"created_before the date", "created_before=2023-03-05", nil},
		{"created window", "created_after=2023-03-04&created_before=2023-03-06", []string{"0x01", "0x03"}},
		{"empty date restricts nothing", "created_after=", []string{"0x01", "0x02", "0x03", "0x04"}},
		{"expected_decommission_after skips null", "expected_decommission_after=2020-01-01", []string{"0x02", "0x03"}},
		{"expected_decommission_after strict", "expected_decommission_after=2026-12-31", []string{"0x02"}},
		{"expected_decommission_after on the day", "expected_decommission_after=2027-01-01", nil},
		{"expected_decommission_before", "expected_decommission_before=2024-07-01", []string{"0x03"}},
		{"expected_decommission_before on the day", "expected_decommission_before=2024-06-30", nil},
		{"decommissioned_after skips null", "decommissioned_after=2024-06-29", []string{"0x03"}},
		{"decommissioned_after on the day", "decommissioned_after=2024-06-30", nil},
		{"decommissioned_before", "decommissioned_before=2024-07-01", []string{"0x03"}},
		{"decommissioned_before on the day", "decommissioned_before=2024-06-30", nil},
		{"hidden does not change matching", "hidden=true", []string{"0x01", "0x02", "0x03", "0x04"}},
	}
	indexed := Index(streams)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q, err := url.ParseQuery(tc.query)
			require.NoError(t, err)
			f, err := ParseFilter(q)
			require.NoError(t, err)

			var got []string
			for i := range streams {
				m := f.Match(&streams[i])
				assert.Equal(t, m, f.MatchIndexed(&indexed[i]), "Match and MatchIndexed differ on %s", streams[i].FeedID)
				if m {
					got = append(got, streams[i].FeedID)
				}
			}
			assert.Equal(t, tc.want, got)

			sel := f.Select(indexed)
			require.NotNil(t, sel)
			assert.Len(t, sel, len(tc.want))
		})
	}
}

func TestParseFilterHidden(t *testing.T) {
	f, err := ParseFilter(url.Values{"hidden": {"True"}})
	require.NoError(t, err)
	assert.True(t, f.Hidden)
	f, err = ParseFilter(url.Values{"hidden": {""}})
	require.NoError(t, err)
	assert.False(t, f.Hidden)
	var zero Filter
	assert.False(t, zero.Hidden)
	assert.True(t, zero.Match(&Stream{}), "the zero Filter matches everything")
}

func TestValuesRoundTrip(t *testing.T) {
	q, err := url.ParseQuery("base_asset=eth,ETH,btc&status=live&hidden=1&created_after=2023-01-02&decommissioned_before=2025-12-31&junk=1")
	require.NoError(t, err)
	f, err := ParseFilter(q)
	require.NoError(t, err)
	v := f.Values()
	assert.Equal(t, url.Values{
		"base_asset":            {"eth,btc"},
		"status":                {"live"},
		"hidden":                {"true"},
		"created_after":         {"2023-01-02"},
		"decommissioned_before": {"2025-12-31"},
	}, v)
	g, err := ParseFilter(v)
	require.NoError(t, err)
	assert.Equal(t, f, g)
}

func TestStreamJSON(t *testing.T) {
	s := sample()[2]
	b, err := json.Marshal(s)
	require.NoError(t, err)
	assert.JSONEq(t, `{"feedId":"0x03","name":"AAPL/USD","assetName":"","baseAsset":"AAPL","quoteAsset":"USD",
		"assetClass":"Equities","feedType":"Equities","attributeType":"RegularHoursEquityPrice","marketHours":"",
		"schemaVersion":"V11","serviceLevel":"","networkType":"testnet","status":"live",
		"createdAt":"2023-03-06T01:00:00+02:00","expectedDecommissionAt":"2024-06-30T00:00:00Z",
		"decommissionedAt":"2024-06-30T12:00:00Z"}`, string(b))

	b, err = json.Marshal(sample()[0])
	require.NoError(t, err)
	assert.Contains(t, string(b), `"expectedDecommissionAt":null,"decommissionedAt":null`)

	var back Stream
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, sample()[0], back)

	b, err = json.Marshal(FeedRefsResponse{Feeds: []FeedRef{{FeedID: "0x01"}}})
	require.NoError(t, err)
	assert.Equal(t, `{"feeds":[{"feedID":"0x01"}]}`, string(b))
}

func FuzzParseFilter(f *testing.F) {
	for _, seed := range []string{
		"", "base_asset=ETH,btc", "status=live&hidden=TRUE", "hidden=maybe", "created_after=2024-02-29",
		"created_before=2024-02-30", "expected_decommission_after=2020-01-01&decommissioned_before=2030-12-31",
		"asset_class=%20,Crypto,,crypto", "network_type=mainnet&network_type=testnet", "a=%zz",
	} {
		f.Add(seed)
	}
	streams := sample()
	indexed := Index(streams)
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		flt, err := ParseFilter(q)
		if err != nil {
			if !errors.Is(err, ErrBadFilter) {
				t.Fatalf("error %q does not wrap ErrBadFilter", err)
			}
			return
		}
		// An accepted filter has a canonical form that parses to itself.
		again, err := ParseFilter(flt.Values())
		if err != nil {
			t.Fatalf("canonical form %q rejected: %v", flt.Values().Encode(), err)
		}
		for i := range streams {
			m := flt.Match(&streams[i])
			if m != flt.MatchIndexed(&indexed[i]) || m != again.Match(&streams[i]) {
				t.Fatalf("inconsistent match of %s for %q", streams[i].FeedID, raw)
			}
			// A matching stream carries one of the listed values.
			if m {
				for li, name := range listParams {
					if list := flt.lists[li]; len(list) > 0 && !containsFold(list, listField(&streams[i], li)) {
						t.Fatalf("stream %s matched %s=%v", streams[i].FeedID, name, list)
					}
				}
			}
		}
		if flt.Hidden != again.Hidden {
			t.Fatalf("hidden lost in canonical form")
		}
	})
}

// benchStreams builds n streams with every date field set.
func benchStreams(n int) []Stream {
	out := make([]Stream, n)
	classes := []string{"Crypto", "Equities", "Forex", "NAV"}
	for i := range out {
		out[i] = Stream{
			FeedID: fmt.Sprintf("0x%064x", i), BaseAsset: fmt.Sprintf("A%d", i), QuoteAsset: "USD",
			AssetClass: classes[i%len(classes)], FeedType: classes[i%len(classes)], AttributeType: "CexPrice",
			NetworkType: "mainnet", Status: []string{"live", "testing"}[i%2],
			CreatedAt:              fmt.Sprintf("202%d-0%d-1%dT10:00:00Z", i%5, 1+i%9, i%10),
			ExpectedDecommissionAt: ptr("2027-01-01T00:00:00Z"),
		}
	}
	return out
}

func BenchmarkMatch(b *testing.B) {
	streams := benchStreams(64)
	indexed := Index(streams)
	q, _ := url.ParseQuery("asset_class=crypto,forex,nav&status=live&quote_asset=usd&created_after=2021-06-01&expected_decommission_before=2028-01-01")
	f, err := ParseFilter(q)
	require.NoError(b, err)
	b.Run("Indexed", func(b *testing.B) {
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			for i := range indexed {
				if f.MatchIndexed(&indexed[i]) {
					n++
				}
			}
		}
		require.Positive(b, n)
	})
	b.Run("Stream", func(b *testing.B) {
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			for i := range streams {
				if f.Match(&streams[i]) {
					n++
				}
			}
		}
		require.Positive(b, n)
	})
}

func BenchmarkParseFilter(b *testing.B) {
	q, _ := url.ParseQuery("asset_class=crypto,forex,nav&status=live&hidden=true&created_after=2021-06-01")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseFilter(q); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSelect(b *testing.B) {
	indexed := Index(benchStreams(64))
	q, _ := url.ParseQuery("asset_class=crypto,forex,nav&status=live&quote_asset=usd&created_after=2021-06-01&expected_decommission_before=2028-01-01")
	f, err := ParseFilter(q)
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		if len(f.Select(indexed)) == 0 {
			b.Fatal("nothing selected")
		}
	}
}

func TestParseFilterBounds(t *testing.T) {
	many := func(n int) string {
		items := make([]string, n)
		for i := range items {
			items[i] = fmt.Sprintf("A%d", i)
		}
		return strings.Join(items, ",")
	}
	_, err := ParseFilter(url.Values{"base_asset": {many(MaxListItems)}})
	require.NoError(t, err, "the bound itself is allowed")
	_, err = ParseFilter(url.Values{"base_asset": {many(MaxListItems / 2)}, "quote_asset": {many(MaxListItems/2 + 1)}})
	require.ErrorIs(t, err, ErrBadFilter, "the bound is over all parameters together")
	assert.Contains(t, err.Error(), fmt.Sprintf("at most %d", MaxListItems), "the message names the limit")
	// Duplicates count too: the work is bounded by the items read, not kept.
	_, err = ParseFilter(url.Values{"status": {strings.Repeat("live,", 20000)}})
	require.ErrorIs(t, err, ErrBadFilter)
	f, err := ParseFilter(url.Values{"status": {"live,LIVE, live"}})
	require.NoError(t, err)
	assert.Equal(t, "live", f.Values().Get("status"), "duplicates still removed, case-insensitively")
}
