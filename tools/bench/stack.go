package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/time/rate"

	"streamgate/cache"
	"streamgate/config"
	"streamgate/feedid"
	"streamgate/internal/testing/replicaset"
	"streamgate/proxy"
	"streamgate/server"
	"streamgate/upstreamsim"
)

// stackConfig shapes the in-process stack of a scenario.
type stackConfig struct {
	LatestTTL time.Duration // cache.latest_ttl; 0: the default (500ms)
	// TLS, when set, is every network's tls block: the gateway serves
	// https.
	TLS *config.TLS
	// Tracing is the gateway's tracing section; the zero value: off.
	Tracing    config.Tracing
	ClientKeys int    // keys of the demo team, one per client
	Teams      int    // further teams, each with one key of its own
	LogLevel   string // "off", or a level of the access log (JSON, discarded)
	// WS turns on the upstream WebSocket (the hub) and lets one team hold
	// TeamConnections client WebSockets; WSPinned are mainnet streams the
	// hub always carries.
	WS              bool
	TeamConnections int
	WSPinned        []feedid.ID
	// SimRateLimit turns the simulator's own per-key, per-endpoint,
	// per-network rate limit on at this many requests per second, counted
	// as SimRateMode says (the zero value: a token bucket, of SimBurst, or
	// as many of burst as of rate when SimBurst is 0); 0 leaves it off.
	SimRateLimit int
	SimRateMode  upstreamsim.RateMode
	SimBurst     int
	// Budget is the gateway's upstream budget on both networks; zero:
	// 100000 calls per second per endpoint.
	Budget config.Rate
	// BudgetMargin is the budget_margin of both networks when set; 0
	// keeps the default.
	BudgetMargin time.Duration
	// Freshness overrides the cache's latest_max_stale, latest_max_wait and
	// latest_bulk_refresh; nil keeps the defaults.
	Freshness *freshness
	// NoLatestFromStream sets realtime.latest_from_stream to false.
	NoLatestFromStream bool
	// TeamQuota gives the demo team a rate and a daily quota too large to
	// refuse anything, so that both are checked and advertised in the
	// RateLimit headers of every answer.
	TeamQuota bool
}

// freshness is the stale-while-revalidate part of the cache section.
type freshness struct {
	MaxStale    time.Duration // cache.latest_max_stale
	MaxWait     time.Duration // cache.latest_max_wait
	BulkRefresh bool          // cache.latest_bulk_refresh
}

// stack is the simulator and a gateway in front of it, built by
// server.New as cmd/streamgate builds it (cache, in-memory limits and
// budgets, metrics, the access log), each network on its own loopback
// listener: a replica set of one (internal/testing/replicaset).
//
// It departs from the demo configuration in what a load test needs: the
// simulator's per-key rate limit is off, the upstream budget is 100000
// calls per second per endpoint, and the teams and anonymous clients have
// no rate limit, so that what is measured is the gateway's work and not a
// limit doing its job. A scenario that measures the budget itself
// (freshness) turns the simulator's limit on and sets the budget.
type stack struct {
	set      *replicaset.Set
	sim      *upstreamsim.Simulator
	gw       *proxy.Gateway
	store    *cache.Store
	cfg      *config.Config
	gateway  map[string]string // network → base URL of the gateway
	upstream map[string]string // network → base URL of the simulator

	clientKeys []key // of the demo team
	teamKeys   []key // one per further team
	bulk       bulkCounter

	srv *server.Server
}

// bulkCounter counts the bulk calls that reach the simulator and the
// stream IDs they ask for (the simulator's own counters count requests).
type bulkCounter struct {
	calls, streams atomic.Int64
}

func (b *bulkCounter) reset() { b.calls.Store(0); b.streams.Store(0) }

func (b *bulkCounter) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == upstreamsim.EndpointBulk {
			b.calls.Add(1)
			if ids := r.URL.Query().Get("feedIDs"); ids != "" {
				b.streams.Add(int64(strings.Count(ids, ",") + 1))
			}
		}
		next.ServeHTTP(w, r)
	})
}

