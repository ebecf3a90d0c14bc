package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/archive"
	"streamgate/auth"
	"streamgate/config"
	"streamgate/feedid"
	"streamgate/internal/testing/redistest"
	"streamgate/server/servertest"
	"streamgate/upstreamsim"
)

// The upstream credentials of the sharing tests' two teams with their own,
// keys the simulator accepts (every stream, as the organisation's).
const (
	alphaUpKey    = "5b0c7e1a-9d2f-4c3e-8a6b-1f4d7e9c2a01"
	alphaUpSecret = "streams-sim-alpha-secret-7c1e9a3b5d2f"
	betaUpKey     = "8e2a4c6f-1b3d-4f5a-9c7e-2d4b6f8a0c12"
	betaUpSecret  = "streams-sim-beta-secret-3a5c7e9b1d4f"
)

// upstreamLog records what the upstream is asked, by key: the streams of
// each WebSocket upgrade, and the REST calls; and refuses every request of
// one key once told to (401, as the upstream answers a revoked key).
type upstreamLog struct {
	mu       sync.Mutex
	upgrades map[string][]string // key → the feedIDs of each upgrade asked
	calls    map[string][]string // key → the REST targets asked
	refused  atomic.Pointer[string]
}

func newUpstreamLog() *upstreamLog {
	return &upstreamLog{upgrades: map[string][]string{}, calls: map[string][]string{}}
}

func (l *upstreamLog) wrap(_ string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get(auth.HeaderAuthorization)
		if k := l.refused.Load(); k != nil && *k == key {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":"unauthorized"}`))
			return
		}
		l.mu.Lock()
		if r.URL.Path == "/api/v1/ws" {
			l.upgrades[key] = append(l.upgrades[key], r.URL.Query().Get("feedIDs"))
		} else {
			l.calls[key] = append(l.calls[key], r.URL.RequestURI())
		}
		l.mu.Unlock()
		h.ServeHTTP(w, r)
	})
}

// keysAsking returns the keys under which the upstream was asked to stream
// feed, sorted.
func (l *upstreamLog) keysAsking(feed string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for key, ups := range l.upgrades {
		for _, q := range ups {
			if slices.Contains(splitComma(q), feed) {
				out = append(out, key)
				break
			}
		}
	}
	sort.Strings(out)
	return out
}

// restCalls returns how many REST calls under key asked for target.
func (l *upstreamLog) restCalls(key, target string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.calls[key] {
		if c == target {
			n++
		}
	}
	return n
}

func splitComma(s string) []string {
	var out []string
	for len(s) > 0 {
		i := 0
		for i < len(s) && s[i] != ',' {
			i++
		}
		out = append(out, s[:i])
		if i == len(s) {
			break
		}
		s = s[i+1:]
	}
	return out
}

// streamCounter is one stream client: every (stream, second) it received.
type streamCounter struct {
	mu   sync.Mutex
	seen map[string]map[int64]bool
	news chan struct{} // a frame arrived
}

func countStream(t *testing.T, ctx context.Context, conn *websocket.Conn) *streamCounter {
	c := &streamCounter{seen: map[string]map[int64]bool{}, news: make(chan struct{}, 1)}
	go func() {
		for {
			_, data, err := conn.Read(ctx)
			if err != nil {
				return
			}
			var f servertest.Frame
			if json.Unmarshal(data, &f) != nil {
				t.Errorf("a frame that is not a report: %s", data)
				return
			}
			c.mu.Lock()
			if c.seen[f.Report.FeedID] == nil {
				c.seen[f.Report.FeedID] = map[int64]bool{}
			}
			c.seen[f.Report.FeedID][f.Report.ObservationsTimestamp] = true
			c.mu.Unlock()
			select {
			case c.news <- struct{}{}:
			default:
			}
		}
	}()
	return c
}

// newest returns the newest second received of feed (0: none).
func (c *streamCounter) newest(feed string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
	for ts := range c.seen[feed] {
		n = max(n, ts)
	}
	return n
}

// count returns the seconds received of feed.
func (c *streamCounter) count(feed string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen[feed])
}

// await waits until ok holds, checking it at each frame received.
func (c *streamCounter) await(ctx context.Context, ok func() bool) bool {
	for !ok() {
		select {
		case <-c.news:
		case <-ctx.Done():
			return ok()
		}
	}
	return true
}

