package upstreamsim

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"
)

// TestControlRefusalsAndStreams: GET /refusals lists each request the rate
// limit refused with the accepted call times of its key and endpoint
// before it, and POST /counters/reset forgets them; GET /streams lists a
// network's streams with their windows now.
func TestControlRefusalsAndStreams(t *testing.T) {
	c := clockwork.NewFakeClockAt(t0)
	e := newEnv(t, func(cfg *Config) {
		cfg.Now = c.Now
		cfg.RateLimit, cfg.RateMode, cfg.Burst = rate.Limit(10), RateBucket, 1
	})
	ctl := httptest.NewServer(e.sim.ControlHandler())
	defer ctl.Close()
	get := func(path string, v any) int {
		req, err := http.NewRequest(http.MethodGet, ctl.URL+path, nil)
		require.NoError(t, err)
		resp, body := e.do(t, req)
		if v != nil && resp.StatusCode == http.StatusOK {
			require.NoError(t, json.Unmarshal(body, v), string(body))
		}
		return resp.StatusCode
	}
	eth := findStream(t, e.sim, Mainnet, nameETH)
	target := "/api/v1/reports/latest?feedID=" + eth

	var refusals []RateRefusal
	require.Equal(t, http.StatusOK, get("/refusals", &refusals))
	assert.Empty(t, refusals)

	// Two calls 100 ms apart are accepted; a third 50 ms later is not.
	for _, step := range []struct {
		after  time.Duration
		status int
	}{{0, 200}, {100 * time.Millisecond, 200}, {50 * time.Millisecond, 429}} {
		c.Advance(step.after)
		resp, _ := e.get(t, Mainnet, target, org)
		require.Equal(t, step.status, resp.StatusCode)
	}
	require.Equal(t, http.StatusOK, get("/refusals", &refusals))
	require.Len(t, refusals, 1)
	r := refusals[0]
	assert.Equal(t, Mainnet, r.Network)
	assert.Equal(t, EndpointLatest, r.Endpoint)
	assert.Equal(t, OrgKeyID, r.Key)
	assert.True(t, r.At.Equal(t0.Add(150*time.Millisecond)), "refused at %v", r.At)
	require.Len(t, r.Accepted, 2)
	assert.True(t, r.Accepted[0].Equal(t0), "%v", r.Accepted)
	assert.True(t, r.Accepted[1].Equal(t0.Add(100*time.Millisecond)), "%v", r.Accepted)

	req, err := http.NewRequest(http.MethodPost, ctl.URL+"/counters/reset", nil)
	require.NoError(t, err)
	resp, _ := e.do(t, req)
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	require.Equal(t, http.StatusOK, get("/refusals", &refusals))
	assert.Empty(t, refusals, "forgotten by a reset")

	var streams []StreamState
	require.Equal(t, http.StatusOK, get("/streams?network=mainnet", &streams))
	require.Len(t, streams, len(e.sim.Streams(Mainnet)))
	found := false
	for _, st := range streams {
		if st.FeedID == eth {
			found = true
			first, last, ok := e.sim.Window(Mainnet, eth)
			assert.True(t, ok)
			assert.Equal(t, first, st.First)
			assert.Equal(t, last, st.Last)
			assert.False(t, st.Hidden)
		}
	}
	assert.True(t, found, "the stream is listed")
	assert.Equal(t, http.StatusBadRequest, get("/streams?network=moon", nil))
	assert.Equal(t, http.StatusBadRequest, get("/streams", nil))
}
