package proxy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/archive"
	"streamgate/config"
	"streamgate/don"
	"streamgate/feedid"
	"streamgate/server/servertest"
	"streamgate/upstreamsim"
)

// udfBar is a bar as a TradingView UDF datafeed makes it of a history
// answer: time in milliseconds, the values as numbers.
type udfBar struct {
	Time                   int64
	Open, High, Low, Close float64
}

// udfHistory reads a /api/v1/history answer as the UDF datafeed's
// getBars does: "s" is "ok" (bars from the t/o/h/l/c arrays), "no_data"
// (none; nextTime, when set, where to look next), anything else an error
// with "errmsg".
func udfHistory(body []byte) ([]udfBar, *int64, error) {
	var r struct {
		S        string    `json:"s"`
		Errmsg   string    `json:"errmsg"`
		T        []int64   `json:"t"`
		O        []float64 `json:"o"`
		H        []float64 `json:"h"`
		L        []float64 `json:"l"`
		C        []float64 `json:"c"`
		V        []float64 `json:"v"`
		NextTime *int64    `json:"nextTime"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, nil, err
	}
	switch r.S {
	case "no_data":
		return nil, r.NextTime, nil
	case "ok":
	default:
		return nil, nil, fmt.Errorf("datafeed error: %s", r.Errmsg)
	}
	bars := make([]udfBar, len(r.T))
	for i := range r.T {
		bars[i] = udfBar{Time: r.T[i] * 1000, Open: r.O[i], High: r.H[i], Low: r.L[i], Close: r.C[i]}
		// the UDF datafeed reads v[i] only when v has it
		if len(r.V) > i {
			return nil, nil, fmt.Errorf("a volume where reports have none")
		}
	}
	return bars, nil, nil
}

func scaled(v *big.Int) float64 {
	f, _ := strconv.ParseFloat(string(don.AppendDecimal(nil, v, 18)), 64)
	return f
}

// historyArchive writes the simulator's reports of stream on testnet, one
// every 5 s over [base, base+span), with their coverage, into a Pebble
// archive, and returns it and the reports' expected 1-minute bars.
func historyArchive(t *testing.T, sim *upstreamsim.Simulator, stream string, base, span uint32) (*archive.Pebble, []udfBar) {
	t.Helper()
	p, err := archive.OpenPebble(archive.PebbleOptions{Dir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	id, err := feedid.Parse(stream)
	require.NoError(t, err)
	var reports []archive.Report
	bars := map[int64]*udfBar{}
	for ts := int64(base); ts < int64(base+span); ts += 5 {
		rec, ok := sim.Report(upstreamsim.Testnet, stream, ts)
		require.True(t, ok)
		r, err := archiveRecord("testnet", fmt.Appendf(nil, `{"feedID":"%s","validFromTimestamp":%d,"observationsTimestamp":%d,"fullReport":"%s"}`,
			rec.FeedID, rec.ValidFromTimestamp, rec.ObservationsTimestamp, rec.FullReport))
		require.NoError(t, err)
		reports = append(reports, r)
		_, fields, err := don.DecodeFullReport(rec.FullReport)
		require.NoError(t, err)
		var price float64
		for _, f := range fields {
			if f.Name == "price" {
				price = scaled(f.Value.(*big.Int))
			}
		}
		open := (ts - ts%60) * 1000
		if b := bars[open]; b == nil {
			bars[open] = &udfBar{open, price, price, price, price}
		} else {
			b.High, b.Low, b.Close = max(b.High, price), min(b.Low, price), price
		}
	}
	ctx := context.Background()
	_, err = p.Write(ctx, reports)
	require.NoError(t, err)
	require.NoError(t, p.AddCoverage(ctx, "testnet", id, archive.Span{From: base, To: base + span - 1}))
	var want []udfBar
	for _, b := range bars {
		want = append(want, *b)
	}
	sort.Slice(want, func(i, j int) bool { return want[i].Time < want[j].Time })
	return p, want
}

// TestHistoryEndpoints: the bars endpoints answer signed requests of a
// stream the team may read from the archive, as a UDF datafeed reads
// them; refuse bad parameters (400, naming what is expected) and a stream
// the team may not read (401) before any work; charge the team's quota
// like every endpoint; answer 503 while no archive is given; and never
// call the upstream for a span the archive covers.
func TestHistoryEndpoints(t *testing.T) {
	const quota = 20
	env := servertest.Start(t, servertest.Options{Config: func(c *config.Config) {
		noReplayCheck(c)
		c.Team(config.ResearchTeam).DailyQuota = quota
		c.Team(config.ResearchTeam).Rate = config.Rate{} // the daily quota alone
	}})
	btc := config.DemoRestrictedFeeds()[0] // the research team may read it
	var other string                       // a stream the research team may not read
	for _, s := range env.Sim.Streams(upstreamsim.Testnet) {
		if !slices.Contains(config.DemoRestrictedFeeds(), feedid.ID(s.FeedID)) {
			other = s.FeedID
			break
		}
	}
	now := uint32(time.Now().Unix())
	base := now - now%3600 - 2*3600
	c := servertest.Research()
	target := fmt.Sprintf("/api/v1/history?feedID=%s&resolution=1&from=%d&to=%d", btc, base, base+599)

	resp, body := c.Get(t, env.Testnet, target)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "no archive yet: %s", body)
	requireAPIError(t, body)

	store, want := historyArchive(t, env.Sim, string(btc), base, 600)
	env.Gateway.SetHistory(store)
	calls := env.UpstreamCalls()
	used := 1

	resp, body = c.Get(t, env.Testnet, target)
	used++
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	bars, _, err := udfHistory(body)
	require.NoError(t, err)
	require.Equal(t, want, bars)

	resp, body = c.Get(t, env.Testnet, target+"&precise=true")
	used++
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	var precise struct {
		O []string `json:"o"`
	}
	require.NoError(t, json.Unmarshal(body, &precise))
	require.Len(t, precise.O, len(want))
	f, err := strconv.ParseFloat(precise.O[0], 64)
	require.NoError(t, err)
	assert.Equal(t, want[0].Open, f)

	resp, body = c.Get(t, env.Testnet, fmt.Sprintf("/api/v1/history/rows?feedID=%s&resolution=5m&from=%d&to=%d", btc, base, base+599))
	used++
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	var rows struct {
		S       string       `json:"s"`
		Candles [][6]float64 `json:"candles"`
	}
	require.NoError(t, json.Unmarshal(body, &rows))
	require.Equal(t, "ok", rows.S)
	require.Len(t, rows.Candles, 2)
	assert.Equal(t, [6]float64{float64(base), want[0].Open, max5(want[:5], true), max5(want[:5], false), want[4].Close, 0}, rows.Candles[0])

	resp, body = c.Get(t, env.Testnet, fmt.Sprintf("/api/v1/history?feedID=%s&resolution=1&from=%d&to=%d", btc, base+3600, base+3700))
	used++
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	bars, next, err := udfHistory(body)
	require.NoError(t, err)
	assert.Empty(t, bars)
	require.NotNil(t, next, "no_data says where the older bars are: %s", body)
	assert.Equal(t, want[len(want)-1].Time/1000, *next)
	calls = env.UpstreamCalls() // the span was not covered: its fill asked the upstream (TestHistoryFillsMissingBars)

	for _, bad := range []struct{ query, want string }{
		{fmt.Sprintf("feedID=%s&resolution=2&from=%d&to=%d", btc, base, base+599), `invalid resolution "2"`},
		{fmt.Sprintf("feedID=%s&resolution=1&from=%d&to=%d", btc, base+599, base), "is after to"},
		{fmt.Sprintf("feedID=%s&resolution=1&from=%d&to=%d", btc, base-86400*30, base), "at most 5000"},
		{fmt.Sprintf("feedID=%s&resolution=1&from=%d&to=%d&field=midPrice", btc, base, base+599), "the fields of schema V3 are nativeFee, linkFee, price, bid, ask"},
		{fmt.Sprintf("feedID=%s&resolution=1&from=x&to=%d", btc, base), "invalid from"},
		{fmt.Sprintf("resolution=1&from=%d&to=%d", base, base+599), "missing query parameter feedID"},
	} {
		resp, body := c.Get(t, env.Testnet, "/api/v1/history?"+bad.query)
		used++
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s: %s", bad.query, body)
		assert.Contains(t, requireAPIError(t, body).Error, bad.want, bad.query)
	}
	resp, body = c.Get(t, env.Testnet, fmt.Sprintf("/api/v1/history?feedID=%s&resolution=1&from=%d&to=%d", other, base, base+599))
	used++
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "a stream the team may not read: %s", body)
	resp, body = (&servertest.Client{HTTP: http.DefaultClient}).Get(t, env.Testnet, target)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "unsigned, as every endpoint: %s", body)
	assert.Contains(t, requireAPIError(t, body).Error, "missing authentication headers")

	for used < quota {
		resp, body = c.Get(t, env.Testnet, target)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		used++
	}
	resp, body = c.Get(t, env.Testnet, target)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "the team's daily quota counts the bars requests: %s", body)
	assert.Contains(t, requireAPIError(t, body).Error, "daily quota")
	assert.Equal(t, calls, env.UpstreamCalls(), "the bars of a span the archive covers never call the upstream")
}

// max5 returns the highest High (or lowest Low) of bars.
func max5(bars []udfBar, high bool) float64 {
	v := bars[0].High
	if !high {
		v = bars[0].Low
	}
	for _, b := range bars[1:] {
		if high {
			v = max(v, b.High)
		} else {
			v = min(v, b.Low)
		}
	}
	return v
}

// archiveRecord is the archive's report of a record as the upstream sends
// it, read by the one record reader (don.ReadRecord).
func archiveRecord(network string, raw []byte) (archive.Report, error) {
	rec, err := don.ReadRecord(raw)
	if err != nil {
		return archive.Report{}, err
	}
	return archive.FromRecord(network, rec, raw)
}
