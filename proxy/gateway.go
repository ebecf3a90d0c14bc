// Package proxy is the HTTP side of streamgate: it serves the Data Streams
// API to an organisation's teams, checks each request (signature, network,
// entitlement, quota) before anything reaches the upstream, answers what it
// can from the cache, and forwards the rest, re-signed with the
// organisation's credentials.
//
// One Gateway serves every configured network; Handler returns the handler
// of one network and Listeners the handlers per listen address, routing by
// Host where networks share one.
package proxy

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"streamgate/auth"
	"streamgate/cache"
	"streamgate/cache/shared"
	"streamgate/config"
	"streamgate/don"
	"streamgate/internal/apierror"
	"streamgate/ratelimit"
	"streamgate/realtime"
	"streamgate/wsgate"
)

// Deps are the collaborators of a Gateway. Cache is required; the rest have
// defaults.
type Deps struct {
	// Cache holds responses. Required.
	Cache *cache.Store
	// Shared, if non-nil, is the cache tier in Redis shared with the other
	// replicas, read and written by every fill of Cache.
	Shared *shared.Tier
	// Limiter counts team and key rates. If nil, a memory limiter is used.
	Limiter ratelimit.Limiter
	// Quota counts daily quotas. If nil, a memory quota is used.
	Quota ratelimit.Quota
	// Admitter, if non-nil, makes a signed request's rate and quota checks
	// in one call (Redis: one script, one round trip); where it cannot,
	// Limiter and Quota make them one by one.
	Admitter ratelimit.Admitter
	// Budgets spend the upstream budget of each network, by network name.
	// A network without one gets a memory budget of its own: the
	// configured budget always applies.
	Budgets map[string]ratelimit.Budget
	// ReplayStore, if non-nil, shares the record of signatures seen with
	// the other replicas (see auth.VerifierConfig.Shared). An
	// *auth.RedisReplay given with an Admitter must be on the Admitter's
	// Redis: a signed request's use is then recorded in its admission's
	// call (ratelimit.Admission.FirstUse), FirstUse being called only
	// while the checks go one by one.
	ReplayStore auth.ReplayStore
	// Transport makes upstream calls. If nil, a clone of
	// http.DefaultTransport tuned for one busy upstream host is used.
	Transport http.RoundTripper
	// Logger receives error and audit logs. If nil, nothing is logged.
	Logger *zap.Logger
	// AccessLog receives one line per request. If nil, Logger does.
	AccessLog *zap.Logger
	// Metrics records metrics. If nil, nothing is recorded.
	Metrics *Metrics
	// Usage, if non-nil, is the usage ledger: every answered request and
	// every upstream call made for one (usage.Ledger).
	Usage UsageRecorder
	// Now is the clock. If nil, time.Now. It must be Cache's Clock too: a
	// latest hit is looked up at the request's one reading of it.
	Now func() time.Time
	// Embedded gives, by network name, the upstream started for each
	// network whose configured upstream is "embedded".
	Embedded map[string]Upstream
	// Streams is the WebSocket endpoint (/api/v1/ws and the HA origins of
	// /): a network given a hub (Stream) serves it; nil: /api/v1/ws
	// answers 503 on every network.
	Streams *wsgate.Gate
	// Gates check the DON's signatures of the reports of each network
	// where they enter (don.Gate); a network without one checks none.
	Gates map[string]*don.Gate
	// Tracer, if non-nil, makes a server span per request (and the spans
	// of its cache tiers, budget wait and upstream attempts below it);
	// nil: no span at all.
	Tracer trace.Tracer
	// PropagateUpstream sends the traceparent of each upstream call to the
	// upstream (tracing.propagate_upstream).
	PropagateUpstream bool
}

// Upstream is an upstream's address and the organisation's credential
// there.
type Upstream struct {
	URL    string // root URL, http(s)
	APIKey string
	Secret []byte
}

