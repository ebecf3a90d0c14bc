package auth

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/ratelimit/redistest"
)

func TestRedisReplay(t *testing.T) {
	srv := redistest.New(t)
	opts, err := redis.ParseURL(srv.URL())
	require.NoError(t, err)
	opts.MaxRetries, opts.DialerRetries = -1, 1
	client := redis.NewClient(opts)
	t.Cleanup(func() { client.Close() })

	ks := testStore(t)
	now := time.UnixMilli(1_750_000_000_000)
	clock := now
	var failures []error
	replica := func() *Verifier {
		return NewVerifier(VerifierConfig{
			MaxSkew: 5 * time.Second, ReplayProtection: true, ReplayGrace: time.Second,
			Shared: NewRedisReplay(client, "test:replay:"), Now: func() time.Time { return clock },
			SharedFailed: func(err error) { failures = append(failures, err) },
		})
	}
	a, b := replica(), replica()
	req := func(target string) *http.Request {
		return signedRequest(target, "k-trading", "new-secret-0123456789", now)
	}

	r := req("/api/v1/feeds")
	_, err = a.Verify(ks, r)
	require.NoError(t, err)
	_, err = b.Verify(ks, r)
	assert.NoError(t, err, "a twin at another replica within the grace")
	clock = now.Add(1500 * time.Millisecond)
	_, err = b.Verify(ks, r)
	assert.ErrorIs(t, err, ErrReplay, "a replay at another replica after the grace")

	// The key expires with the skew window.
	keys, err := client.Keys(t.Context(), "test:replay:*").Result()
	require.NoError(t, err)
	require.Len(t, keys, 1)
	ttl, err := client.PTTL(t.Context(), keys[0]).Result()
	require.NoError(t, err)
	assert.Greater(t, ttl, 5*time.Second)
	assert.LessOrEqual(t, ttl, 10*time.Second)

	// Redis down: each replica still refuses what it saw itself.
	srv.Stop()
	clock = now
	r2 := req("/api/v1/feeds?x=2")
	_, err = a.Verify(ks, r2)
	assert.NoError(t, err, "the replica's own record decides while Redis fails")
	require.NotEmpty(t, failures)
	clock = now.Add(2 * time.Second)
	_, err = a.Verify(ks, r2)
	assert.ErrorIs(t, err, ErrReplay)
	assert.False(t, errors.Is(failures[0], ErrReplay))
}
