package upstreamsim

import (
	"encoding/hex"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/catalog"
)

// The values the upstream API documents for the discovery filters.
var specValues = map[string][]string{
	"assetClass":    {"Crypto", "Equities", "Forex", "Macroeconomics", "NAV", "Tokenized Asset", "Tokenized CLO", "Tokenized Debt", "Tokenized Treasuries"},
	"feedType":      {"Crypto", "Crypto-DEX", "Datalink", "Equities", "Forex", "Macroeconomics", "Net Asset Value", "SmartData", "Tokenized Asset"},
	"attributeType": {"CexPrice", "DexPrice", "EquityPrice", "ExchangeRate", "ExtendedHoursEquityPrice", "ForexPrice", "NAV", "OvernightHoursEquityPrice", "RegularHoursEquityPrice", "SmartData", "TopOfBook"},
	"status":        {"live", "testing"},
	"schemaVersion": {"V1", "V2", "V3", "V4", "V5", "V6", "V7", "V8", "V9", "V10", "V11", "V12", "V13", "V14"},
	"serviceLevel":  {"Streams", "Datalink"},
}

func TestCatalogCoverage(t *testing.T) {
	s := newTestSim(t, nil)
	for _, network := range []string{Mainnet, Testnet} {
		t.Run(network, func(t *testing.T) {
			streams := s.Streams(network)
			require.GreaterOrEqual(t, len(streams), 60)
			seen := map[string]map[string]bool{}
			add := func(field, v string) {
				if seen[field] == nil {
					seen[field] = map[string]bool{}
				}
				seen[field][v] = true
			}
			var ids []string
			years := map[int]bool{}
			var scheduled, done, testing int
			for _, st := range streams {
				add("assetClass", st.AssetClass)
				add("feedType", st.FeedType)
				add("attributeType", st.AttributeType)
				add("status", st.Status)
				add("schemaVersion", st.SchemaVersion)
				add("serviceLevel", st.ServiceLevel)
				assert.Equal(t, network, st.NetworkType)
				assert.NotEmpty(t, st.MarketHours)
				assert.NotEmpty(t, st.AssetName)
				ids = append(ids, st.FeedID)

				id, ok := streamID(st.FeedID)
				require.True(t, ok, st.FeedID)
				assert.Equal(t, strings.ToLower(st.FeedID), st.FeedID)
				prefix := map[string]string{"V1": "0x0001", "V2": "0x0002", "V3": "0x0003", "V4": "0x0004", "V5": "0x0005",
					"V6": "0x0006", "V7": "0x0007", "V8": "0x0008", "V9": "0x0009", "V10": "0x000a", "V11": "0x000b",
					"V12": "0x000c", "V13": "0x000d", "V14": "0x000e"}[st.SchemaVersion]
				assert.True(t, prefix != "" && strings.HasPrefix(st.FeedID, prefix), "%s %s", st.SchemaVersion, st.FeedID)
				assert.Equal(t, st.SchemaVersion, SchemaOf(id).String())

				created, err := time.Parse(time.RFC3339, st.CreatedAt)
				require.NoError(t, err)
				years[created.Year()] = true
				if st.ExpectedDecommissionAt != nil {
					exp, err := time.Parse(time.RFC3339, *st.ExpectedDecommissionAt)
					require.NoError(t, err)
					if exp.After(t0) {
						scheduled++
					}
				}
				if st.DecommissionedAt != nil {
					dec, err := time.Parse(time.RFC3339, *st.DecommissionedAt)
					require.NoError(t, err)
					assert.True(t, dec.After(created))
					done++
				}
				if st.Status == catalog.StatusTesting {
					testing++
				}
			}
			for field, values := range specValues {
				for _, v := range values {
					assert.True(t, seen[field][v], "%s %q not covered", field, v)
				}
			}
			assert.True(t, slices.IsSorted(ids), "sorted by feed ID")
			assert.Len(t, slices.Compact(slices.Clone(ids)), len(ids), "unique feed IDs")
			assert.GreaterOrEqual(t, len(years), 3, "createdAt spread over years")
			assert.Positive(t, scheduled, "a scheduled decommission")
			assert.Positive(t, done, "a done decommission")
			assert.Positive(t, testing)
			assert.NotEmpty(t, s.Hidden(network))
		})
	}
	assert.Greater(t, countStatus(s.Streams(Testnet), "testing"), countStatus(s.Streams(Mainnet), "testing"),
		"testnet has more testing streams")
}

