package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/cache"
	"streamgate/cache/shared"
	"streamgate/config"
	"streamgate/internal/testing/redistest"
	"streamgate/upstreamsim"
)

// The shared cache tier between real gateway processes: three replicas,
// one redis-server (limits and cache), one simulator on a loopback listener
// whose requests are counted.

// sharedUpstream is the simulator behind a handler that can hold one
// report request (by timestamp) until released: a slow upstream call.
type sharedUpstream struct {
	sim *upstreamsim.Simulator
	url string

	holdTS  atomic.Int64  // reports at this timestamp are held; 0: none
	arrived chan struct{} // closed when the first held request arrives
	release chan struct{} // closed to let held requests through
	once    sync.Once
	held    atomic.Int32 // held requests that arrived
}

func startSharedUpstream(t *testing.T) *sharedUpstream {
	t.Helper()
	cfg := upstreamsim.Default()
	cfg.RateLimit = 0 // the gateways' budget is what limits them here
	sim, err := upstreamsim.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { sim.Close() })
	u := &sharedUpstream{sim: sim, arrived: make(chan struct{}), release: make(chan struct{})}
	h := sim.Handler(upstreamsim.Mainnet)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ts := u.holdTS.Load(); ts != 0 && r.URL.Path == upstreamsim.EndpointReport &&
			r.URL.Query().Get("timestamp") == strconv.FormatInt(ts, 10) {
			u.held.Add(1)
			u.once.Do(func() { close(u.arrived) })
			select {
			case <-u.release:
			case <-r.Context().Done(): // its gateway died
				return
			}
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	u.url = srv.URL
	return u
}

// calls is the number of upstream requests so far.
func (u *sharedUpstream) calls() int64 { return u.sim.Counters().Total() }

// sharedConfig is a gateway of mainnet in front of upstream, its limits and
// its shared cache in the Redis at redisURL.
func sharedConfig(upstream, redisURL, lease string) string {
	return fmt.Sprintf(`server:
  admin_listen: "127.0.0.1:0"
networks:
  mainnet:
    listen: "127.0.0.1:0"
    upstream:
      url: %s
      api_key: %s
      api_secret: %s
      budget: {rps: 500, burst: 500}
      timeout: 20s
      retries: 0
auth:
  anonymous_rate: {rps: 0}
cache:
  latest_ttl: 300ms
  latest_max_stale: 0s
  latest_max_wait: 5s
  shared: {backend: redis, url: "%s", lease: %s}
ratelimit:
  backend: redis
  redis: {url: "%s"}
teams:
  - name: demo
    networks: [mainnet]
    feeds: ["*"]
    keys: [{id: %s, secret: %s}]
`, upstream, upstreamsim.OrgKeyID, upstreamsim.OrgKeySecret, redisURL, lease, redisURL, config.DemoKeyID, config.DemoKeySecret)
}

// sharedLoad sends one load, each step to every base of bases at once
// (the same base three times for one replica), and fails on any answer
// that is not a 200 (206 for bulk).
func sharedLoad(t *testing.T, s *signer, bases []string, feeds []string, tsBase int64) {
	t.Helper()
	hc := &http.Client{Timeout: 30 * time.Second}
	all := func(targets ...string) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, len(bases)*len(targets)*2)
		for _, base := range bases {
			for _, target := range targets {
				for range 2 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
						defer cancel()
						var signer *signer
						if !strings.HasPrefix(target, "anon:") {
							signer = s
						}
						resp, body, err := fetch(ctx, hc, signer, base+strings.TrimPrefix(target, "anon:"))
						if err == nil && resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusPartialContent {
							err = fmt.Errorf("%s: status %d: %s", target, resp.StatusCode, body)
						}
						if err != nil {
							errs <- err
						}
					}()
				}
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	}
	// Catalog views: anonymous, signed, signed with hidden streams.
	all("anon:/api/v1/discovery", "/api/v1/discovery?asset_class=Crypto", "/api/v1/feeds")
	// Reports at 20 timestamps.
	for i := range int64(20) {
		all("/api/v1/reports?feedID=" + feeds[i%int64(len(feeds))] + "&timestamp=" + strconv.FormatInt(tsBase-i, 10))
	}
	// Bulk: three chunks of every stream.
	for i := range int64(3) {
		all("/api/v1/reports/bulk?feedIDs=" + strings.Join(feeds, ",") + "&timestamp=" + strconv.FormatInt(tsBase-100-i, 10))
	}
	// Complete pages.
	for i := range int64(3) {
		all("/api/v1/reports/page?feedID=" + feeds[i] + "&startTimestamp=" + strconv.FormatInt(tsBase-200-10*i, 10) + "&limit=5")
	}
	// Latest polling: five rounds over the streams, each stream asked at
	// every replica at once; between rounds the reports expire
	// (latest_ttl 300ms, no stale serving), so each round needs one
	// upstream call per stream.
	for round := range 5 {
		if round > 0 {
			time.Sleep(400 * time.Millisecond)
		}
		for _, f := range feeds {
			all("/api/v1/reports/latest?feedID=" + f)
		}
	}
}

