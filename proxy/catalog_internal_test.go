package proxy

import (
	"context"
	"net/http"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/cache"
)

// TestOrgHiddenDoesNotOutliveItsEntry: the organisation's hidden view is
// at hand while its entry is cached, and not kept alive once the entry is
// gone: the cache entry alone holds it (and counts its cost).
func TestOrgHiddenDoesNotOutliveItsEntry(t *testing.T) {
	store, err := cache.New(cache.Config{MaxBytes: 1 << 20})
	require.NoError(t, err)
	t.Cleanup(store.Close)
	org := &credential{}
	var pol atomic.Pointer[policy]
	pol.Store(&policy{catalogTTL: time.Minute})
	c := &catalogViews{network: "mainnet", store: store, org: org, pol: &pol, now: time.Now}
	key := cache.CatalogKey("mainnet", org.scope, string(viewHidden))
	now := time.Now()

	func() {
		body := []byte(`{"feeds":[{"feedID":"` + feedV3 + `"}]}`)
		pv, err := parseView(body)
		require.NoError(t, err)
		e := viewKind.With(&cache.Entry{Status: http.StatusOK, Body: body, Stored: now,
			Expires: now.Add(time.Minute), StaleUntil: now.Add(time.Hour)}, pv)
		pv.entry, pv.expires = e, now.Add(time.Minute)
		store.Set(key, e)
		store.Wait()
		got, out, err := c.view(context.Background(), viewHidden, org, now)
		require.NoError(t, err)
		assert.Equal(t, cache.Hit, out)
		assert.Same(t, pv, got)
		require.NotNil(t, c.orgHidden.Load())
		assert.Same(t, pv, c.orgHidden.Load().Value(), "at hand while cached")
	}()

	// The entry is replaced (as an eviction drops it): the view goes.
	store.Set(key, &cache.Entry{Status: http.StatusOK, Body: []byte("{}"), Stored: now})
	store.Wait()
	runtime.GC()
	runtime.GC()
	assert.Nil(t, c.orgHidden.Load().Value(), "the view outlived its cache entry")
}

// TestLatestKeysCountAgainstMaxBytes: the latest keys a network keeps made
// are reserved in the Store once each, so cache.max_bytes bounds them too.
func TestLatestKeysCountAgainstMaxBytes(t *testing.T) {
	store, err := cache.New(cache.Config{MaxBytes: 1 << 20})
	require.NoError(t, err)
	t.Cleanup(store.Close)
	org := &credential{}
	l := &latestEntries{network: "mainnet", org: org, store: store}
	require.Zero(t, store.Bytes())

	k := l.key(org, feedV3)
	assert.Equal(t, cache.LatestKey("mainnet", "", feedV3), k)
	assert.Equal(t, latestKeyCost(feedV3, k), store.Bytes())
	l.key(org, feedV3) // made already: nothing more
	assert.Equal(t, latestKeyCost(feedV3, k), store.Bytes())

	team := &credential{scope: "team-a"} // made each time, never kept
	assert.Equal(t, cache.LatestKey("mainnet", "team-a", feedV3), l.key(team, feedV3))
	assert.Equal(t, latestKeyCost(feedV3, k), store.Bytes())
}

// TestFillContextHoldsNoRequestState: a fill started for a request runs
// on a context that does not reach the request's reqState (and so keeps
// none of its storage alive), while the request's cancellation still ends
// its wait.
func TestFillContextHoldsNoRequestState(t *testing.T) {
	store, err := cache.New(cache.Config{MaxBytes: 1 << 20})
	require.NoError(t, err)
	t.Cleanup(store.Close)
	parent, cancel := context.WithCancel(context.Background())
	st := &reqState{}
	st.ctx = stateCtx{Context: parent, st: st}
	reqCtx := context.Context(&st.ctx)
	require.Same(t, st, stateOf(reqCtx))

	seen := make(chan any, 1)
	release := make(chan struct{})
	go func() {
		_, _, _ = store.Load(fillContext(reqCtx), "k", func(ctx context.Context) (*cache.Entry, error) {
			seen <- ctx.Value(stateKey{})
			<-release
			return &cache.Entry{Status: http.StatusOK}, nil
		})
	}()
	assert.Nil(t, <-seen, "the fill's context reaches the request's state")

	// The request's cancellation still ends its wait.
	waited := make(chan error, 1)
	go func() {
		_, _, err := store.Load(fillContext(reqCtx), "k", nil)
		waited <- err
	}()
	cancel()
	assert.ErrorIs(t, <-waited, context.Canceled)
	close(release)
}
