package upstreamsim

import (
	"math/big"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// named returns the integer field name of f.
func named(t testing.TB, f ReportFields, name string) *big.Int {
	t.Helper()
	for _, nv := range f.Named {
		if nv.Name == name {
			require.NotNil(t, nv.Int, "%s of %s is not an integer", name, f.Schema)
			return nv.Int
		}
	}
	require.Failf(t, "no field", "%s has no field %s", f.Schema, name)
	return nil
}

func namedString(t testing.TB, f ReportFields, name string) string {
	t.Helper()
	for _, nv := range f.Named {
		if nv.Name == name {
			return nv.Value
		}
	}
	require.Failf(t, "no field", "%s has no field %s", f.Schema, name)
	return ""
}

// e18 is v with 18 decimals.
func e18(v float64) *big.Int {
	x, _ := new(big.Float).Mul(big.NewFloat(v), big.NewFloat(1e18)).Int(nil)
	return x
}

func lt(a, b *big.Int) bool { return a.Cmp(b) < 0 }

// plausibleOther checks the fields of the schemas other than V3, V7 and
// V11 at second ts.
func plausibleOther(t *testing.T, name string, f ReportFields, ts int64) {
	t.Helper()
	n := func(field string) *big.Int { return named(t, f, field) }
	ns := new(big.Int).Mul(big.NewInt(ts), big.NewInt(1e9))
	status := func() {
		s := n("marketStatus").Int64()
		assert.True(t, s == 1 || s == 2, "%s: marketStatus %d is closed (1) or open (2)", name, s)
	}
	switch f.Schema {
	case SchemaV1:
		assert.True(t, lt(n("bid"), n("price")) && lt(n("price"), n("ask")), name)
		assert.Greater(t, n("currentBlockNum").Int64(), int64(v1Block0))
		assert.Equal(t, n("currentBlockNum").Int64()-1, n("validFromBlockNum").Int64())
		assert.LessOrEqual(t, n("currentBlockTimestamp").Int64(), ts)
		assert.Greater(t, n("currentBlockTimestamp").Int64(), ts-blockPeriod)
		assert.Equal(t, uint32(ts), uint32(n("observationsTimestamp").Int64()))
	case SchemaV2:
		assert.Positive(t, n("price").Sign(), name)
	case SchemaV4:
		status()
		assert.Positive(t, n("price").Sign(), name)
	case SchemaV5:
		assert.True(t, lt(e18(3), n("rate")) && lt(n("rate"), e18(6)), "%s: rate %s percent", name, n("rate"))
		assert.LessOrEqual(t, n("timestamp").Int64(), ts)
		assert.Equal(t, int64(86400), n("duration").Int64())
	case SchemaV6:
		assert.True(t, lt(n("price4"), n("price2")) && lt(n("price2"), n("price")) && lt(n("price"), n("price3")) &&
			lt(n("price3"), n("price5")), name)
	case SchemaV8:
		status()
		assert.Positive(t, n("midPrice").Sign())
		assert.True(t, n("lastUpdateTimestamp").Cmp(ns) <= 0, name)
	case SchemaV9:
		assert.True(t, lt(e18(0.9), n("navPerShare")) && lt(n("navPerShare"), e18(1.2)), name)
		assert.True(t, lt(e18(1e7), n("aum")), "%s: aum %s", name, n("aum"))
		assert.LessOrEqual(t, n("navDate").Int64(), ts*1000, "navDate in milliseconds")
		assert.Zero(t, n("ripcord").Int64())
	case SchemaV10:
		status()
		assert.Equal(t, e18(1), n("currentMultiplier"))
		assert.Zero(t, n("newMultiplier").Sign())
		assert.Zero(t, n("activationDateTime").Sign())
		p, tp := n("price"), n("tokenizedPrice")
		diff := new(big.Int).Abs(new(big.Int).Sub(p, tp))
		assert.True(t, lt(new(big.Int).Mul(diff, big.NewInt(10)), p), "%s: tokenized %s within 10%% of %s", name, tp, p)
	case SchemaV12:
		assert.Positive(t, n("navPerShare").Sign())
		assert.Positive(t, n("nextNavPerShare").Sign())
		assert.True(t, n("navDate").Cmp(ns) <= 0, "navDate in nanoseconds")
		assert.Zero(t, n("ripcord").Int64())
	case SchemaV13:
		assert.True(t, lt(n("bestBid"), n("bestAsk")), name)
		assert.True(t, n("bestBid").Cmp(n("lastTradedPrice")) <= 0 && n("lastTradedPrice").Cmp(n("bestAsk")) <= 0, name)
		assert.Positive(t, n("askVolume").Sign())
		assert.Positive(t, n("bidVolume").Sign())
	case SchemaV14:
		status()
		assert.True(t, lt(n("bidPrice"), n("midPrice")) && lt(n("midPrice"), n("askPrice")), name)
		assert.Equal(t, ts, n("observationsTimestamp").Int64())
		exp, err := time.Parse(time.DateOnly, namedString(t, f, "expiryTime"))
		require.NoError(t, err)
		assert.True(t, !exp.Before(time.Unix(ts, 0).UTC().Truncate(24*time.Hour)), "%s: contract expired %s", name, exp)
		m := n("contractMonth").Int64()
		assert.True(t, m >= 1 && m <= 12, "contractMonth %d", m)
		assert.Equal(t, int64(exp.AddDate(0, 1, 0).Month()), m, "delivered the month after expiry")
		bd := n("currentBusinessDay").Int64()
		assert.True(t, bd >= 1 && bd <= 23, "currentBusinessDay %d", bd)
		assert.True(t, n("lastSeenTimestampNs").Cmp(ns) <= 0)
		g := n("goldmanRollPrice")
		assert.True(t, lt(g, n("midPrice")) && lt(new(big.Int).Mul(n("midPrice"), big.NewInt(99)), new(big.Int).Mul(g, big.NewInt(100))), name)
	}
}

// The market status values each stream takes over a week are those the
// documentation lists for its schema and market hours: V4, V8, V10 and V14
// open and closed; V11 standard-hours streams (regular-session equities,
// forex) regular and closed only, 24/5 equities every session.
func TestMarketStatusBySchedule(t *testing.T) {
	s := newTestSim(t, nil)
	start := time.Date(2025, 9, 19, 0, 0, 0, 0, time.UTC).Unix() // a Friday
	for _, st := range s.Streams(Mainnet) {
		schema := st.SchemaVersion
		if schema != "V4" && schema != "V8" && schema != "V10" && schema != "V11" && schema != "V14" {
			continue
		}
		seen := map[int64]bool{}
		for ts := start; ts < start+7*86400; ts += 1800 {
			seen[named(t, decodeReport(t, mustReport(t, s, Mainnet, st.FeedID, ts)), "marketStatus").Int64()] = true
		}
		var allowed map[int64]bool
		switch {
		case schema != "V11":
			allowed = map[int64]bool{1: true, 2: true}
		case st.MarketHours == hoursNYSE || st.MarketHours == hoursForex:
			allowed = map[int64]bool{2: true, 5: true}
		case st.MarketHours == hours247:
			allowed = map[int64]bool{2: true}
		default:
			allowed = map[int64]bool{1: true, 2: true, 3: true, 4: true, 5: true}
		}
		for v := range seen {
			assert.True(t, allowed[v], "%s (%s, %s): marketStatus %d", st.Name, schema, st.MarketHours, v)
		}
		if schema != "V11" || st.MarketHours != hours247 {
			assert.Len(t, seen, len(allowed), "%s (%s, %s) takes every value of its schedule over a week: %v", st.Name, schema, st.MarketHours, seen)
		}
	}
}

// Every schema is published on mainnet by a live stream, and every report
// of it decodes to its layout's fields.
func TestEverySchemaPublished(t *testing.T) {
	s := newTestSim(t, nil)
	live := map[string]bool{}
	for _, st := range s.Streams(Mainnet) {
		if st.Status != "live" {
			continue
		}
		live[st.SchemaVersion] = true
		f := decodeReport(t, mustReport(t, s, Mainnet, st.FeedID, t0.Unix()))
		assert.Len(t, f.Named, len(layouts[f.Schema]), st.Name)
	}
	for _, sc := range Schemas {
		assert.True(t, live[sc.String()], "no live stream of %s", sc)
	}
	assert.Len(t, live, len(Schemas))
}

// A V14 blob's string is checked like every offset and length.
func TestV14StringBounds(t *testing.T) {
	s := newTestSim(t, nil)
	id := findStream(t, s, Mainnet, "CL/USD-Futures-DS-001")
	fr := decodeEnvelope(t, mustReport(t, s, Mainnet, id, t0.Unix()))
	f, err := DecodeReportBlob(fr.ReportBlob)
	require.NoError(t, err)
	assert.Regexp(t, `^\d{4}-\d{2}-\d{2}$`, namedString(t, f, "expiryTime"))
	for name, mutate := range map[string]func(b []byte){
		"offset outside":  func(b []byte) { b[9*word+word-1] = 0xff },
		"length too long": func(b []byte) { b[17*word+word-1] = 200 },
		"padding not 0":   func(b []byte) { b[19*word-1] = 'x' },
	} {
		b := append([]byte(nil), fr.ReportBlob...)
		mutate(b)
		_, err := DecodeReportBlob(b)
		assert.ErrorIs(t, err, ErrMalformedReport, name)
	}
}