// Gateway serves the API on every configured network. It is safe for
// concurrent use; Reload swaps teams, keys, limits and lifetimes while it
// serves.
type Gateway struct {
	pol      atomic.Pointer[policy]
	networks map[string]*network
	cache    *cache.Store
	limiter  ratelimit.Limiter
	admitter ratelimit.Admitter // nil: the checks one by one
	quota    ratelimit.Quota
	log      *zap.Logger
	auditLog *zap.Logger
	metrics  *Metrics
	now      func() time.Time

	// unknownHost answers a Host no network of a shared listener serves,
	// observed (access log, metrics, request ID) like every answer.
	unknownHost http.Handler
	streams     *wsgate.Gate // nil: no WebSocket endpoint

	replayStore  auth.ReplayStore
	replayRecord *auth.ReplayRecord // the signatures seen, kept across reloads
	replayLogged atomic.Int64       // Unix seconds of the last log line of a replay store failure

	tracer    trace.Tracer // nil: no spans
	propagate bool         // upstream calls carry the traceparent
}

// replayStoreFailed counts a failure of the shared replay store and logs it
// at most once a minute; the replica's own record decides meanwhile.
func (g *Gateway) replayStoreFailed(err error) {
	g.metrics.replayStoreError()
	now := time.Now().Unix()
	if last := g.replayLogged.Load(); now-last >= 60 && g.replayLogged.CompareAndSwap(last, now) {
		g.log.Warn("shared replay record unavailable; each replica checks replays on its own meanwhile", zap.Error(err))
	}
}

// New builds a Gateway for cfg, which must be valid (config.Parse
// validates). A network whose upstream is "embedded" calls the upstream the
// caller started for it, given in Deps.Embedded; cfg itself is not changed.
func New(cfg *config.Config, deps Deps) (*Gateway, error) {
	if deps.Cache == nil {
		return nil, errors.New("proxy: Deps.Cache is required")
	}
	g := &Gateway{
		networks:  map[string]*network{},
		streams:   deps.Streams,
		cache:     deps.Cache,
		limiter:   deps.Limiter,
		admitter:  deps.Admitter,
		quota:     deps.Quota,
		log:       deps.Logger,
		metrics:   deps.Metrics,
		now:       deps.Now,
		tracer:    deps.Tracer,
		propagate: deps.PropagateUpstream,
	}
	if g.log == nil {
		g.log = zap.NewNop()
	}
	g.auditLog = g.log.Named("audit")
	accessLog := deps.AccessLog
	if accessLog == nil {
		accessLog = g.log
	}
	if g.now == nil {
		g.now = time.Now
	}
	g.unknownHost = observe("unknown-host", accessLog, g.metrics, deps.Usage, deps.Tracer, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		refuseBody(w, r)
		writeError(w, apierror.New(http.StatusNotFound, "unknown host: no network is served under this name"))
	}))
	var err error
	if g.limiter == nil {
		if g.limiter, err = ratelimit.NewMemory(ratelimit.Options{Name: "team", Now: g.now}); err != nil {
			return nil, err
		}
	}
	if g.quota == nil {
		if g.quota, err = ratelimit.NewMemoryQuota(ratelimit.Options{Name: "daily", Now: g.now}); err != nil {
			return nil, err
		}
	}
	g.replayStore = deps.ReplayStore
	g.replayRecord = auth.NewReplayRecord()
	g.metrics.replayRecord(func() auth.ReplayStats { return g.pol.Load().verifier.Stats() })
	pol, err := g.buildPolicy(cfg)
	if err != nil {
		return nil, err
	}
	g.pol.Store(pol)

	transport := deps.Transport
	if transport == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConns = 512
		t.MaxIdleConnsPerHost = 256
		t.IdleConnTimeout = 90 * time.Second
		transport = t
	}
	var errs []error
	for _, name := range cfg.NetworkNames() {
		nc := cfg.Networks[name]
		up := Upstream{URL: nc.Upstream.URL, APIKey: nc.Upstream.APIKey, Secret: []byte(nc.Upstream.Secret().Reveal())}
		if nc.Upstream.Embedded() {
			var ok bool
			if up, ok = deps.Embedded[name]; !ok {
				errs = append(errs, fmt.Errorf("proxy: network %s: the embedded upstream was not started (Deps.Embedded)", name))
				continue
			}
		}
		base, err := url.Parse(up.URL)
		if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
			errs = append(errs, fmt.Errorf("proxy: network %s: upstream url must be http(s), got %q", name, up.URL))
			continue
		}
		base.Path, base.RawPath = strings.TrimRight(base.Path, "/"), ""
		budget := deps.Budgets[name]
		if budget == nil {
			if budget, err = ratelimit.NewMemoryBudget(ratelimit.Options{Name: "budget", Network: name, Now: g.now,
				BudgetMargin: nc.Upstream.BudgetMargin, Logger: g.log}); err != nil {
				return nil, err
			}
		}
		g.networks[name] = g.newNetwork(name, nc, up, base, budget, transport, accessLog, deps, cfg.Cache.LatestBulkRefresh)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return g, nil
}

