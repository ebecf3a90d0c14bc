package proxy_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/config"
	"streamgate/feedid"
	"streamgate/server/servertest"
	"streamgate/upstreamsim"
)

// A stream ID in upper case is one `check` accepts, in ws_pinned and in a
// team's streams, and so the gateway starts with it: the hub carries the
// pinned stream (its latest is answered from the stream) and the team may
// read it, by its ID in any case.
func TestStreamIDsInAnyCase(t *testing.T) {
	sim, err := upstreamsim.New(upstreamsim.Config{})
	require.NoError(t, err)
	var eth string
	for _, s := range sim.Streams(upstreamsim.Mainnet) {
		if eth == "" && strings.HasPrefix(s.FeedID, "0x0003") && s.Status == "live" {
			eth = s.FeedID
		}
	}
	require.NotEmpty(t, eth)
	upper := "0X" + strings.ToUpper(eth[2:])

	cfg := config.Default()
	cfg.Networks["mainnet"].Upstream.WSPinned = config.StreamIDs{feedid.ID(upper)}
	cfg.Teams[0].Feeds = config.StreamIDs{feedid.ID(upper)}
	require.NoError(t, cfg.Validate(), "check accepts it")

	env := servertest.Start(t, servertest.Options{Quiet: true,
		Sim: func(c *upstreamsim.Config) { c.WSTick = 20 * time.Millisecond },
		Config: func(c *config.Config) {
			c.Networks["mainnet"].Upstream.WSPinned = config.StreamIDs{feedid.ID(upper)}
			c.Teams[0].Feeds = config.StreamIDs{feedid.ID(upper)}
		}})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	hub := env.Server.Hub("mainnet")
	for ctx.Err() == nil {
		if _, _, ok := hub.Latest(feedid.ID(eth)); ok {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	_, _, ok := hub.Latest(feedid.ID(eth))
	require.True(t, ok, "the pinned stream is carried under its canonical ID")
	for _, id := range []string{eth, upper, "0x" + strings.ToUpper(eth[2:])} {
		resp, body := servertest.Demo().Get(t, env.Mainnet, "/api/v1/reports/latest?feedID="+id)
		assert.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", id, body)
	}
}
