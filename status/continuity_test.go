package status

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/realtime"
)

// TestHubContinuityRows: the hub's continuity figures (seconds backfilled
// and not filled, clients resumed and reports replayed), the clients by
// origin and a drain in progress reach the snapshot and the page.
func TestHubContinuityRows(t *testing.T) {
	f := newFixture()
	byOrigin := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "streamgate_ws_clients_by_origin"}, []string{"network", "origin"})
	drains := prometheus.NewGauge(prometheus.GaugeOpts{Name: "streamgate_ws_drains_in_progress"})
	f.reg.MustRegister(byOrigin, drains)
	byOrigin.WithLabelValues("mainnet", "001").Set(3)
	byOrigin.WithLabelValues("mainnet", "002").Set(2)
	byOrigin.WithLabelValues("testnet", "001").Set(9)
	drains.Set(1)
	s := New(Options{Gatherer: f.reg, Interval: 10 * time.Second, Samples: 4, Now: func() time.Time { return f.now },
		Facts: func() Facts {
			return Facts{Version: "v1", Networks: []NetworkInfo{{Name: "mainnet", BudgetRPS: 10,
				Hub: func() realtime.Stats {
					return realtime.Stats{Network: "mainnet", Backfilled: 27, Unfilled: 4, Resumed: 5, Replayed: 61}
				}}}}
		}})
	s.Sample()
	h := s.Snapshot().Networks[0].Hub
	require.NotNil(t, h)
	assert.Equal(t, int64(27), h.Backfilled)
	assert.Equal(t, int64(4), h.Unfilled)
	assert.Equal(t, int64(5), h.Resumed)
	assert.Equal(t, int64(61), h.Replayed)
	assert.True(t, h.Draining)
	assert.Equal(t, map[string]int64{"001": 3, "002": 2}, h.ClientsByOrigin)

	srv := httptest.NewServer(Handler(s, ""))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"seconds backfilled from REST 27", "seconds not filled 4", "clients resumed 5",
		"reports replayed 61", "clients by origin: 001 3 002 2", "closing its stream clients in steps"} {
		assert.Contains(t, string(body), want)
	}
}
