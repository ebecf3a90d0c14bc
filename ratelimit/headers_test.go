package ratelimit

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSetHeaders(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		name       string
		d          Decision
		policy     string
		policyHdr  string
		limitHdr   string
		retryAfter string
	}{
		{
			name:      "allowed, bucket partly used",
			d:         Decision{Allowed: true, Limit: Limit{Rate: 50, Burst: 100}, Remaining: 42, Reset: 1160 * ms},
			policy:    "team",
			policyHdr: `"team";q=100;w=2`, limitHdr: `"team";r=42;t=2`,
		},
		{
			name:      "allowed, bucket full",
			d:         Decision{Allowed: true, Limit: Limit{Rate: 10, Burst: 10}, Remaining: 10},
			policy:    "team",
			policyHdr: `"team";q=10;w=1`, limitHdr: `"team";r=10;t=0`,
		},
		{
			name:      "refused: t equals Retry-After, rounded up",
			d:         Decision{Limit: Limit{Rate: 10, Burst: 5}, RetryAfter: 100 * ms, Reset: 500 * ms},
			policy:    "team",
			policyHdr: `"team";q=5;w=1`, limitHdr: `"team";r=0;t=1`, retryAfter: "1",
		},
		{
			name:      "refused for longer than a second",
			d:         Decision{Limit: Limit{Rate: 0.5, Burst: 3}, RetryAfter: 2001 * ms, Reset: 6 * time.Second},
			policy:    "slow",
			policyHdr: `"slow";q=3;w=6`, limitHdr: `"slow";r=0;t=3`, retryAfter: "3",
		},
		{
			name:      "daily quota",
			d:         quotaDecision(1000, 1000, false, 3*time.Hour+time.Millisecond),
			policy:    "daily",
			policyHdr: `"daily";q=1000;w=86400`, limitHdr: `"daily";r=0;t=10801`, retryAfter: "10801",
		},
		{
			name:      "policy name escaped as a structured-field String",
			d:         Decision{Allowed: true, Limit: Limit{Rate: 1, Burst: 1}},
			policy:    "a\"b\\c\né",
			policyHdr: `"a\"b\\c???";q=1;w=1`, limitHdr: `"a\"b\\c???";r=0;t=0`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			tc.d.SetHeaders(h, tc.policy)
			assert.Equal(t, []string{tc.policyHdr}, h.Values("RateLimit-Policy"))
			assert.Equal(t, []string{tc.limitHdr}, h.Values("RateLimit"))
			assert.Equal(t, tc.retryAfter, h.Get("Retry-After"))
		})
	}
}

func TestSetHeadersSeveralPolicies(t *testing.T) {
	h := http.Header{}
	Decision{Allowed: true, Limit: Limit{Rate: 50, Burst: 100}, Remaining: 99, Reset: 20 * time.Millisecond}.SetHeaders(h, "team")
	quotaDecision(1000, 1000, false, 90*time.Minute).SetHeaders(h, "daily")
	Decision{Limit: Limit{Rate: 1, Burst: 1}, RetryAfter: time.Second}.SetHeaders(h, "other")
	assert.Equal(t, []string{`"team";q=100;w=2`, `"daily";q=1000;w=86400`, `"other";q=1;w=1`}, h.Values("RateLimit-Policy"))
	assert.Equal(t, []string{`"team";r=99;t=1`, `"daily";r=0;t=5400`, `"other";r=0;t=1`}, h.Values("RateLimit"))
	assert.Equal(t, []string{"5400"}, h.Values("Retry-After"), "the longest refusal wins")
}

func TestSetHeadersUnlimited(t *testing.T) {
	h := http.Header{}
	Decision{Allowed: true, Limit: Limit{Burst: 10}, Remaining: 10}.SetHeaders(h, "team")
	Decision{Allowed: true}.SetHeaders(h, "daily") // quota limit <= 0
	assert.Empty(t, h)
}

// TestMembers: the members rendered for storage of the caller's own are
// those SetHeaders adds; a policy member made for another limit is not
// reused.
func TestMembers(t *testing.T) {
	team := Limit{Rate: 10, Burst: 20}
	made := Decision{Limit: team}.PolicyValue("team")
	for _, d := range []Decision{
		{Allowed: true, Limit: team, Remaining: 7, Reset: 1500 * time.Millisecond},
		{Allowed: true, Limit: Limit{Rate: 5, Burst: 5}, Remaining: 1, Reset: time.Second}, // not the limit made for
		{Allowed: false, Limit: team, RetryAfter: 300 * time.Millisecond},
	} {
		h := http.Header{}
		d.SetHeaders(h, "team")
		pol, state, ok := d.Members("team", team, made, nil)
		require.True(t, ok)
		assert.Equal(t, h.Get(HeaderRateLimitPolicy), pol)
		assert.Equal(t, h.Get(HeaderRateLimit), string(state))
	}
	_, state, ok := Decision{Allowed: true}.Members("team", team, made, []byte("x"))
	assert.False(t, ok, "an unlimited decision is not advertised")
	assert.Equal(t, "x", string(state))
}
