package proxy_test

import (
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/config"
	"streamgate/don"
	"streamgate/proxy"
	"streamgate/server/servertest"
	"streamgate/upstreamsim"
)

// simBars computes, independently of the gateway, the 1-minute bars of
// the price of stream over [from, to] from the simulator's reports (one a
// second), as a UDF datafeed reads them.
func simBars(t *testing.T, sim *upstreamsim.Simulator, stream string, from, to uint32) []udfBar {
	t.Helper()
	var out []udfBar
	for ts := int64(from); ts <= int64(to); ts++ {
		rec, ok := sim.Report(upstreamsim.Testnet, stream, ts)
		require.True(t, ok)
		_, fields, err := don.DecodeFullReport(rec.FullReport)
		require.NoError(t, err)
		var price float64
		for _, f := range fields {
			if f.Name == "price" {
				price = scaled(f.Value.(*big.Int))
			}
		}
		open := (ts - ts%60) * 1000
		if n := len(out); n == 0 || out[n-1].Time != open {
			out = append(out, udfBar{open, price, price, price, price})
			continue
		}
		b := &out[len(out)-1]
		b.High, b.Low, b.Close = max(b.High, price), min(b.Low, price), price
	}
	return out
}

// TestHistoryFillsMissingBars: the bars of a span the archive does not
// cover are filled from the upstream's pages before they are built, and
// equal the OHLC of the upstream's reports; a request fetches at most its
// bound of pages (the simulator counts them), so a longer span keeps the
// rest in "missing", which the next request goes on filling; a span
// filled once is answered from the archive with no upstream call.
func TestHistoryFillsMissingBars(t *testing.T) {
	env := servertest.Start(t, servertest.Options{Quiet: true, Config: func(c *config.Config) {
		noReplayCheck(c)
		c.Archive.Backend, c.Archive.Path = config.ArchiveBackendPebble, t.TempDir()
	}})
	const pages, limit = 3, 100 // a request fills at most 300 seconds
	proxy.SetHistoryFillBounds(env.Gateway, pages, limit)
	btc := string(config.DemoRestrictedFeeds()[0])
	c := servertest.Research()
	pageCalls := func() int64 {
		return env.Sim.Counters().Sum(func(c upstreamsim.Count) bool { return c.Endpoint == upstreamsim.EndpointPage })
	}
	get := func(from, to uint32) ([]udfBar, []map[string]uint32) {
		t.Helper()
		resp, body := c.Get(t, env.Testnet, fmt.Sprintf("/api/v1/history?feedID=%s&resolution=1&from=%d&to=%d", btc, from, to))
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		bars, _, err := udfHistory(body)
		require.NoError(t, err, string(body))
		var m struct{ Missing []map[string]uint32 }
		require.NoError(t, json.Unmarshal(body, &m))
		return bars, m.Missing
	}
	now := uint32(time.Now().Unix())
	base := now - now%3600 - 2*3600

	// The entitlement's catalog view, fetched once, before the counts.
	resp, body := c.Get(t, env.Testnet, fmt.Sprintf("/api/v1/history?feedID=%s&resolution=1&from=%d&to=%d", btc, now+3600, now+3600))
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	calls, paged := env.UpstreamCalls(), pageCalls()

	// 300 seconds: three pages of 100, then the bars.
	bars, missing := get(base, base+299)
	assert.Empty(t, missing)
	require.Equal(t, simBars(t, env.Sim, btc, base, base+299), bars)
	assert.LessOrEqual(t, pageCalls()-paged, int64(pages), "at most the bound of pages a request")
	assert.Equal(t, pageCalls()-paged, env.UpstreamCalls()-calls, "the fill's pages are its only upstream calls")

	// Filled once: from the archive alone.
	calls = env.UpstreamCalls()
	again, missing := get(base, base+299)
	assert.Empty(t, missing)
	assert.Equal(t, bars, again)
	assert.Equal(t, calls, env.UpstreamCalls(), "a filled span costs no upstream call")

	// 600 seconds: the first 300 filled, the rest missing, within the
	// bound; the next request fills the rest.
	calls, paged = env.UpstreamCalls(), pageCalls()
	from, to := base+300, base+899
	bars, missing = get(from, to)
	assert.LessOrEqual(t, pageCalls()-paged, int64(pages))
	assert.Equal(t, pageCalls()-paged, env.UpstreamCalls()-calls)
	require.Equal(t, []map[string]uint32{{"from": from + 300, "to": to}}, missing, "what the bound left is named missing")
	require.Equal(t, simBars(t, env.Sim, btc, from, from+299), bars)
	bars, missing = get(from, to)
	assert.Empty(t, missing)
	require.Equal(t, simBars(t, env.Sim, btc, from, to), bars)
}