// sharingTeams adds to cfg the teams alpha and beta, each with its own
// upstream credential on mainnet; the demo team stays on the network's.
func sharingTeams(cfg *config.Config, mode config.Sharing) {
	cfg.Sharing = mode
	cfg.Auth.ReplayProtection = false
	for _, t := range []struct{ name, key, secret, upKey, upSecret string }{
		{"alpha", "alpha-client-key", "alpha-client-secret-0123456789", alphaUpKey, alphaUpSecret},
		{"beta", "beta-client-key", "beta-client-secret-0123456789", betaUpKey, betaUpSecret},
	} {
		cfg.Teams = append(cfg.Teams, config.Team{Name: t.name, Networks: []string{"mainnet"},
			Feeds:    config.StreamIDs{config.AllFeedsWildcard},
			Upstream: map[string]*config.Credentials{"mainnet": {APIKey: t.upKey, APISecret: config.Secret(t.upSecret)}},
			Keys:     []config.Key{{ID: t.key, Secret: config.Secret(t.secret)}}})
	}
}

var (
	alphaClient = &servertest.Client{Key: "alpha-client-key", Secret: "alpha-client-secret-0123456789", HTTP: http.DefaultClient}
	betaClient  = &servertest.Client{Key: "beta-client-key", Secret: "beta-client-secret-0123456789", HTTP: http.DefaultClient}
)

// TestSharingCredentialPartitionsTheStream: three teams stream the same
// stream and one of their own each, two under their own upstream
// credentials and the demo team under the network's, on one replica and on
// three sharing Redis. With sharing: credential each stream reaches the
// upstream under the credential of every team that wants it and under no
// other, each credential holds one upstream connection for the whole
// fleet, a REST report reaches the upstream once per credential, and when
// one credential is refused upstream its team gets nothing more while the
// others go on: nothing streamed under one credential reaches another's
// teams. With sharing: organisation (the default) every stream comes
// under the network's credential, and the refused credential changes
// nothing for its team's stream.
func TestSharingCredentialPartitionsTheStream(t *testing.T) {
	for _, tc := range []struct {
		mode     config.Sharing
		replicas int
	}{
		{config.SharingCredential, 1},
		{config.SharingCredential, 3},
		{config.SharingOrganisation, 1},
		{config.SharingOrganisation, 3},
	} {
		t.Run(fmt.Sprintf("%s/%d", tc.mode, tc.replicas), func(t *testing.T) {
			testSharing(t, tc.mode, tc.replicas)
		})
	}
}

