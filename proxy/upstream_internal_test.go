package proxy

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sentRecorder is a ratelimit.Sent that records its reports.
type sentRecorder struct {
	mu    sync.Mutex
	times []time.Time
}

func (s *sentRecorder) sent(written time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.times = append(s.times, written)
}

func (s *sentRecorder) reports() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.times...)
}

// TestAttemptReportsItsWrite: an upstream attempt tells the budget when
// its request was written to the upstream connection, during the call,
// and once more with the zero time when it is over (only the first
// counts); an attempt whose request could not be written reports the
// zero time alone.
func TestAttemptReportsItsWrite(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	newUpstream := func(base string) *upstream {
		u, err := url.Parse(base)
		require.NoError(t, err)
		return &upstream{network: "n", base: u, client: &http.Client{}, timeout: 10 * time.Second}
	}

	var rec sentRecorder
	before := time.Now()
	resp, err := newUpstream(srv.URL).attempt(context.Background(), "latest", "/api/v1/reports/latest", nil, rec.sent)
	after := time.Now()
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.status)
	got := rec.reports()
	require.Len(t, got, 2, "the write, then the end of the attempt")
	assert.False(t, got[0].Before(before) || got[0].After(after), "written at %v, the call ran from %v to %v", got[0], before, after)
	assert.True(t, got[1].IsZero())

	// Nothing listens: the request is never written.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := "http://" + l.Addr().String()
	require.NoError(t, l.Close())
	var failed sentRecorder
	_, err = newUpstream(dead).attempt(context.Background(), "latest", "/api/v1/reports/latest", nil, failed.sent)
	require.Error(t, err)
	assert.Equal(t, []time.Time{{}}, failed.reports(), "never written: the zero time alone")
}
