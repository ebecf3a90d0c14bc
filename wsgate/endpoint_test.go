package wsgate_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/wsgate"
)

// valid is a Gate's configuration as the server's defaults make it.
var valid = wsgate.Config{Queue: 8, PingInterval: time.Second, TeamConnections: 1}

// New refuses a configuration the endpoint cannot run with, every problem
// at once.
func TestNewChecksTheConfig(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   func(*wsgate.Config)
		wants []string // every problem named
	}{
		{"valid", func(*wsgate.Config) {}, nil},
		{"every client setting missing", func(c *wsgate.Config) { *c = wsgate.Config{} },
			[]string{"Queue", "PingInterval", "TeamConnections"}},
		{"resume records unbounded", func(c *wsgate.Config) { c.ResumeWindow, c.ResumeRecordsPerTeam, c.ResumeRecords = time.Minute, 10, 5 },
			[]string{"ResumeRecords"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := valid
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
	g, err := wsgate.New(valid)
	require.NoError(t, err)
	defer g.Close()
	for name, n := range map[string]*wsgate.Network{"no hub": g.Network("mainnet", nil, nil), "no endpoint": nil} {
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
