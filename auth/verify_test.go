package auth

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/feedid"
)

const feedA = "0x000359843a543ee2fe414dc14c7e7920ef10f4372990b79d6361cdc0dd1ba782"

func testStore(t *testing.T) *KeyStore {
	t.Helper()
	ks, err := NewKeyStore([]Team{
		{Name: "trading", Networks: []string{"mainnet", "testnet"}, All: true,
			Keys: []Key{{ID: "k-trading", Secrets: []string{"new-secret-0123456789", "old-secret-0123456789"}}}},
		{Name: "research", Networks: []string{"testnet"}, Feeds: []feedid.ID{feedA},
			Keys: []Key{{ID: "k-research", Secrets: []string{"research-secret-0123"}}}},
	})
	require.NoError(t, err)
	return ks
}

func signedRequest(target, key, secret string, at time.Time) *http.Request {
	r := httptest.NewRequest(http.MethodGet, target, nil)
	Sign(r, key, []byte(secret), at)
	return r
}

func TestVerify(t *testing.T) {
	ks := testStore(t)
	now := time.UnixMilli(1_750_000_000_000)
	target := "/api/v1/reports/latest?feedID=" + feedA
	tests := []struct {
		name string
		req  func() *http.Request
		want error
	}{
		{"current secret", func() *http.Request { return signedRequest(target, "k-trading", "new-secret-0123456789", now) }, nil},
		{"old secret during rotation", func() *http.Request { return signedRequest(target, "k-trading", "old-secret-0123456789", now) }, nil},
		{"skew at the limit", func() *http.Request {
			return signedRequest(target, "k-trading", "new-secret-0123456789", now.Add(-5*time.Second))
		}, nil},
		{"stale timestamp", func() *http.Request {
			return signedRequest(target, "k-trading", "new-secret-0123456789", now.Add(-5*time.Second-time.Millisecond))
		}, ErrSkew},
		{"future timestamp", func() *http.Request {
			return signedRequest(target, "k-trading", "new-secret-0123456789", now.Add(6*time.Second))
		}, ErrSkew},
		{"unknown key", func() *http.Request { return signedRequest(target, "k-nobody", "new-secret-0123456789", now) }, ErrUnknownKey},
		{"wrong secret", func() *http.Request { return signedRequest(target, "k-research", "new-secret-0123456789", now) }, ErrBadSignature},
		{"target changed after signing", func() *http.Request {
			r := signedRequest(target, "k-trading", "new-secret-0123456789", now)
			r.RequestURI = target + "&x=1"
			return r
		}, ErrBadSignature},
		{"no headers", func() *http.Request { return httptest.NewRequest(http.MethodGet, target, nil) }, ErrMissingHeaders},
		{"timestamp in seconds with letters", func() *http.Request {
			r := signedRequest(target, "k-trading", "new-secret-0123456789", now)
			r.Header.Set(HeaderTimestamp, "17e11")
			return r
		}, ErrMalformedHeaders},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := NewVerifier(VerifierConfig{MaxSkew: 5 * time.Second, ReplayProtection: true, Now: func() time.Time { return now }})
			res, err := v.Verify(ks, tc.req())
			if tc.want == nil {
				require.NoError(t, err)
				assert.Equal(t, "trading", res.Principal.Team.Name)
				return
			}
			assert.ErrorIs(t, err, tc.want)
		})
	}
}