func testSharing(t *testing.T, mode config.Sharing, replicas int) {
	log := newUpstreamLog()
	var redisURL string
	if replicas > 1 {
		redisURL = redistest.Start(t)
	}
	envs := servertest.StartReplicas(t, replicas, servertest.Options{Quiet: true,
		Sim: func(c *upstreamsim.Config) {
			c.Keys = append(c.Keys,
				upstreamsim.Key{ID: alphaUpKey, Secret: alphaUpSecret, Streams: []string{"*"}, Hidden: []string{"*"}},
				upstreamsim.Key{ID: betaUpKey, Secret: betaUpSecret, Streams: []string{"*"}, Hidden: []string{"*"}})
		},
		Upstream: log.wrap,
		Config: func(c *config.Config) {
			sharingTeams(c, mode)
			if redisURL != "" {
				c.RateLimit.Backend = config.BackendRedis
				c.RateLimit.Redis.URL = redisURL
			}
		}})
	env := envs[0]
	var feeds []string
	for _, s := range env.Sim.Streams(upstreamsim.Mainnet) {
		if s.Status == "live" && !slices.Contains(env.Sim.Hidden(upstreamsim.Mainnet), s.FeedID) && len(feeds) < 4 {
			feeds = append(feeds, s.FeedID)
		}
	}
	require.Len(t, feeds, 4)
	shared, onlyDemo, onlyAlpha, onlyBeta := feeds[0], feeds[1], feeds[2], feeds[3]

	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	dial := func(c *servertest.Client, e *servertest.Env, own string) *streamCounter {
		conn, resp, err := c.DialWS(ctx, e.Mainnet, "/api/v1/ws?feedIDs="+shared+","+own, "")
		require.NoError(t, err, "%v", resp)
		t.Cleanup(func() { conn.CloseNow() })
		return countStream(t, ctx, conn)
	}
	demo := dial(servertest.Demo(), envs[0], onlyDemo)
	alpha := dial(alphaClient, envs[1%replicas], onlyAlpha)
	beta := dial(betaClient, envs[2%replicas], onlyBeta)
	for _, c := range []struct {
		sc  *streamCounter
		own string
	}{{demo, onlyDemo}, {alpha, onlyAlpha}, {beta, onlyBeta}} {
		require.True(t, c.sc.await(ctx, func() bool { return c.sc.count(shared) >= 3 && c.sc.count(c.own) >= 3 }),
			"every client gets three seconds of each of its streams")
	}

	org := upstreamsim.OrgKeyID
	if mode == config.SharingCredential {
		assert.Equal(t, sorted(org, alphaUpKey, betaUpKey), log.keysAsking(shared), "the shared stream, once under each credential that wants it")
		assert.Equal(t, []string{org}, log.keysAsking(onlyDemo), "the demo team's stream, under the network's credential only")
		assert.Equal(t, []string{alphaUpKey}, log.keysAsking(onlyAlpha), "alpha's stream, under alpha's credential only")
		assert.Equal(t, []string{betaUpKey}, log.keysAsking(onlyBeta), "beta's stream, under beta's credential only")
	} else {
		for _, f := range feeds {
			assert.Equal(t, []string{org}, log.keysAsking(f), "with sharing: organisation every stream comes under the network's credential")
		}
	}
	// One upstream connection per credential for the whole fleet: the
	// replicas share each partition's connections through Redis.
	keys := []string{org}
	if mode == config.SharingCredential {
		keys = append(keys, alphaUpKey, betaUpKey)
	}
	require.Eventually(t, func() bool {
		open := map[string]int64{}
		for _, w := range env.Sim.Counters().WS {
			if w.Network == upstreamsim.Mainnet && w.Open > 0 {
				open[w.Key] = w.Open
			}
		}
		want := map[string]int64{}
		for _, k := range keys {
			want[k] = 1
		}
		return assert.ObjectsAreEqual(want, open)
	}, 30*time.Second, 50*time.Millisecond, "one open upstream connection per credential, on %d replicas", replicas)

	// latest from the stream: a team is answered from its own partition's
	// hub, never from another's. The first ask of a stream no hub of the
	// team's partition carries goes to REST (and makes that hub want it).
	latest := func(c *servertest.Client, e *servertest.Env, feed string) string {
		resp, body := c.Get(t, e.Mainnet, "/api/v1/reports/latest?feedID="+feed)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
		return resp.Header.Get("X-Cache")
	}
	onAlpha := envs[1%replicas] // the replica alpha's client streams from
	assert.Equal(t, "STREAM", latest(servertest.Demo(), envs[0], shared), "the demo team, from the network's stream")
	if mode == config.SharingCredential {
		assert.Equal(t, "STREAM", latest(alphaClient, onAlpha, onlyAlpha), "alpha, from its own credential's stream")
		assert.NotEqual(t, "STREAM", latest(servertest.Demo(), onAlpha, onlyAlpha), "the demo team never from alpha's stream")
	} else {
		assert.NotEqual(t, "STREAM", latest(alphaClient, onAlpha, onlyAlpha), "with organisation a team on its own credential is answered by REST under it")
		assert.Equal(t, "STREAM", latest(servertest.Demo(), onAlpha, onlyAlpha), "and the network's stream carries alpha's stream for the network's teams")
	}

	// A report at a past second, asked twice by each team: the upstream
	// is asked once per credential (REST is scoped by credential in both
	// modes).
	ts := demo.newest(shared) - 1
	target := "/api/v1/reports?feedID=" + shared + "&timestamp=" + fmt.Sprint(ts)
	for _, c := range []*servertest.Client{servertest.Demo(), alphaClient, betaClient} {
		for range 2 {
			resp, body := c.Get(t, env.Mainnet, target)
			require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
		}
	}
	assert.Equal(t, 1, log.restCalls(org, target), "the demo team's report, once under the network's credential")
	assert.Equal(t, 1, log.restCalls(alphaUpKey, target), "alpha's, once under alpha's")
	assert.Equal(t, 1, log.restCalls(betaUpKey, target), "beta's, once under beta's")

	// Alpha's credential refused upstream from now on, and every upstream
	// connection dropped: the others reconnect under their credentials.
	refused := alphaUpKey
	log.refused.Store(&refused)
	cut := time.Now().Unix()
	require.Positive(t, env.Sim.DropWS(upstreamsim.WSDrop{Network: upstreamsim.Mainnet}))
	for _, sc := range []*streamCounter{demo, beta} {
		require.True(t, sc.await(ctx, func() bool { return sc.newest(shared) >= cut+3 }),
			"the teams of the other credentials go on past the cut")
	}
	if mode == config.SharingCredential {
		assert.LessOrEqual(t, alpha.newest(shared), cut+1,
			"alpha's credential refused: nothing streamed under another credential reaches alpha (the shared stream)")
		assert.LessOrEqual(t, alpha.newest(onlyAlpha), cut+1, "nor alpha's own stream")
	} else {
		require.True(t, alpha.await(ctx, func() bool { return alpha.newest(shared) >= cut+3 }),
			"with sharing: organisation alpha's stream comes under the network's credential: its own refused changes nothing")
	}
}

func sorted(s ...string) []string {
	sort.Strings(s)
	return s
}

