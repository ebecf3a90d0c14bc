package wsgate_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/realtime"
	"streamgate/wsgate"
)

// New refuses a configuration a streaming network cannot run with, every
// problem at once; without a hub the clients' settings are not needed.
func TestNewChecksTheConfig(t *testing.T) {
	hubs := map[string]*realtime.Hub{"mainnet": nil}
	good := wsgate.Config{Hubs: hubs, Queue: 8, PingInterval: time.Second, TeamConnections: 1}
	for _, tc := range []struct {
		name  string
		cfg   func(*wsgate.Config)
		wants []string // every problem named
	}{
		{"valid", func(*wsgate.Config) {}, nil},
		{"no hub: nothing needed", func(c *wsgate.Config) { *c = wsgate.Config{} }, nil},
		{"every client setting wrong", func(c *wsgate.Config) { c.Queue, c.PingInterval, c.TeamConnections = 0, 0, 0 },
			[]string{"Queue", "PingInterval", "TeamConnections"}},
		{"resume records unbounded", func(c *wsgate.Config) { c.ResumeWindow, c.ResumeRecordsPerTeam, c.ResumeRecords = time.Minute, 10, 5 },
			[]string{"ResumeRecords"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := good
			tc.cfg(&cfg)
			g, err := wsgate.New(cfg)
			if tc.wants == nil {
				require.NoError(t, err)
				g.Close()
				return
			}
			require.Error(t, err)
			for _, w := range tc.wants {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

// A network without a hub, and a gateway without the endpoint (a nil
// Network), refuse an upgrade with 503 and its JSON error, and answer / with
// no origins.
func TestNoStreamNetwork(t *testing.T) {
	g, err := wsgate.New(wsgate.Config{})
	require.NoError(t, err)
	defer g.Close()
	for name, n := range map[string]*wsgate.Network{"no hub": g.Network("mainnet", nil), "no endpoint": nil} {
		t.Run(name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			n.ServeWS(rec, httptest.NewRequest(http.MethodGet, "/api/v1/ws?feedIDs=0x01", nil), nil)
			assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
			assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
			assert.Equal(t, "60", rec.Header().Get("Retry-After"))
			assert.Contains(t, rec.Body.String(), `"message":"real-time streaming is not configured`)

			rec = httptest.NewRecorder()
			n.ServeRoot(rec, httptest.NewRequest(http.MethodHead, "/", nil), nil)
			assert.Equal(t, http.StatusOK, rec.Code)
			assert.Empty(t, rec.Header().Get("X-Cll-Available-Origins"))
			assert.Equal(t, "no-store", rec.Header().Get("Cache-Control"))
		})
	}
}
