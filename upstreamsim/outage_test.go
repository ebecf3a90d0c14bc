package upstreamsim

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOutage: an outage drops every WebSocket connection without a close
// frame and refuses REST and upgrades with 503 until it ends; afterwards
// both work again and REST serves the seconds of the outage.
func TestOutage(t *testing.T) {
	e := newWSEnv(t, nil)
	ctl := httptest.NewServer(e.sim.ControlHandler())
	defer ctl.Close()
	btc := findStream(t, e.sim, Mainnet, nameBTC)
	target := "/api/v1/ws?feedIDs=" + btc
	a := e.mustDial(t, Mainnet, target, org, nil)
	b := e.mustDial(t, Testnet, target, org, nil)

	post := func(body string) (int, string) {
		resp, err := http.Post(ctl.URL+"/faults/outage", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out)
	}
	for _, bad := range []string{``, `{}`, `{"for":"-1s"}`, `{"for":"2h"}`, `{"for":"8s","x":1}`, `{"for":"soon"}`} {
		status, body := post(bad)
		assert.Equal(t, http.StatusBadRequest, status, "%s: %s", bad, body)
	}
	assert.Zero(t, e.sim.OutageLeft(), "a refused request starts no outage")

	status, body := post(`{"for":"1h"}`)
	require.Equal(t, http.StatusOK, status, body)
	assert.JSONEq(t, `{"dropped":2,"for":"1h0m0s"}`, body)
	for _, c := range []*wsClient{a, b} {
		err := c.closed(t)
		assert.Equal(t, websocket.StatusCode(-1), websocket.CloseStatus(err), "no close frame: %v", err)
	}
	assert.Greater(t, e.sim.OutageLeft(), 59*time.Minute)

	resp, _ := e.get(t, Mainnet, "/api/v1/reports/latest?feedID="+btc, org)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))
	_, resp, err := e.wsDial(t, Testnet, target, "", org, nil)
	require.Error(t, err)
	assert.Equal(t, http.StatusServiceUnavailable, statusOf(resp))

	// The control API is never part of the outage; "0s" ends it.
	status, body = post(`{"for":"0s"}`)
	require.Equal(t, http.StatusOK, status, body)
	assert.JSONEq(t, `{"dropped":0,"for":"0s"}`, body)
	assert.Zero(t, e.sim.OutageLeft())

	c := e.mustDial(t, Mainnet, target, org, nil)
	e.clk.Advance(time.Second)
	assert.Equal(t, t0.Unix()+1, parseFrame(t, c.next(t)).ObservationsTimestamp)
	resp, _ = e.get(t, Mainnet, "/api/v1/reports/latest?feedID="+btc, org)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}
