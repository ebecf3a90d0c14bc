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