func countStatus(ss []catalog.Stream, status string) int {
	n := 0
	for _, s := range ss {
		if s.Status == status {
			n++
		}
	}
	return n
}

func TestStreamsShareIDsAcrossNetworks(t *testing.T) {
	s := newTestSim(t, nil)
	main := map[string]catalog.Stream{}
	for _, st := range s.Streams(Mainnet) {
		main[st.FeedID] = st
	}
	shared := 0
	for _, st := range s.Streams(Testnet) {
		m, ok := main[st.FeedID]
		if !ok {
			continue
		}
		shared++
		assert.Equal(t, m.Name, st.Name)
		rm, _ := s.Report(Mainnet, st.FeedID, t0.Unix())
		rt, _ := s.Report(Testnet, st.FeedID, t0.Unix())
		assert.NotEqual(t, rm.FullReport, rt.FullReport, "values differ between networks")
	}
	assert.Greater(t, shared, 30)
	assert.Less(t, shared, len(s.Streams(Testnet)), "the networks overlap only partly")
}

// nanoOf returns a decoded 18-decimal value as a float.
func floatOf(v *big.Int) float64 {
	f, _ := new(big.Float).Quo(new(big.Float).SetInt(v), big.NewFloat(1e18)).Float64()
	return f
}

func decodeReport(t testing.TB, r Report) ReportFields {
	t.Helper()
	f, err := DecodeReportBlob(decodeEnvelope(t, r).ReportBlob)
	require.NoError(t, err)
	return f
}

func decodeEnvelope(t testing.TB, r Report) FullReport {
	t.Helper()
	require.True(t, strings.HasPrefix(r.FullReport, "0x"))
	b, err := hex.DecodeString(r.FullReport[2:])
	require.NoError(t, err)
	fr, err := DecodeFullReport(b)
	require.NoError(t, err)
	return fr
}

func TestValuesPlausible(t *testing.T) {
	s := newTestSim(t, nil)
	levels := map[string][2]float64{ // name: plausible range
		"BTC/USD-RefPrice-DS-Premium-Global-003":  {45000, 75000},
		"ETH/USD-RefPrice-DS-Premium-Global-003":  {2200, 3800},
		"AAPL/USD-RefPrice-Equity-DS-001":         {150, 300},
		"EUR/USD-RefPrice-FX-DS-001":              {0.95, 1.2},
		"BUIDL/USD-NAV-Datalink-001":              {1.0, 1.2},
		"WSTETH/STETH-Exchange-Rate-DS-001":       {1.18, 1.3},
		"SHIB/USD-RefPrice-DS-Premium-Global-003": {0.00001, 0.00003},
	}
	for name, rng := range levels {
		id := findStream(t, s, Mainnet, name)
		for ts := t0.Unix() - 86400; ts <= t0.Unix(); ts += 3607 {
			f := decodeReport(t, mustReport(t, s, Mainnet, id, ts))
			v := f.Price
			if v == nil {
				v = f.ExchangeRate
			}
			if v == nil {
				v = f.Mid
			}
			p := floatOf(v)
			assert.True(t, p >= rng[0] && p <= rng[1], "%s at %d: %v", name, ts, p)
		}
	}

	// Every stream, every few minutes over the window: bid < price < ask,
	// fees positive, the fields of each schema consistent.
	for _, st := range s.Streams(Mainnet) {
		for ts := t0.Unix() - 86400; ts <= t0.Unix(); ts += 1801 {
			f := decodeReport(t, mustReport(t, s, Mainnet, st.FeedID, ts))
			if f.Schema != SchemaV1 { // V1 has no fees
				assert.Positive(t, named(t, f, "nativeFee").Sign())
				assert.Positive(t, named(t, f, "linkFee").Sign())
			}
			plausibleOther(t, st.Name, f, ts)
			switch f.Schema {
			case SchemaV3:
				assert.Negative(t, f.Bid.Cmp(f.Price), st.Name)
				assert.Negative(t, f.Price.Cmp(f.Ask), st.Name)
			case SchemaV11:
				assert.Negative(t, f.Bid.Cmp(f.Mid), st.Name)
				assert.Negative(t, f.Mid.Cmp(f.Ask), st.Name)
				assert.True(t, f.Bid.Cmp(f.LastTradedPrice) <= 0 && f.LastTradedPrice.Cmp(f.Ask) <= 0, st.Name)
				assert.Positive(t, f.BidVolume.Sign())
				assert.LessOrEqual(t, f.LastSeenTimestampNs, uint64(ts)*1e9)
				assert.LessOrEqual(t, f.MarketStatus, uint32(5))
			}
		}
	}
}

