package main

// Streaming through deploys and outages, as an operator runs it: three
// gateway processes sharing one redis-server, the simulator as upstream
// (its 10 requests per second per key and endpoint on, two HA origins),
// and a readiness-aware balancer in front, as a Kubernetes Service.
// Clients reconnect one second after a close, as the SDKs do; the HA
// clients hold one connection per advertised origin and deduplicate as
// the SDKs do. Every (stream, second) that the upstream published while a
// client was subscribed is counted per client.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/auth"
	"streamgate/config"
	"streamgate/internal/balancer"
	"streamgate/internal/redistest"
	"streamgate/simulator"
)

// continuityClients is the number of streaming clients; each has a key of
// its own (clientKey), as separate applications do.
const continuityClients = 6

// clientKey returns the key ID and secret of streaming client i.
func clientKey(i int) (string, string) {
	return fmt.Sprintf("00000000-0000-4000-8000-c0c0c0c0%04x", i), fmt.Sprintf("continuity-client-secret-%04x", i)
}

// continuityConfig is one replica of mainnet in front of the simulator at
// upstream, sharing limits and upstream WebSocket connections through the
// Redis at redisURL, with the demo key and every client's key. Every other
// setting is its default.
func continuityConfig(upstream, redisURL string) string {
	var keys strings.Builder
	for i := range continuityClients {
		id, secret := clientKey(i)
		fmt.Fprintf(&keys, "      - {id: %s, secret: %s}\n", id, secret)
	}
	return fmt.Sprintf(`server:
  admin_listen: "127.0.0.1:0"
  shutdown_timeout: 20s
networks:
  mainnet:
    listen: "127.0.0.1:0"
    upstream:
      url: %s
      ws_url: ws%s
      api_key: %s
      api_secret: %s
      budget: {rps: 8, burst: 8}
auth:
  anonymous_rate: {rps: 0}
ratelimit:
  backend: redis
  redis: {url: "%s"}
teams:
  - name: demo
    networks: [mainnet]
    feeds: ["*"]
    keys:
      - {id: %s, secret: %s}
%s`, upstream, strings.TrimPrefix(upstream, "http"), simulator.OrgKeyID, simulator.OrgKeySecret, redisURL,
		config.DemoKeyID, config.DemoKeySecret, keys.String())
}

// cluster is the deployment under test: the replicas behind the balancer.
type cluster struct {
	t     *testing.T
	sim   *simulator.Simulator
	redis *redistest.Server
	cfg   string
	bal   *balancer.Balancer
	reps  []*proc
}

func startCluster(t *testing.T, replicas int) *cluster {
	t.Helper()
	srv := redistest.New(t) // skips when redis-server is missing
	c := startFleet(t, replicas, func(upstream string) string { return continuityConfig(upstream, srv.URL()) })
	c.redis = srv
	return c
}