// TestSharedCacheAcrossReplicas: the same load spread over three replicas
// that share the cache tier costs the upstream at most 1.1× what it costs
// with one replica.
func TestSharedCacheAcrossReplicas(t *testing.T) {
	up := startSharedUpstream(t)
	s := newSigner(config.DemoKeyID, config.DemoKeySecret)
	tsBase := time.Now().Add(-2 * time.Hour).Unix()

	run := func(replicas int) (calls int64, saved float64) {
		srv := redistest.New(t) // an empty Redis for each run
		before := up.calls()
		var procs []*proc
		for range replicas {
			p := start(t, sharedConfig(up.url, srv.URL(), "2s"), []string{"mainnet"})
			waitReady(t, p)
			procs = append(procs, p)
		}
		feeds := feedIDs(t, procs[0].net["mainnet"], 10)
		bases := make([]string, 3)
		for i := range bases {
			bases[i] = procs[i%len(procs)].net["mainnet"]
		}
		sharedLoad(t, s, bases, feeds, tsBase)
		calls = up.calls() - before
		for _, p := range procs {
			v, ok := sample(scrape(t, p), "streamgate_cache_shared_fills_saved_total", nil)
			require.True(t, ok, "the shared tier's metrics are served")
			saved += v
			p.signal(syscall.SIGTERM)
			assert.Zero(t, p.wait(30*time.Second))
		}
		return calls, saved
	}
	one, _ := run(1)
	three, saved := run(3)
	t.Logf("upstream calls: one replica %d, three replicas %d (%.2f×); fills answered from another replica's: %.0f",
		one, three, float64(three)/float64(one), saved)
	require.Positive(t, one)
	assert.LessOrEqual(t, float64(three), 1.1*float64(one), "three replicas sharing the cache call the upstream as one does")
	assert.Positive(t, saved, "the replicas answered from each other's fills")
}

// TestSharedCacheLeaseHolderKilled: a replica killed while it holds a
// key's lease mid-fill delays the others by at most the lease: once it
// expires, one of them takes the fill over (one more upstream call, not
// two), and the other gets that entry.
func TestSharedCacheLeaseHolderKilled(t *testing.T) {
	up := startSharedUpstream(t)
	srv := redistest.New(t)
	procs := make([]*proc, 3)
	for i := range procs {
		procs[i] = start(t, sharedConfig(up.url, srv.URL(), "1s"), []string{"mainnet"})
		waitReady(t, procs[i])
	}
	holder, others := procs[0], procs[1:]
	feed := feedIDs(t, holder.net["mainnet"], 1)[0]
	ts := time.Now().Add(-90 * time.Minute).Unix()
	up.holdTS.Store(ts)
	s := newSigner(config.DemoKeyID, config.DemoKeySecret)

	// The holder takes the lease and calls the upstream, which holds the call.
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _, _ = fetch(ctx, http.DefaultClient, s, reportURL(holder.net["mainnet"], feed, ts)) // dies with its gateway
	}()
	select {
	case <-up.arrived:
	case <-time.After(20 * time.Second):
		t.Fatal("the holder's upstream call never arrived")
	}
	opt, err := redis.ParseURL(srv.URL())
	require.NoError(t, err)
	rc := redis.NewClient(opt)
	defer rc.Close()
	leaseKey := shared.DefaultPrefix + "lease:{" + cache.ReportKey(upstreamsim.Mainnet, "", feed, ts) + "}" // the tier's LeaseKey
	holderToken, err := rc.Get(context.Background(), leaseKey).Result()
	require.NoError(t, err, "the holder holds the key's lease while it fills")

	holder.signal(syscall.SIGKILL)
	holder.wait(10 * time.Second)
	close(up.release)

	// The others ask for the same report at once.
	var wg sync.WaitGroup
	for _, p := range others {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, body := mustGet(t, s, reportURL(p.net["mainnet"], feed, ts))
			assert.Equal(t, http.StatusOK, code, string(body))
			var doc struct {
				Report struct {
					FeedID                string `json:"feedID"`
					ObservationsTimestamp int64  `json:"observationsTimestamp"`
				} `json:"report"`
			}
			assert.NoError(t, json.Unmarshal(body, &doc))
			assert.Equal(t, feed, doc.Report.FeedID)
			assert.Equal(t, ts, doc.Report.ObservationsTimestamp)
		}()
	}
	// Until the dead holder's lease expires, nobody else may fill.
	if v, err := rc.Get(context.Background(), leaseKey).Result(); err == nil {
		assert.Equal(t, holderToken, v, "the lease is the dead holder's until it expires")
	}
	wg.Wait()

	assert.EqualValues(t, 2, up.held.Load(), "the killed holder's call and one takeover: no more")
	var takeover, value, timeout float64
	for _, p := range others {
		fams := scrape(t, p)
		v, _ := sample(fams, "streamgate_cache_shared_lease_waits_total", map[string]string{"outcome": shared.WaitTakeover})
		takeover += v
		v, _ = sample(fams, "streamgate_cache_shared_lease_waits_total", map[string]string{"outcome": shared.WaitValue})
		value += v
		v, _ = sample(fams, "streamgate_cache_shared_lease_waits_total", map[string]string{"outcome": shared.WaitTimeout})
		timeout += v
	}
	assert.EqualValues(t, 1, takeover, "one replica took the fill over once the lease expired")
	assert.LessOrEqual(t, value, 1.0, "the other waited for its entry (or, arriving late, read it)")
	assert.Zero(t, timeout, "nobody waited past the bound: the cost was the lease's expiry")
}
