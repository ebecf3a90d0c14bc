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
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/config"
	"streamgate/internal/testing/fleet"
	"streamgate/internal/testing/redistest"
	"streamgate/upstreamsim"
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
%s`, upstream, strings.TrimPrefix(upstream, "http"), upstreamsim.OrgKeyID, upstreamsim.OrgKeySecret, redisURL,
		config.DemoKeyID, config.DemoKeySecret, keys.String())
}

// cluster is the deployment under test: the replicas behind the balancer
// (a fleet.Fleet) and, from startCluster, the Redis they share.
type cluster struct {
	*fleet.Fleet
	t      *testing.T
	redis  *redistest.Server
	notify fleet.Notifier // woken by every report a client keeps
}

func startCluster(t *testing.T, replicas int) *cluster {
	t.Helper()
	srv := redistest.New(t) // skips when redis-server is missing
	c := startFleet(t, replicas, func(upstream string) string { return continuityConfig(upstream, srv.URL()) })
	c.redis = srv
	return c
}

// startFleet starts the simulator (two HA origins), the balancer and
// replicas gateways whose configuration cfg makes from the simulator's URL.
func startFleet(t *testing.T, replicas int, cfg func(upstream string) string) *cluster {
	t.Helper()
	simCfg := upstreamsim.Default() // 10 requests per second per key and endpoint, the strictest count
	simCfg.HAOrigins = []string{"001", "002"}
	f, err := fleet.Start(fleet.Config{Binary: binary, Dir: t.TempDir(), Replicas: replicas, Simulator: &simCfg,
		Gateway: cfg, Started: func(p *fleet.Proc) { watch(t, p) }})
	require.NoError(t, err)
	t.Cleanup(f.Close)
	return &cluster{Fleet: f, t: t}
}

// replace stops replica i with sig, as a rolling deploy or a crash does,
// then starts its successor, and returns when the successor is ready.
func (c *cluster) replace(i int, sig syscall.Signal) {
	c.t.Helper()
	require.NoError(c.t, c.Replace(i, sig))
}

// holder returns the index of the replica holding the lease of a shared
// upstream connection of mainnet, or -1 when none says it holds one.
func (c *cluster) holder() int {
	i, err := c.Holder()
	assert.NoError(c.t, err)
	return i
}

// streamClients starts the continuityClients clients of feeds through the
// balancer (the last two HA), each reconnecting as the SDKs do and
// stamping each report with phase, and waits until every one receives
// every stream.
func (c *cluster) streamClients(ctx context.Context, wg *sync.WaitGroup, feeds []string, phase *atomic.Int32) []*fleet.Client {
	t := c.t
	t.Helper()
	var clients []*fleet.Client
	for i := range continuityClients {
		id, secret := clientKey(i)
		cfg := fleet.ClientConfig{Name: fmt.Sprintf("plain-%d", i), HA: i >= 4, Feeds: feeds, Base: c.Base(),
			Sign: newSigner(id, secret).sign, Phase: phase, Notify: &c.notify}
		if cfg.HA {
			cfg.Name = fmt.Sprintf("ha-%d", i-4)
		}
		sc := fleet.NewClient(cfg)
		clients = append(clients, sc)
		sc.Run(ctx, wg)
	}
	require.True(t, c.notify.Await(ctx, 30*time.Second, func() bool {
		for _, sc := range clients {
			for _, f := range feeds {
				if sc.Highest(f) == 0 {
					return false
				}
			}
		}
		return true
	}), "every client receives every stream")
	return clients
}

// settle marks the end of a scenario's window (see fleet.Fleet.Settle).
func (c *cluster) settle(feeds []string, clients []*fleet.Client) map[string]int64 {
	c.t.Helper()
	hi, err := c.Settle(context.Background(), &c.notify, feeds, clients)
	require.NoError(c.t, err)
	return hi
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
func (c *cluster) runScenarios(feeds []string, clients []*fleet.Client, phase *atomic.Int32, stop func(), scenarios []scenario) {
	t := c.t
	t.Helper()
	lo := c.settle(feeds, clients)
	type row struct {
		scenario string
		crash    bool
		client   *fleet.Client
		fleet.Tally
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
			rows = append(rows, row{sc.name, sc.crash, cl, cl.Count(int32(i+1), lo, hi)})
		}
		lo = hi
	}
	stop()

	var report strings.Builder
	fmt.Fprintf(&report, "%-52s %-8s %8s %9s %11s %9s\n", "scenario", "client", "missing", "repeated", "disordered", "connects")
	for _, r := range rows {
		fmt.Fprintf(&report, "%-52s %-8s %8d %9d %11d %9d %v %v\n", r.scenario, r.client.Name(), r.Missing, r.Repeated, r.Disordered,
			r.client.Stats().Connects, r.First, r.Odd)
	}
	t.Logf("(stream, second) pairs per client and scenario:\n%s", report.String())
	for _, sc := range clients {
		st := sc.Stats()
		t.Logf("%s: origins %q, connections %d, HA twins dropped %d, last error %q", sc.Name(), st.Origins, st.Connects, st.Twins, st.LastErr)
	}
	for _, r := range rows {
		name := r.client.Name()
		assert.Zero(t, r.Missing, "%s: %s missed (stream, second) pairs: %v", r.scenario, name, r.First)
		if !r.client.HA() {
			if r.crash {
				// At least once: of each stream at most one second twice
				// (the one delivered in the crashed replica's last 100 ms).
				assert.LessOrEqual(t, r.RepeatMost, 1, "%s: %s received a report more than twice: %v", r.scenario, name, r.Odd)
				assert.LessOrEqual(t, r.Repeated, len(feeds), "%s: %s received more than one repeat per stream: %v", r.scenario, name, r.Odd)
			} else {
				assert.Zero(t, r.Repeated, "%s: %s received reports twice: %v", r.scenario, name, r.Odd)
			}
			assert.Zero(t, r.Disordered, "%s: %s received reports out of order: %v", r.scenario, name, r.Odd)
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
	feeds := feedIDs(t, c.Replica(0).Net["mainnet"], 3)
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
				return c.Sim.DropWS(upstreamsim.WSDrop{Network: upstreamsim.Mainnet, Origin: "001", Abrupt: true}) > 0
			}, 30*time.Second, 100*time.Millisecond, "a gateway holds a connection to origin 001: the gateways discovered the upstream's two origins")
		}, false},
		{"upstream outage of 8 s", func() {
			// REST answers 5xx and upgrades 503 for 8 s; every open
			// connection is dropped at its start.
			require.NoError(t, c.Sim.SetFaults(upstreamsim.Faults{ErrorRate: 1, WSRefuse: http.StatusServiceUnavailable}))
			c.Sim.DropWS(upstreamsim.WSDrop{Abrupt: true})
			time.Sleep(8 * time.Second)
			require.NoError(t, c.Sim.SetFaults(upstreamsim.Faults{}))
		}, false},
		{"Redis restarted (empty)", func() {
			c.redis.Restart()
			time.Sleep(6 * time.Second) // two share leases: the replicas fall back, then share again
		}, false},
	})
	for _, sc := range clients {
		if sc.HA() {
			assert.Len(t, sc.Stats().Origins, 2, "%s: the gateway advertises two origins, so an HA client holds two connections", sc.Name())
		}
	}
}