// startFleet starts the simulator, the balancer and replicas gateways
// whose configuration cfg makes from the simulator's URL.
func startFleet(t *testing.T, replicas int, cfg func(upstream string) string) *cluster {
	t.Helper()
	simCfg := simulator.Default() // 10 requests per second per key and endpoint, the strictest count
	simCfg.HAOrigins = []string{"001", "002"}
	sim, err := simulator.New(simCfg)
	require.NoError(t, err)
	t.Cleanup(func() { sim.Close() })
	up := httptest.NewServer(sim.Handler(simulator.Mainnet))
	t.Cleanup(up.Close)
	bal, err := balancer.Listen("127.0.0.1:0", balancer.Options{Interval: 100 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { bal.Close() })
	c := &cluster{t: t, sim: sim, cfg: cfg(up.URL), bal: bal}
	for range replicas {
		c.reps = append(c.reps, c.startReplica())
	}
	return c
}

// startReplica starts a replica, waits until it is ready and the balancer
// routes to it.
func (c *cluster) startReplica() *proc {
	c.t.Helper()
	p := start(c.t, c.cfg, []string{"mainnet"})
	waitReady(c.t, p)
	addr := strings.TrimPrefix(p.net["mainnet"], "http://")
	c.bal.Add(balancer.Backend{Addr: addr, Ready: p.admin + "/readyz"})
	require.Eventually(c.t, func() bool { return slices.Contains(c.bal.Ready(), addr) }, 20*time.Second, 10*time.Millisecond,
		"the balancer never saw the new replica ready")
	return p
}

// replace stops replica i with sig, as a rolling deploy or a crash does,
// then starts its successor, and returns when the successor is ready. The
// balancer learns of the stop from /readyz alone (as a Service does), and
// forgets the old address once the process has exited.
func (c *cluster) replace(i int, sig syscall.Signal) {
	c.t.Helper()
	old := c.reps[i]
	old.signal(sig)
	old.wait(60 * time.Second)
	c.bal.Remove(strings.TrimPrefix(old.net["mainnet"], "http://"))
	c.reps[i] = c.startReplica()
}

// holder returns the index of the replica holding the lease of a shared
// upstream connection of mainnet, or -1 when none says it holds one.
func (c *cluster) holder() int {
	c.t.Helper()
	for i, p := range c.reps {
		for _, m := range scrape(c.t, p)["streamgate_ws_share_chunk_holder"].GetMetric() {
			if labelsOf(m)["network"] == simulator.Mainnet && value(m) == 1 {
				return i
			}
		}
	}
	return -1
}

// streamClient is one application streaming the same streams throughout,
// through the balancer: it reconnects one second after any close or failed
// connect, as the SDKs do. An HA client discovers the origins with a signed
// HEAD / and holds one connection per origin (one when none is
// advertised, as the SDKs fall back); it keeps a report only when its
// observationsTimestamp is above the highest kept for its stream, as the
// SDKs deduplicate. A plain client keeps every report it receives.
type streamClient struct {
	name  string
	ha    bool
	feeds []string
	base  string // ws://balancer
	s     *signer
	phase *atomic.Int32 // the scenario under way, stamped on each report

	mu       sync.Mutex
	got      map[string][]received // per stream, the reports kept, in arrival order
	highest  map[string]int64
	twins    int // HA: reports dropped by the deduplication
	connects int // connections opened
	origins  []string
	lastErr  string
}

type received struct {
	ts    int64
	phase int32
}

func (sc *streamClient) run(ctx context.Context, wg *sync.WaitGroup) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		origins := []string{""}
		if sc.ha {
			origins = sc.discover(ctx)
		}
		sc.mu.Lock()
		sc.origins = origins
		sc.mu.Unlock()
		for _, origin := range origins {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					sc.stream(ctx, origin)
					select { // the SDKs' reconnect delay
					case <-ctx.Done():
					case <-time.After(time.Second):
					}
				}
			}()
		}
	}()
}

// failed notes an error the client cannot go on from.
func (sc *streamClient) failed(err error) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.lastErr = err.Error()
}