func mustReport(t testing.TB, s *Simulator, network, id string, ts int64) Report {
	t.Helper()
	r, ok := s.Report(network, id, ts)
	require.True(t, ok)
	return r
}

func TestNegativeValuesEncode(t *testing.T) {
	s := newTestSim(t, nil)
	id := findStream(t, s, Mainnet, "USGDP/PCT-Macro-Datalink-001")
	neg := false
	for month := 0; month < 120 && !neg; month++ {
		ts := t0.Unix() - int64(month)*31*86400
		f := decodeReport(t, mustReport(t, s, Mainnet, id, ts))
		neg = f.ExchangeRate.Sign() < 0
	}
	assert.True(t, neg, "GDP growth goes negative at some month, and decodes as negative")
}

func TestSchedules(t *testing.T) {
	at := func(s string) int64 {
		v, err := time.Parse(time.RFC3339, s)
		require.NoError(t, err)
		return v.Unix()
	}
	tests := []struct {
		name    string
		sched   schedule
		t       string
		status  uint32
		trading string // the instant whose price applies
	}{
		{"crypto always trades", sched247, "2025-09-20T03:00:00Z", statusRegular, "2025-09-20T03:00:00Z"},
		{"regular session", schedRegular, "2025-09-23T15:00:00Z", statusRegular, "2025-09-23T15:00:00Z"},
		// A standard-hours stream is open or closed: the documentation's
		// pre-market, post-market and overnight never appear on it.
		{"regular-only stream in pre-market", schedRegular, "2025-09-23T10:00:00Z", statusClosed, "2025-09-22T19:59:59Z"},
		{"regular-only stream after close", schedRegular, "2025-09-23T21:00:00Z", statusClosed, "2025-09-23T19:59:59Z"},
		{"regular-only stream on Monday night", schedRegular, "2025-09-22T02:00:00Z", statusClosed, "2025-09-19T19:59:59Z"},
		{"extended hours in pre-market", schedExtended, "2025-09-23T10:00:00Z", statusPre, "2025-09-23T10:00:00Z"},
		{"extended hours overnight", schedExtended, "2025-09-23T03:00:00Z", statusOvernight, "2025-09-22T23:59:59Z"},
		{"overnight trades overnight", schedOvernight, "2025-09-23T03:00:00Z", statusOvernight, "2025-09-23T03:00:00Z"},
		{"equities closed on Saturday", schedOvernight, "2025-09-20T12:00:00Z", statusClosed, "2025-09-19T23:59:59Z"},
		{"forex open on Sunday night", schedForex, "2025-09-21T23:00:00Z", statusRegular, "2025-09-21T23:00:00Z"},
		{"forex closed on Sunday afternoon", schedForex, "2025-09-21T12:00:00Z", statusClosed, "2025-09-19T21:59:59Z"},
		{"forex closed on Friday night", schedForex, "2025-09-19T23:00:00Z", statusClosed, "2025-09-19T21:59:59Z"},
		{"metals open on Tuesday", schedCME, "2025-09-23T15:00:00Z", statusRegular, "2025-09-23T15:00:00Z"},
		{"metals in the daily break", schedCME, "2025-09-23T22:30:00Z", statusClosed, "2025-09-23T21:59:59Z"},
		{"metals open after the break", schedCME, "2025-09-23T23:00:00Z", statusRegular, "2025-09-23T23:00:00Z"},
		{"metals closed on Friday night", schedCME, "2025-09-19T22:00:00Z", statusClosed, "2025-09-19T21:59:59Z"},
		{"metals closed on Saturday", schedCME, "2025-09-20T12:00:00Z", statusClosed, "2025-09-19T21:59:59Z"},
		{"metals closed on Sunday afternoon", schedCME, "2025-09-21T22:59:59Z", statusClosed, "2025-09-19T21:59:59Z"},
		{"metals open on Sunday night", schedCME, "2025-09-21T23:00:00Z", statusRegular, "2025-09-21T23:00:00Z"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.status, tc.sched.status(at(tc.t)))
			assert.Equal(t, at(tc.trading), tc.sched.tradingTime(at(tc.t)))
		})
	}
}