// benchKey is the i-th generated key.
func benchKey(kind string, i int) (string, string) {
	id := fmt.Sprintf("00000000-0000-4000-8000-%s%08x", kind, i)
	return id, fmt.Sprintf("bench-%s-secret-%08x", kind, i)
}

func startStack(sc stackConfig) (*stack, error) {
	s := &stack{gateway: map[string]string{}}
	restricted, err := feedid.ParseAll(upstreamsim.RestrictedStreams())
	if err != nil {
		return nil, fmt.Errorf("bench: the simulator's restricted streams: %w", err)
	}
	for i := range sc.ClientKeys {
		id, secret := benchKey("c", i)
		s.clientKeys = append(s.clientKeys, key{ID: id, Secret: []byte(secret)})
	}
	for i := range sc.Teams {
		id, secret := benchKey("t", i)
		s.teamKeys = append(s.teamKeys, key{ID: id, Secret: []byte(secret)})
	}
	log, err := benchLogger(sc.LogLevel)
	if err != nil {
		return nil, err
	}
	set, err := replicaset.Start(replicaset.Config{
		UpstreamConfig: replicaset.UpstreamConfig{
			SimConfig: func(simCfg *upstreamsim.Config) {
				simCfg.RateLimit, simCfg.Burst = 0, 0
				if sc.SimRateLimit > 0 {
					simCfg.RateLimit, simCfg.RateMode, simCfg.Burst = rate.Limit(sc.SimRateLimit), sc.SimRateMode, sc.SimRateLimit
					if sc.SimBurst > 0 {
						simCfg.Burst = sc.SimBurst
					}
				}
			},
			Wrap: func(_ string, h http.Handler) http.Handler { return s.bulk.wrap(h) },
		},
		Replicas: 1,
		WS:       sc.WS,
		Gateway:  func(_ *replicaset.Upstream, _ int, cfg *config.Config) { sc.configure(cfg, s, restricted) },
		// The gateway as the binary builds it.
		Options: func(int) server.Options { return server.Options{Logger: log} },
	})
	if err != nil {
		return nil, fmt.Errorf("bench configuration: %w", err)
	}
	r := set.Replicas()[0]
	s.set, s.sim, s.upstream, s.srv, s.cfg = set, set.Sim, set.URL, r.Server, r.Config
	s.gw, s.store = s.srv.Gateway(), s.srv.Cache()
	for _, name := range s.gw.Networks() {
		s.gateway[name] = r.Base(name)
	}
	return s, nil
}

// configure makes cfg, config.Default() pointed at the simulator, the
// gateway sc describes, with the keys of s.
func (sc stackConfig) configure(cfg *config.Config, s *stack, restricted config.StreamIDs) {
	if sc.Tracing.OTLPEndpoint != "" {
		cfg.Tracing = sc.Tracing
	}
	if sc.LatestTTL > 0 {
		cfg.Cache.LatestTTL = sc.LatestTTL
	}
	if f := sc.Freshness; f != nil {
		cfg.Cache.LatestMaxStale, cfg.Cache.LatestMaxWait, cfg.Cache.LatestBulkRefresh = f.MaxStale, f.MaxWait, f.BulkRefresh
	}
	if sc.NoLatestFromStream {
		cfg.Realtime.LatestFromStream = false
	}
	budget := sc.Budget
	if budget == (config.Rate{}) {
		budget = config.Rate{RPS: 100000, Burst: 100000}
	}
	for name, n := range cfg.Networks {
		up := &n.Upstream
		up.Budget = budget
		if sc.BudgetMargin > 0 {
			up.BudgetMargin = sc.BudgetMargin
		}
		if sc.WS && name == mainnet {
			up.WSPinned = sc.WSPinned
		}
		n.TLS = sc.TLS
	}
	if sc.TeamConnections > 0 {
		cfg.Realtime.TeamConnections = sc.TeamConnections
	}
	cfg.Auth.AnonymousRate = config.Rate{} // all clients share one address here
	demo := cfg.Team(config.DemoTeam)
	demo.Rate = config.Rate{}
	if sc.TeamQuota {
		demo.Rate, demo.DailyQuota = config.Rate{RPS: 1_000_000, Burst: 1_000_000}, 1_000_000_000_000
	}
	for _, k := range s.clientKeys {
		demo.Keys = append(demo.Keys, config.Key{ID: k.ID, Secret: config.Secret(k.Secret)})
	}
	for i, k := range s.teamKeys {
		t := config.Team{
			Name:     fmt.Sprintf("team-%02d", i),
			Networks: []string{"mainnet", "testnet"},
			Feeds:    config.StreamIDs{config.AllFeedsWildcard},
			Keys:     []config.Key{{ID: k.ID, Secret: config.Secret(k.Secret)}},
		}
		if i%2 == 1 { // every other team may read five streams only
			t.Feeds = restricted
		}
		cfg.Teams = append(cfg.Teams, t)
	}
}

