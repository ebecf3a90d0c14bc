package config

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// realtimeDoc is a minimal configuration with the given realtime and
// ratelimit sections.
func realtimeDoc(sections string) []byte {
	return []byte(`
networks:
  mainnet:
    listen: "127.0.0.1:0"
    upstream: {url: embedded}
teams:
  - name: t
    networks: [mainnet]
    feeds: ["*"]
    keys: [{id: k, secret: "0123456789abcdef"}]
` + sections)
}

func TestStreamSharing(t *testing.T) {
	tests := []struct {
		name     string
		sections string
		shared   bool
		lease    time.Duration
	}{
		{"memory limits: nothing to share through", "", false, DefaultShareLease},
		{"redis limits: shared by default", "ratelimit: {backend: redis, redis: {url: redis://127.0.0.1:6379/0}}\n", true, DefaultShareLease},
		{"redis limits, share off", "ratelimit: {backend: redis, redis: {url: redis://127.0.0.1:6379/0}}\nrealtime: {share: false}\n", false, DefaultShareLease},
		{"a lease of its own", "ratelimit: {backend: redis, redis: {url: redis://127.0.0.1:6379/0}}\nrealtime: {share_lease: 1500ms}\n", true, 1500 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse(realtimeDoc(tt.sections), fakeEnv(nil))
			require.NoError(t, err)
			assert.Equal(t, tt.shared, cfg.Shared())
			assert.Equal(t, tt.lease, cfg.Realtime.ShareLease)
		})
	}
}

func TestStreamSharingLeaseValidated(t *testing.T) {
	_, err := Parse(realtimeDoc("realtime: {share_lease: 100ms}\n"), fakeEnv(nil))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "realtime.share_lease")
	assert.Contains(t, err.Error(), "at least 300ms")
}

func TestContinuityKeys(t *testing.T) {
	cfg, err := Parse(realtimeDoc(""), fakeEnv(nil))
	require.NoError(t, err)
	assert.Equal(t, []string{"001", "002"}, cfg.Realtime.ClientOrigins)
	assert.Equal(t, 5*time.Second, cfg.Realtime.DrainDelay)
	assert.Equal(t, 60*time.Second, cfg.Realtime.ResumeWindow)
	assert.Equal(t, 2*time.Minute, cfg.Realtime.BackfillMax)
	assert.Equal(t, 15*time.Minute, cfg.Realtime.SinceMax)

	cfg, err = Parse(realtimeDoc("realtime: {client_origins: [], drain_delay: 0s, resume_window: 0s, backfill_max: 30s, since_max: 0s}\n"), fakeEnv(nil))
	require.NoError(t, err)
	assert.Empty(t, cfg.Realtime.ClientOrigins, "an empty list advertises no origin")
	assert.Zero(t, cfg.Realtime.DrainDelay)
	assert.Zero(t, cfg.Realtime.ResumeWindow)
	assert.Equal(t, 30*time.Second, cfg.Realtime.BackfillMax)
	assert.Zero(t, cfg.Realtime.SinceMax, "0s refuses every since")

	cfg, err = Parse(realtimeDoc("realtime: {client_origins: [a, b-2, c_3]}\n"), fakeEnv(nil))
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b-2", "c_3"}, cfg.Realtime.ClientOrigins)

	for _, bad := range []struct{ doc, path string }{
		{"realtime: {client_origins: [\"001\", \"001\"]}\n", "realtime.client_origins[1]"},
		{"realtime: {client_origins: [\"0 1\"]}\n", "realtime.client_origins[0]"},
		{"realtime: {client_origins: [\"{001}\"]}\n", "realtime.client_origins[0]"},
		{"realtime: {client_origins: [\"\"]}\n", "realtime.client_origins[0]"},
		{"realtime: {client_origins: [a, b, c, d, e, f, g, h, i]}\n", "realtime.client_origins"},
		{"realtime: {drain_delay: -1s}\n", "realtime.drain_delay"},
		{"realtime: {drain_delay: 11m}\n", "realtime.drain_delay"},
		{"realtime: {resume_window: 2h}\n", "realtime.resume_window"},
		{"realtime: {backfill_max: -1s}\n", "realtime.backfill_max"},
		{"realtime: {since_max: -1s}\n", "realtime.since_max"},
		{"realtime: {since_max: 25h}\n", "realtime.since_max"},
	} {
		_, err := Parse(realtimeDoc(bad.doc), fakeEnv(nil))
		require.Error(t, err, bad.doc)
		assert.Contains(t, err.Error(), bad.path, bad.doc)
	}
}