// discover asks for the origins with a signed HEAD /, retrying every
// second until it has an answer.
func (sc *streamClient) discover(ctx context.Context) []string {
	httpBase := "http" + strings.TrimPrefix(sc.base, "ws")
	for ctx.Err() == nil {
		req, err := http.NewRequestWithContext(ctx, http.MethodHead, httpBase+"/", nil)
		if err != nil {
			sc.failed(err)
			return nil
		}
		sc.s.sign(req)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				v := strings.Trim(resp.Header.Get(simulator.OriginsHeader), "{}")
				if v == "" {
					return []string{""}
				}
				return strings.Split(v, ",")
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	return nil
}

// stream holds one connection until it ends.
func (sc *streamClient) stream(ctx context.Context, origin string) {
	target := "/api/v1/ws?feedIDs=" + strings.Join(sc.feeds, ",")
	req, err := http.NewRequest(http.MethodGet, "http"+strings.TrimPrefix(sc.base, "ws")+target, nil)
	if err != nil {
		sc.failed(err)
		return
	}
	sc.s.sign(req)
	h := http.Header{}
	for _, name := range []string{auth.HeaderAuthorization, auth.HeaderTimestamp, auth.HeaderSignature} {
		h.Set(name, req.Header.Get(name))
	}
	if origin != "" {
		h.Set(simulator.OriginHeader, origin)
	}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second) // the SDKs' connect timeout
	conn, _, err := websocket.Dial(dctx, sc.base+target, &websocket.DialOptions{HTTPHeader: h})
	cancel()
	if err != nil {
		sc.mu.Lock()
		sc.lastErr = err.Error()
		sc.mu.Unlock()
		return
	}
	defer conn.CloseNow()
	sc.mu.Lock()
	sc.connects++
	sc.mu.Unlock()
	for {
		_, b, err := conn.Read(ctx)
		if err != nil {
			sc.mu.Lock()
			sc.lastErr = err.Error()
			sc.mu.Unlock()
			return
		}
		var f struct {
			Report struct {
				FeedID                string `json:"feedID"`
				ObservationsTimestamp int64  `json:"observationsTimestamp"`
			} `json:"report"`
		}
		if json.Unmarshal(b, &f) != nil || f.Report.FeedID == "" {
			sc.mu.Lock()
			sc.lastErr = "a frame that is not a report: " + string(b[:min(len(b), 200)])
			sc.mu.Unlock()
			return // as the Go SDK closes on a frame it cannot read
		}
		sc.keep(f.Report.FeedID, f.Report.ObservationsTimestamp)
	}
}

func (sc *streamClient) keep(feed string, ts int64) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.ha {
		if ts <= sc.highest[feed] {
			sc.twins++
			return
		}
	}
	sc.highest[feed] = max(sc.highest[feed], ts)
	sc.got[feed] = append(sc.got[feed], received{ts: ts, phase: sc.phase.Load()})
}

func (sc *streamClient) highestOf(feed string) int64 {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.highest[feed]
}

// streamClients starts the continuityClients clients of feeds through the
// balancer (the last two HA), and waits until every one receives every
// stream.
func (c *cluster) streamClients(ctx context.Context, wg *sync.WaitGroup, feeds []string, phase *atomic.Int32) []*streamClient {
	t := c.t
	t.Helper()
	var clients []*streamClient
	for i := range continuityClients {
		id, secret := clientKey(i)
		sc := &streamClient{name: fmt.Sprintf("plain-%d", i), ha: i >= 4, feeds: feeds, base: "ws://" + c.bal.Addr(),
			s: newSigner(id, secret), phase: phase, got: map[string][]received{}, highest: map[string]int64{}}
		if sc.ha {
			sc.name = fmt.Sprintf("ha-%d", i-4)
		}
		clients = append(clients, sc)
		sc.run(ctx, wg)
	}
	require.Eventually(t, func() bool {
		for _, sc := range clients {
			for _, f := range feeds {
				if sc.highestOf(f) == 0 {
					return false
				}
			}
		}
		return true
	}, 30*time.Second, 50*time.Millisecond, "every client receives every stream")
	return clients
}