// newNetwork builds a network's owners, each with what it needs, and its
// chain.
func (g *Gateway) newNetwork(name string, nc *config.Network, up Upstream, base *url.URL, budget ratelimit.Budget,
	transport http.RoundTripper, accessLog *zap.Logger, deps Deps, bulkRefresh bool) *network {
	org := &credential{key: up.APIKey, secret: up.Secret}
	client := &upstream{
		network: name,
		base:    base,
		client:  &http.Client{Transport: transport, CheckRedirect: noRedirects},
		timeout: nc.Upstream.Timeout,
		retries: nc.Upstream.Retries,
		budget:  budget,
		limit:   budgetLimit(nc.Upstream.Budget),
		log:     g.log,
		metrics: g.metrics,
		store:   g.cache,

		propagate: g.propagate,
	}
	records := &checker{network: name, gate: deps.Gates[name], metrics: g.metrics}
	ans := &answerer{network: name, gate: deps.Gates[name], metrics: g.metrics, now: g.now, store: g.cache}
	catalog := &catalogViews{network: name, store: g.cache, up: client, org: org, pol: &g.pol,
		metrics: g.metrics, ans: ans, now: g.now}
	reads := &readCheck{network: name, org: org, catalog: catalog, pol: &g.pol, auditLog: g.auditLog, now: g.now}
	src := sourceDeps{network: name, reads: reads, store: g.cache, up: client, records: records, ans: ans,
		pol: &g.pol, metrics: g.metrics, now: g.now}
	entries := &latestEntries{network: name, org: org, store: g.cache, records: records, pol: &g.pol, now: g.now}
	fresh := newRefresher(refreshDeps{network: name, org: org, maxBulk: nc.Upstream.MaxBulk, up: client,
		records: records, entries: entries, store: g.cache, shared: deps.Shared, pol: &g.pol,
		metrics: g.metrics, now: g.now}, bulkRefresh)
	n := &network{
		name:    name,
		listen:  nc.Listen,
		hosts:   nc.Hosts,
		up:      client,
		org:     org,
		reads:   reads,
		catalog: catalog,
		ans:     ans,
		report:  &reportSource{src},
		latest:  &latestSource{sourceDeps: src, org: org, fresh: fresh, entries: entries},
		page:    &pageSource{src},
		bulk:    &bulkSource{sourceDeps: src, shared: deps.Shared, maxBulk: nc.Upstream.MaxBulk},
		fresh:   fresh,
		gate:    deps.Gates[name],
		quota:   g.quota,
		pol:     &g.pol,
		metrics: g.metrics,
		now:     g.now,
	}
	passPaths := map[string]bool{}
	for _, p := range nc.PassThrough {
		passPaths[p] = true
	}
	n.rp = n.reverseProxy(base, transport)
	n.handler = chain(name, accessLog, g.metrics, deps.Usage, g.tracer,
		requestCheck{passPaths: passPaths},
		authenticator{network: name, pol: &g.pol, metrics: g.metrics, now: g.now},
		admission{network: name, limiter: g.limiter, quota: g.quota, admitter: g.admitter, pol: &g.pol, metrics: g.metrics, now: g.now},
		recorder{network: name, pol: &g.pol, metrics: g.metrics},
		http.HandlerFunc(n.serveRoute))
	return n
}

