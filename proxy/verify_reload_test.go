package proxy_test

import (
	"context"
	"maps"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/config"
	"streamgate/don"
	"streamgate/feedid"
	"streamgate/server/servertest"
	"streamgate/upstreamsim"
)

// TestVerifyReloadToEnforceDropsWhatReportAdmitted: reports forged while
// in mode report are served and cached (memory, the hub's newest report
// and its history); a reload to enforce drops them: the cached report is
// fetched again (and refused while the forgery goes on), the hub no
// longer answers latest with the forged frame, and once the upstream is
// honest again the genuine report is served.
func TestVerifyReloadToEnforceDropsWhatReportAdmitted(t *testing.T) {
	env := servertest.Start(t, servertest.Options{Quiet: true,
		Sim:    func(c *upstreamsim.Config) { c.WSTick = 20 * time.Millisecond },
		Config: func(cfg *config.Config) { cfg.Networks["mainnet"].Verify.Mode = config.VerifyReport }})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c := servertest.Demo()
	eth := env.FeedID(t, upstreamsim.Mainnet, "ETH", "USD", "V3")
	report := "/api/v1/reports?feedID=" + eth + "&timestamp=" + strconv.FormatInt(pastTS(), 10)
	gate := env.Server.Gate("mainnet")
	require.NoError(t, env.Sim.SetFaults(upstreamsim.Faults{Forge: upstreamsim.ForgeDuplicate}))

	resp, body := c.Get(t, env.Mainnet, report)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	resp, _ = c.Get(t, env.Mainnet, report)
	require.Equal(t, "HIT", resp.Header.Get("X-Cache"), "the forged report, cached in mode report")

	conn, _, err := c.DialWS(ctx, env.Mainnet, "/api/v1/ws?feedIDs="+eth, "")
	require.NoError(t, err)
	defer conn.CloseNow()
	f := servertest.ReadFrames(t, ctx, conn, 1)[0]
	res, _ := gate.Verify(don.Record(f.Report))
	require.Equal(t, don.CauseDuplicateSigner, res.Cause, "the forged frame, delivered in mode report")
	hub := env.Server.Hub("mainnet")
	frame, _, ok := hub.Latest(feedid.ID(eth))
	require.True(t, ok)
	res, _ = gate.Verify(don.FrameRecord(frame))
	require.Equal(t, don.CauseDuplicateSigner, res.Cause, "latest from the stream: the forged frame")

	next := *env.Config
	next.Networks = maps.Clone(next.Networks)
	mainnet := *next.Networks["mainnet"]
	mainnet.Verify.Mode = config.VerifyEnforce
	next.Networks["mainnet"] = &mainnet
	_, err = env.Server.Reload(&next)
	require.NoError(t, err)
	require.Equal(t, don.ModeEnforce, gate.Mode())

	// Still forging: what report admitted is gone, and nothing forged is
	// admitted again.
	resp, body = c.Get(t, env.Mainnet, report)
	assert.Equal(t, http.StatusBadGateway, resp.StatusCode, "the cached forged report after the reload: %s", body)
	if frame, _, ok := hub.Latest(feedid.ID(eth)); ok {
		res, _ := gate.Verify(don.FrameRecord(frame))
		assert.True(t, res.OK(), "the hub's newest report after the reload: %+v", res)
	}
	resp, body = c.Get(t, env.Mainnet, "/api/v1/reports/latest?feedID="+eth)
	assert.Equal(t, http.StatusBadGateway, resp.StatusCode, "latest after the reload: %s", body)

	// Honest again: the genuine report.
	require.NoError(t, env.Sim.SetFaults(upstreamsim.Faults{}))
	resp, body = c.Get(t, env.Mainnet, report)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	assert.Equal(t, "MISS", resp.Header.Get("X-Cache"))
}