func TestPriceFrozenWhenClosed(t *testing.T) {
	s := newTestSim(t, nil)
	id := findStream(t, s, Mainnet, "SPY/USD-RegularHours-Equity-DS-001")
	sat := time.Date(2025, 9, 20, 12, 0, 0, 0, time.UTC).Unix()
	a := decodeReport(t, mustReport(t, s, Mainnet, id, sat))
	b := decodeReport(t, mustReport(t, s, Mainnet, id, sat+3600))
	assert.Equal(t, a.Mid, b.Mid)
	assert.Equal(t, statusClosed, a.MarketStatus)
	mon := time.Date(2025, 9, 22, 15, 0, 0, 0, time.UTC).Unix()
	c := decodeReport(t, mustReport(t, s, Mainnet, id, mon))
	d := decodeReport(t, mustReport(t, s, Mainnet, id, mon+60))
	assert.NotEqual(t, c.Mid, d.Mid, "the price moves in the regular session")
}

func TestDefaultKeys(t *testing.T) {
	cfg := Default()
	require.Len(t, cfg.Keys, 2)
	assert.Equal(t, OrgKeyID, cfg.Keys[0].ID)
	assert.Equal(t, RestrictedKeyID, cfg.Keys[1].ID)
	assert.Len(t, RestrictedStreams(), 5)
	s := newTestSim(t, nil)
	for _, network := range []string{Mainnet, Testnet} {
		for _, id := range RestrictedStreams() {
			_, _, ok := s.Window(network, id)
			assert.True(t, ok, "restricted stream %s on %s", id, network)
		}
	}
}

func TestNewValidates(t *testing.T) {
	_, err := New(Config{
		History: -time.Second, MaxSkew: -1, RateLimit: -1, Burst: -1, MaxBulkFeeds: -1,
		Keys: []Key{
			{ID: "a", Secret: "s", Streams: []string{"0x12"}},
			{ID: "a", Secret: "s"},
			{ID: "", Secret: "s"},
			{ID: "b", Secret: "s", Hidden: []string{"nope"}},
		},
		Faults: Faults{ErrorRate: 2},
	})
	require.Error(t, err)
	for _, want := range []string{"History", "MaxSkew", "RateLimit", "Burst", "MaxBulkFeeds", `"0x12"`, "duplicate", "required", `"nope"`, "ErrorRate"} {
		assert.Contains(t, err.Error(), want)
	}
	s, err := New(Config{})
	require.NoError(t, err, "the zero Config is valid")
	assert.Equal(t, Faults{}, s.Faults())
}