// settle marks the end of a scenario's window: it notes, per stream, the
// newest second the upstream has published, waits (at most 60 s) until
// some client has a second at least 2 later (the stream flows again after
// the event), then takes per stream the newest second any client has and
// waits (at most 60 s more) until every client has it.
func (c *cluster) settle(feeds []string, clients []*streamClient) map[string]int64 {
	t := c.t
	t.Helper()
	hi := map[string]int64{}
	deadline := time.Now().Add(60 * time.Second)
	for _, f := range feeds {
		_, published, ok := c.sim.Window(simulator.Mainnet, f)
		require.True(t, ok)
		for time.Now().Before(deadline) {
			for _, sc := range clients {
				hi[f] = max(hi[f], sc.highestOf(f))
			}
			if hi[f] >= published+2 {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for _, f := range feeds {
		for _, sc := range clients {
			hi[f] = max(hi[f], sc.highestOf(f))
		}
	}
	deadline = time.Now().Add(60 * time.Second)
	for _, sc := range clients {
		for _, f := range feeds {
			for sc.highestOf(f) < hi[f] && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
	return hi
}

// tally is what one client saw of one scenario.
type tally struct {
	missing    int      // (stream, second) pairs of the scenario's window never received
	repeated   int      // reports received during the scenario that the client already had
	repeatMost int      // the most times one (stream, second) pair came again
	disordered int      // reports received during the scenario after a later one of their stream
	first      []string // the first missing pairs
	odd        []string // the first pairs received twice or out of order
}

// count tallies scenario phase, whose window is (lo[feed], hi[feed]].
func (sc *streamClient) count(phase int32, lo, hi map[string]int64) tally {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	var t tally
	for _, feed := range sc.feeds {
		seen := map[int64]bool{}
		again := map[int64]int{}
		var top int64
		for _, r := range sc.got[feed] {
			if r.phase == phase {
				switch {
				case seen[r.ts]:
					t.repeated++
					again[r.ts]++
					t.repeatMost = max(t.repeatMost, again[r.ts])
					if len(t.odd) < 6 {
						t.odd = append(t.odd, fmt.Sprintf("twice %s…@%d", feed[:14], r.ts))
					}
				case r.ts < top:
					t.disordered++
					if len(t.odd) < 6 {
						t.odd = append(t.odd, fmt.Sprintf("late %s…@%d after %d", feed[:14], r.ts, top))
					}
				}
			}
			seen[r.ts] = true
			top = max(top, r.ts)
		}
		for ts := lo[feed] + 1; ts <= hi[feed]; ts++ {
			if !seen[ts] {
				t.missing++
				if len(t.first) < 6 {
					t.first = append(t.first, fmt.Sprintf("%s…@%d", feed[:14], ts))
				}
			}
		}
	}
	return t
}

// scenario is one event of a continuity test.
type scenario struct {
	name string
	run  func()
	// crash: a replica is SIGKILLed. Its clients' watermarks reach Redis
	// every 100 ms, so a plain client resuming elsewhere may get the
	// reports of those last milliseconds again: at least once, with at
	// most one repeat of a second per stream and crash (streams publish
	// once a second). Without a crash: exactly once.
	crash bool
}

// runScenarios runs each scenario in turn and settles after each (the
// window of the first starts once the clients have settled), then stops
// the clients, logs what each client saw of each scenario and checks it:
// every second of every stream once (plain clients) or at least once (HA):
// 0 missing, 0 repeated, 0 out of order.
func (c *cluster) runScenarios(feeds []string, clients []*streamClient, phase *atomic.Int32, stop func(), scenarios []scenario) {
	t := c.t
	t.Helper()
	lo := c.settle(feeds, clients)
	type row struct {
		scenario string
		crash    bool
		client   *streamClient
		tally
	}
	var rows []row
	for i, sc := range scenarios {
		phase.Store(int32(i + 1))
		t.Logf("scenario %d: %s", i+1, sc.name)
		sc.run()
		hi := c.settle(feeds, clients)
		for _, f := range feeds {
			assert.Greater(t, hi[f], lo[f], "%s: the clients received seconds of the scenario", sc.name)
		}
		for _, cl := range clients {
			rows = append(rows, row{sc.name, sc.crash, cl, cl.count(int32(i+1), lo, hi)})
		}
		lo = hi
	}
	stop()

	var report strings.Builder
	fmt.Fprintf(&report, "%-52s %-8s %8s %9s %11s %9s\n", "scenario", "client", "missing", "repeated", "disordered", "connects")
	for _, r := range rows {
		r.client.mu.Lock()
		fmt.Fprintf(&report, "%-52s %-8s %8d %9d %11d %9d %v %v\n", r.scenario, r.client.name, r.missing, r.repeated, r.disordered,
			r.client.connects, r.first, r.odd)
		r.client.mu.Unlock()
	}
	t.Logf("(stream, second) pairs per client and scenario:\n%s", report.String())
	for _, sc := range clients {
		t.Logf("%s: origins %q, connections %d, HA twins dropped %d, last error %q", sc.name, sc.origins, sc.connects, sc.twins, sc.lastErr)
	}
	for _, r := range rows {
		assert.Zero(t, r.missing, "%s: %s missed (stream, second) pairs: %v", r.scenario, r.client.name, r.first)
		if !r.client.ha {
			if r.crash {
				// At least once: of each stream at most one second twice
				// (the one delivered in the crashed replica's last 100 ms).
				assert.LessOrEqual(t, r.repeatMost, 1, "%s: %s received a report more than twice: %v", r.scenario, r.client.name, r.odd)
				assert.LessOrEqual(t, r.repeated, len(feeds), "%s: %s received more than one repeat per stream: %v", r.scenario, r.client.name, r.odd)
			} else {
				assert.Zero(t, r.repeated, "%s: %s received reports twice: %v", r.scenario, r.client.name, r.odd)
			}
			assert.Zero(t, r.disordered, "%s: %s received reports out of order: %v", r.scenario, r.client.name, r.odd)
		}
	}
}

// TestStreamingContinuity: three replicas behind a readiness-aware
// balancer, plain and HA clients of three streams, and one after another:
// a rolling restart of every replica (the second SIGKILLed), the replica
// holding the shared upstream connection killed, one upstream origin
// dropped, an upstream outage of 8 s (REST and WebSocket refused,
// connections dropped) and a Redis restart. After each, every client has
// received every second of every stream once (plain) or at least once
// (HA): 0 missing, 0 repeated, 0 out of order.
func TestStreamingContinuity(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process continuity test: not with -short")
	}
	c := startCluster(t, 3)
	feeds := feedIDs(t, c.reps[0].net["mainnet"], 3)
	var phase atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	clients := c.streamClients(ctx, &wg, feeds, &phase)
	c.runScenarios(feeds, clients, &phase, func() { cancel(); wg.Wait() }, []scenario{
		{"rolling restart (replica 2 SIGKILLed)", func() {
			c.replace(0, syscall.SIGTERM)
			c.replace(1, syscall.SIGKILL)
			c.replace(2, syscall.SIGTERM)
		}, true},
		{"holder of the shared upstream connection SIGKILLed", func() {
			var i int
			require.Eventually(t, func() bool { i = c.holder(); return i >= 0 }, 20*time.Second, 100*time.Millisecond,
				"a replica holds the shared upstream connection")
			c.replace(i, syscall.SIGKILL)
		}, true},
		{"upstream origin 001 dropped", func() {
			// Dropped as soon as a gateway holds a connection to it (the
			// other scenarios go on when none does).
			assert.Eventually(t, func() bool {
				return c.sim.DropWS(simulator.WSDrop{Network: simulator.Mainnet, Origin: "001", Abrupt: true}) > 0
			}, 30*time.Second, 100*time.Millisecond, "a gateway holds a connection to origin 001: the gateways discovered the upstream's two origins")
		}, false},
		{"upstream outage of 8 s", func() {
			// REST answers 5xx and upgrades 503 for 8 s; every open
			// connection is dropped at its start.
			require.NoError(t, c.sim.SetFaults(simulator.Faults{ErrorRate: 1, WSRefuse: http.StatusServiceUnavailable}))
			c.sim.DropWS(simulator.WSDrop{Abrupt: true})
			time.Sleep(8 * time.Second)
			require.NoError(t, c.sim.SetFaults(simulator.Faults{}))
		}, false},
		{"Redis restarted (empty)", func() {
			c.redis.Restart()
			time.Sleep(6 * time.Second) // two share leases: the replicas fall back, then share again
		}, false},
	})
	for _, sc := range clients {
		if sc.ha {
			assert.Len(t, sc.origins, 2, "%s: the gateway advertises two origins, so an HA client holds two connections", sc.name)
		}
	}
}