// warm waits for the catalog warm-up the server starts with.
func (s *stack) warm(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	select {
	case <-s.srv.Warmed():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("catalog warm-up: %w", ctx.Err())
	}
}

// resetCounters sets the simulator's counters and the bulk counter to zero.
func (s *stack) resetCounters() {
	s.sim.ResetCounters()
	s.bulk.reset()
}

// quiesce waits, at most limit, until no latest or bulk call has reached
// the simulator for idle: the gateway's latest refresher then holds no
// pending refresh (one pending makes a call at least every 100 ms within
// the freshness scenario's budget). It reports whether that happened.
//
// The freshness scenario calls it before Close: closing a gateway whose
// bulk refresher still holds two or more pending streams does not return
// (the bulk worker, its context cancelled, fails each call at once and
// takes the same streams again, spinning), so the load is let to settle
// first.
func (s *stack) quiesce(idle, limit time.Duration) bool {
	calls := func() int64 {
		c := s.sim.Counters()
		var n int64
		for _, network := range []string{upstreamsim.Mainnet, upstreamsim.Testnet} {
			n += c.ByEndpoint(network, upstreamsim.EndpointLatest) + c.ByEndpoint(network, upstreamsim.EndpointBulk)
		}
		return n
	}
	last, since := calls(), time.Now()
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		if n := calls(); n != last {
			last, since = n, time.Now()
		} else if time.Since(since) >= idle {
			return true
		}
	}
	return false
}

// Close stops the servers at once (nothing is drained: the load is over)
// and releases the simulator and the cache.
func (s *stack) Close() { s.set.Close() }

// benchLogger is a logger with the encoding of cmd/streamgate's
// (server.NewLogger: JSON, ISO 8601 times) at level, writing to
// io.Discard unbuffered: the access log's encoding is measured, the
// terminal is not. "off" is no logger at all.
func benchLogger(level string) (*zap.Logger, error) {
	if level == "off" {
		return zap.NewNop(), nil
	}
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("-log: %w", err)
	}
	if l := config.LogLevel(lvl.String()); l.ZapLevel() == lvl {
		return server.NewLogger(config.Log{Level: l, Format: config.LogFormatJSON}, zapcore.AddSync(io.Discard)), nil
	}
	return nil, fmt.Errorf("-log: %q is not one of debug, info, warn, error, off", level)
}

// startWarmStack starts the stack of the request scenarios (latest_ttl of
// the flags, a key per client) and warms it; the caller closes it.
func startWarmStack(ctx context.Context, o *options) (*stack, error) {
	s, err := startStack(stackConfig{LatestTTL: o.latestTTL, ClientKeys: o.conc, LogLevel: o.logLevel})
	if err != nil {
		return nil, err
	}
	if err := s.warm(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}