func TestReplay(t *testing.T) {
	ks := testStore(t)
	now := time.UnixMilli(1_750_000_000_000)
	clock := now
	v := NewVerifier(VerifierConfig{MaxSkew: 5 * time.Second, ReplayProtection: true, Now: func() time.Time { return clock }})
	r := signedRequest("/api/v1/feeds", "k-trading", "new-secret-0123456789", now)

	_, err := v.Verify(ks, r)
	require.NoError(t, err)
	_, err = v.Verify(ks, r)
	assert.ErrorIs(t, err, ErrReplay, "the same signature twice")

	// Still refused after generations rotate, as long as the timestamp is valid.
	for _, d := range []time.Duration{4 * time.Second, 5 * time.Second} {
		clock = now.Add(d)
		_, err = v.Verify(ks, r)
		assert.ErrorIs(t, err, ErrReplay, "replayed %v later", d)
	}
	// Past the skew it is refused as stale, never accepted again.
	clock = now.Add(11 * time.Second)
	_, err = v.Verify(ks, r)
	assert.ErrorIs(t, err, ErrSkew)

	// A fresh signature of the same request is accepted.
	_, err = v.Verify(ks, signedRequest("/api/v1/feeds", "k-trading", "new-secret-0123456789", clock))
	assert.NoError(t, err)

	// With a grace, identical requests sent at once pass; later repeats not.
	graced := NewVerifier(VerifierConfig{MaxSkew: 5 * time.Second, ReplayProtection: true, ReplayGrace: time.Second, Now: func() time.Time { return clock }})
	clock = now
	r2 := signedRequest("/api/v1/feeds?x=1", "k-trading", "new-secret-0123456789", now)
	for _, d := range []time.Duration{0, 0, 999 * time.Millisecond} {
		clock = now.Add(d)
		_, err = graced.Verify(ks, r2)
		assert.NoError(t, err, "repeat %v after the first use", d)
	}
	clock = now.Add(time.Second)
	_, err = graced.Verify(ks, r2)
	assert.ErrorIs(t, err, ErrReplay, "a repeat after the grace")

	off := NewVerifier(VerifierConfig{MaxSkew: 5 * time.Second, Now: func() time.Time { return now }})
	for range 2 {
		_, err = off.Verify(ks, r)
		assert.NoError(t, err, "replay protection off")
	}
}

func TestReplayCacheForgets(t *testing.T) {
	rc := newReplayCache(10*time.Second, 0)
	t0 := time.Unix(1000, 0)
	sig := make([]byte, 32)
	for i := range 100 {
		sig[0], sig[1] = byte(i), byte(i>>8)
		require.True(t, rc.firstUse("k", sig, t0))
	}
	sig[0], sig[1] = 0, 0
	assert.False(t, rc.firstUse("k", sig, t0.Add(10*time.Second)), "kept for at least ttl")
	rc.firstUse("k", []byte("x"), t0.Add(25*time.Second))
	rc.firstUse("k", []byte("y"), t0.Add(36*time.Second))
	rc.mu.Lock()
	defer rc.mu.Unlock()
	assert.LessOrEqual(t, len(rc.cur)+len(rc.prev), 2, "old generations dropped")
}

func TestKeyStore(t *testing.T) {
	ks := testStore(t)
	p, ok := ks.Lookup("k-research")
	require.True(t, ok)
	assert.True(t, p.Team.UsesNetwork("testnet"))
	assert.False(t, p.Team.UsesNetwork("mainnet"))
	assert.True(t, p.Team.MayRead(feedA))
	assert.False(t, p.Team.MayRead(feedid.ID("0x0003"+feedA[6:]+"00")))
	tr, _ := ks.Team("trading")
	assert.True(t, tr.AllFeeds())
	assert.True(t, tr.MayRead(feedid.ID("0x0007"+feedA[6:])))

	_, err := NewKeyStore([]Team{
		{Name: "a", Keys: []Key{{ID: "k1", Secrets: []string{"s"}}}},
		{Name: "a", Keys: []Key{{ID: "k2", Secrets: []string{"s"}}}},
		{Name: "b", Keys: []Key{{ID: "k1", Secrets: []string{"s"}}, {ID: "k3"}}},
	})
	require.Error(t, err)
	for _, want := range []string{`duplicate team "a"`, `duplicate key id "k1"`, `key "k3" has no secret`} {
		assert.Contains(t, err.Error(), want)
	}
}

func TestReason(t *testing.T) {
	for err, want := range map[error]string{nil: "ok", ErrMissingHeaders: "missing_headers", ErrReplay: "replay", ErrSkew: "skew", ErrUnknownKey: "unknown_key", ErrBadSignature: "bad_signature", ErrMalformedHeaders: "malformed_headers"} {
		assert.Equal(t, want, Reason(err))
	}
}

func BenchmarkVerifyWithStore(b *testing.B) {
	ks, _ := NewKeyStore([]Team{{Name: "t", All: true, Keys: []Key{{ID: "k", Secrets: []string{"secret-secret-secret"}}}}})
	v := NewVerifier(VerifierConfig{MaxSkew: time.Hour})
	r := signedRequest("/api/v1/reports/latest?feedID="+feedA, "k", "secret-secret-secret", time.Now())
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Verify(ks, r); err != nil {
			b.Fatal(err)
		}
	}
}