func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// budgetLimit is what the gateway spends of an upstream budget: the
// configured rate with a burst of 1, whatever the configured burst, so
// that the budget spaces the calls 1/rps + budget_margin apart (the margin
// is the Budget's, see ratelimit.Options.BudgetMargin). A burst above 1
// would let a quiet endpoint send it at once and then the refill within
// the same second: up to twice the rate in one calendar or sliding second,
// and calls closer than 1/rps, which an upstream counting as a token
// bucket of burst 1 refuses. Spaced calls hold under all three countings;
// the margin absorbs the jitter that brings two calls closer together as
// the upstream sees them.
func budgetLimit(r config.Rate) ratelimit.Limit {
	return ratelimit.Limit{Rate: r.RPS, Burst: 1}
}

// Close stops the gateway's background work (the latest refreshers);
// requests still waiting for a refresh get an error.
func (g *Gateway) Close() {
	for _, n := range g.networks {
		n.fresh.close()
	}
}

// Stream gives network name the real-time hub of its stream partition
// part ("" the network's own; partition.go): the network answers
// /api/v1/ws from it (its endpoint, Deps.Streams's on the hubs) and latest
// from its stream too, each to the teams of the partition; a network
// without one answers /api/v1/ws with 503 and latest from REST only, and
// so does a partition without one to its teams. The gateway is built
// first, each hub then with what it takes from the gateway (Backfill,
// DiscoveryBudget), and handed over here, before the gateway serves a
// request (Handler): not safe for concurrent use with requests. Unknown
// networks are ignored.
func (g *Gateway) Stream(name, part string, hub *realtime.Hub) {
	n := g.networks[name]
	if n == nil {
		return
	}
	hubs := maps.Clone(n.latest.hubs)
	if hubs == nil {
		hubs = map[string]*realtime.Hub{}
	}
	hubs[part] = hub
	n.latest.hubs = hubs
	n.streams = g.streams.Network(name, hubs, n)
}

// Handler returns the handler of one network, or nil.
func (g *Gateway) Handler(name string) http.Handler {
	if n, ok := g.networks[name]; ok {
		return n.handler
	}
	return nil
}

// Networks returns the names of the networks, sorted.
func (g *Gateway) Networks() []string {
	names := make([]string, 0, len(g.networks))
	for name := range g.networks {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// Ready reports whether every network's upstream has answered at least once.
func (g *Gateway) Ready() bool {
	for _, n := range g.networks {
		if !n.up.answered.Load() {
			return false
		}
	}
	return true
}

// Warm loads the catalog of every network (from the upstream or from the
// shared cache tier) and makes sure its upstream answers this replica
// (a view from the shared tier was fetched by another replica: then one
// call is made), which makes Ready true; it tries a network whose
// upstream fails again with backoff (250 ms doubling to 30 s, with jitter)
// until it succeeds or ctx ends. It logs a network's first failure and its
// recovery, and returns nil once every network is warm, else ctx's error.
func (g *Gateway) Warm(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, name := range g.Networks() {
		n := g.networks[name]
		wg.Go(func() {
			for attempt := 0; ; attempt++ {
				_, _, err := n.catalog.view(ctx, viewHidden, n.org, n.now())
				if err == nil && !n.up.answered.Load() {
					// The view came from the shared cache tier, fetched by
					// another replica: that says nothing of whether this
					// replica reaches the upstream. Ask it (one call,
					// within the budget); any answer will do.
					_, err = n.up.get(ctx, "discovery", "/api/v1/discovery", n.org)
					if n.up.answered.Load() {
						err = nil
					}
				}
				if err == nil {
					if attempt > 0 {
						g.log.Info("catalog warm-up succeeded", zap.String("network", n.name), zap.Int("attempts", attempt+1))
					}
					return
				}
				if attempt == 0 {
					g.log.Warn("catalog warm-up failed; trying again in the background until the upstream answers",
						zap.String("network", n.name), zap.Error(err))
				}
				d := min(250*time.Millisecond<<min(attempt, 7), 30*time.Second)
				t := time.NewTimer(d/2 + rand.N(d/2))
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
			}
		})
	}
	wg.Wait()
	return ctx.Err()
}