// TestSharingCredentialArchivePartitions: with sharing: credential and a
// Pebble archive, what a team on its own credential streamed is kept in
// its credential's partition of the archive (mainnet@partition) and what
// the demo team streamed in the network's, neither in the other; after a
// restart on the same directory each team's report at a second it
// streamed is answered from its own partition (HIT, no upstream call),
// and the same report asked by the other team goes to the upstream under
// that team's credential.
func TestSharingCredentialArchivePartitions(t *testing.T) {
	sim, err := upstreamsim.New(func() upstreamsim.Config {
		c := upstreamsim.Default()
		c.RateLimit = 0
		c.Keys = append(c.Keys, upstreamsim.Key{ID: alphaUpKey, Secret: alphaUpSecret, Streams: []string{"*"}, Hidden: []string{"*"}})
		return c
	}())
	require.NoError(t, err)
	t.Cleanup(func() { sim.Close() })
	dir := t.TempDir()
	log := newUpstreamLog()
	start := func() *servertest.Env {
		return servertest.Start(t, servertest.Options{Simulator: sim, Quiet: true, Upstream: log.wrap, Config: func(c *config.Config) {
			sharingTeams(c, config.SharingCredential)
			c.Teams = slices.DeleteFunc(c.Teams, func(t config.Team) bool { return t.Name == "beta" })
			c.Archive.Backend, c.Archive.Path = config.ArchiveBackendPebble, dir
		}})
	}
	env := start()
	var feeds []string
	for _, s := range sim.Streams(upstreamsim.Mainnet) {
		if s.Status == "live" && !slices.Contains(sim.Hidden(upstreamsim.Mainnet), s.FeedID) && len(feeds) < 2 {
			feeds = append(feeds, s.FeedID)
		}
	}
	require.Len(t, feeds, 2)
	demoFeed, alphaFeed := feeds[0], feeds[1]
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	dial := func(c *servertest.Client, feed string) (*streamCounter, *websocket.Conn) {
		conn, resp, err := c.DialWS(ctx, env.Mainnet, "/api/v1/ws?feedIDs="+feed, "")
		if err != nil && resp != nil {
			body, _ := io.ReadAll(resp.Body)
			t.Fatalf("%s: %v: %s", c.Key, err, body)
		}
		require.NoError(t, err)
		return countStream(t, ctx, conn), conn
	}
	demo, dc := dial(servertest.Demo(), demoFeed)
	alpha, ac := dial(alphaClient, alphaFeed)
	for _, c := range []struct {
		sc   *streamCounter
		feed string
	}{{demo, demoFeed}, {alpha, alphaFeed}} {
		require.True(t, c.sc.await(ctx, func() bool { return c.sc.count(c.feed) >= 3 }), "three seconds streamed")
	}
	dc.CloseNow()
	ac.CloseNow()
	demoTS, alphaTS := demo.newest(demoFeed)-1, alpha.newest(alphaFeed)-1
	require.NoError(t, env.Server.FlushArchive(context.Background()))
	_ = env.Server.Close() // at once: its error says only that idle connections were cut

	store, err := archive.OpenPebble(archive.PebbleOptions{Dir: dir})
	require.NoError(t, err)
	alphaLabel := config.PartitionLabel("mainnet", config.PartitionName(alphaUpKey))
	held := func(network, feed string, ts int64) bool {
		_, ok, err := store.Get(context.Background(), network, feedid.ID(feed), uint32(ts))
		require.NoError(t, err)
		return ok
	}
	assert.True(t, held("mainnet", demoFeed, demoTS), "the demo team's stream, in the network's partition")
	assert.False(t, held(alphaLabel, demoFeed, demoTS), "and not in alpha's")
	assert.True(t, held(alphaLabel, alphaFeed, alphaTS), "alpha's stream, in its credential's partition %s", alphaLabel)
	assert.False(t, held("mainnet", alphaFeed, alphaTS), "and not in the network's")
	require.NoError(t, store.Close())

	env = start()
	reportAt := func(feed string, ts int64) string {
		return fmt.Sprintf("/api/v1/reports?feedID=%s&timestamp=%d", feed, ts)
	}
	for _, c := range []struct {
		client *servertest.Client
		key    string
		target string
		cache  string
	}{
		{alphaClient, alphaUpKey, reportAt(alphaFeed, alphaTS), "HIT"},
		{servertest.Demo(), upstreamsim.OrgKeyID, reportAt(demoFeed, demoTS), "HIT"},
		{servertest.Demo(), upstreamsim.OrgKeyID, reportAt(alphaFeed, alphaTS), "MISS"},
		{alphaClient, alphaUpKey, reportAt(demoFeed, demoTS), "MISS"},
	} {
		before := log.restCalls(c.key, c.target)
		resp, body := c.client.Get(t, env.Mainnet, c.target)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
		assert.Equal(t, c.cache, resp.Header.Get("X-Cache"), "%s by %s", c.target, c.client.Key)
		want := 0
		if c.cache == "MISS" {
			want = 1
		}
		assert.Equal(t, want, log.restCalls(c.key, c.target)-before, "upstream calls under the team's own credential for %s", c.target)
	}
}
