package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"streamgate/cache"
	"streamgate/cache/shared"
	"streamgate/config"
	"streamgate/internal/testing/replicaset"
	"streamgate/redisconn"
	"streamgate/server"
	"streamgate/upstreamsim"
)

// scenarioReplicas: the same load spread over 1, 2 and 3 replicas that
// share their limits and their cache tier through one Redis, in front of
// one simulator; upstream calls by endpoint for each count. Then the
// latency that the shared tier adds to a hit: the same reports read at a
// replica that holds them in memory and at one that finds them in Redis.
//
// Redis is -redis, else a redis-server from PATH started on a free
// loopback port (no persistence) for the run. -redis-mode runs the same
// load on a Sentinel set and on a Cluster too (started from PATH the same
// way), one mode after the other, and compares what each costs Redis
// per request.
func scenarioReplicas(ctx context.Context, o *options) error {
	if o.redis != "" && !slices.Equal(o.redisModes, []string{redisSingle}) {
		return errors.New("-redis is a single node: give it with -redis-mode single only")
	}
	up, err := replicaset.StartUpstream(replicaset.UpstreamConfig{
		SimConfig: func(c *upstreamsim.Config) { c.RateLimit, c.Burst = 0, 0 },
	})
	if err != nil {
		return err
	}
	defer up.Close()
	sim := up.Sim
	feeds, err := liveStreams(sim, mainnet, 10)
	if err != nil {
		return err
	}
	id, secret := benchKey("c", 0)
	k := key{ID: id, Secret: []byte(secret)}
	ttl := 500 * time.Millisecond
	if o.latestTTL > 0 {
		ttl = o.latestTTL
	}

	fmt.Fprintf(o.out, "replicas: %d clients for %v per run, spread over the replicas; mix: latest of %d streams 80 %%, "+
		"reports at 400 past timestamps 10 %%, bulk of the %d streams at 40 past timestamps 5 %%, discovery 5 %%; "+
		"latest_ttl %v; limits and cache tier in one Redis\n", o.conc, o.dur, len(feeds), len(feeds), ttl)
	base := time.Now().Add(-3 * time.Hour).Unix()
	next := func(n int) func(int64, int, *rand.Rand) call {
		return func(_ int64, w int, rng *rand.Rand) call {
			c := call{Base: w % n}
			switch r := rng.IntN(100); {
			case r < 80:
				c.Target = latestTarget(feeds[rng.IntN(len(feeds))])
			case r < 90:
				i := rng.IntN(400)
				c.Target = reportTarget(feeds[i%len(feeds)], base-int64(i))
			case r < 95:
				c.Target = bulkTarget(feeds, base-1000-int64(rng.IntN(40)))
			default:
				c.Target = "/api/v1/discovery?asset_class=Crypto"
			}
			return c
		}
	}
	var costs []redisCost
	var hits []hitCost
	for _, mode := range o.redisModes {
		rows, hit, err := replicasMode(ctx, o, mode, up, feeds, k, ttl, next)
		if err != nil {
			return err
		}
		for _, rw := range rows {
			costs = append(costs, rw.cost)
		}
		hits = append(hits, hit)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	if o.set["redis-mode"] {
		printRedisCosts(o, costs, hits)
	}
	return nil
}

// replicaRow is one run of the replicas scenario: n replicas, the load's
// result, the upstream calls by endpoint and the shared tier's counters.
type replicaRow struct {
	n                               int
	r                               *result
	latest, reports, bulk, discover int64
	saved, errs, waits, timeouts    float64
	// Redis calls that failed, every client of every replica: timed out,
	// refused by a breaker that timeouts opened, answered with an error
	// reply (NOSCRIPT before a script is loaded is one), and any other way.
	callTimeouts, callBreaker, callReply, callOther float64
	perReplica                                      []string // the refreshes each replica made
	cost                                            redisCost
}

// replicasMode runs the load over 1, 2 and 3 replicas that share the Redis
// of mode and prints their table, then the hit latency.
func replicasMode(ctx context.Context, o *options, mode string, up *replicaset.Upstream,
	feeds []string, k key, ttl time.Duration, next func(int) func(int64, int, *rand.Rand) call) (_ []replicaRow, _ hitCost, err error) {
	rd, err := startModeRedis(o, mode)
	if err != nil {
		return nil, hitCost{}, err
	}
	defer rd.Close()
	if o.set["redis-mode"] {
		fmt.Fprintf(o.out, "\n== Redis %s: %s\n", mode, rd.What)
	}
	var rows []replicaRow
	for n := 1; n <= 3; n++ {
		if err := rd.flush(ctx); err != nil {
			return nil, hitCost{}, err
		}
		reps, err := startReplicas(n, rd.Target, up, k, ttl)
		if err != nil {
			return nil, hitCost{}, err
		}
		cost, err := rd.begin(ctx, mode, n, reps)
		if err != nil {
			reps.close()
			return nil, hitCost{}, err
		}
		before := up.Sim.Counters()
		l := &load{Client: newClient(o.conc), Bases: reps.bases, Keys: []key{k}, Concurrency: o.conc,
			Duration: o.dur, MaxRequests: o.maxRequests, Next: next(n)}
		r := l.run(ctx)
		after := up.Sim.Counters()
		if err := cost.end(ctx, rd, reps, r); err != nil {
			reps.close()
			return nil, hitCost{}, err
		}
		d := func(endpoint string) int64 {
			return after.ByEndpoint(upstreamsim.Mainnet, endpoint) - before.ByEndpoint(upstreamsim.Mainnet, endpoint)
		}
		rw := replicaRow{n: n, r: r, cost: *cost, latest: d(upstreamsim.EndpointLatest), reports: d(upstreamsim.EndpointReport),
			bulk: d(upstreamsim.EndpointBulk), discover: d(upstreamsim.EndpointDiscovery),
			saved:    reps.sum("streamgate_cache_shared_fills_saved_total", "", ""),
			errs:     reps.sum("streamgate_cache_shared_lookups_total", "result", "error"),
			waits:    reps.sum("streamgate_cache_shared_lease_waits_total", "", ""),
			timeouts: reps.sum("streamgate_cache_shared_lease_waits_total", "outcome", "timeout")}
		rw.callTimeouts = reps.sum(redisconn.MetricCommandErrors, "kind", redisconn.KindTimeout)
		rw.callBreaker = reps.sum(redisconn.MetricCommandErrors, "kind", redisconn.KindCircuitOpen)
		rw.callReply = reps.sum(redisconn.MetricCommandErrors, "kind", redisconn.KindReply)
		rw.callOther = reps.sum(redisconn.MetricCommandErrors, "", "") - rw.callTimeouts - rw.callBreaker - rw.callReply
		for _, srv := range reps.srvs {
			one := &replicaSet{srvs: []*server.Server{srv}}
			rw.perReplica = append(rw.perReplica, fmt.Sprintf("%.0f/%.0f/%.0f",
				one.sum("streamgate_latest_refreshes_total", "via", "latest"),
				one.sum("streamgate_latest_refreshes_total", "via", "bulk"),
				one.sum("streamgate_latest_refreshes_total", "via", "shared")))
		}
		reps.close()
		rows = append(rows, rw)
		if ctx.Err() != nil {
			return nil, hitCost{}, ctx.Err()
		}
	}
	windows := int64(math.Ceil(float64(o.dur) / float64(ttl)))
	fmt.Fprintf(o.out, "\n%-9s %9s %9s %8s %8s %8s %9s %8s %6s %11s %11s %13s\n", "replicas", "requests", "req/s",
		"latest", "reports", "bulk", "discovery", "total", "vs 1", "fills saved", "lease waits", "redis errors")
	one := rows[0]
	total := func(rw replicaRow) int64 { return rw.latest + rw.reports + rw.bulk + rw.discover }
	for _, rw := range rows {
		fmt.Fprintf(o.out, "%-9d %9d %9.0f %8d %8d %8d %9d %8d %6s %11.0f %11.0f %13.0f\n", rw.n, rw.r.Requests, rw.r.rate(),
			rw.latest, rw.reports, rw.bulk, rw.discover, total(rw), ratio(float64(total(rw)), float64(total(one))),
			rw.saved, rw.waits, rw.errs)
	}
	fmt.Fprintf(o.out, "lease waits ended by the wait bound: %v (the rest: the holder's entry, or a takeover)\n", func() (out []float64) {
		for _, rw := range rows {
			out = append(out, rw.timeouts)
		}
		return out
	}())
	var callTimeouts, callBreaker, callReply, callOther []float64
	for _, rw := range rows {
		callTimeouts, callBreaker = append(callTimeouts, rw.callTimeouts), append(callBreaker, rw.callBreaker)
		callReply, callOther = append(callReply, rw.callReply), append(callOther, rw.callOther)
	}
	fmt.Fprintf(o.out, "Redis calls failed by 1, 2, 3 replicas: timed out %v, refused by an open breaker %v, error replies %v, other %v (a starved machine can time out; an error reply is Redis answering, as NOSCRIPT before a script is loaded; any other failure is a fault)\n",
		callTimeouts, callBreaker, callReply, callOther)
	fmt.Fprintf(o.out, "latest: ideal %d (%d streams × ceil(%v / %v)); latest and bulk calls (the refresher's bulk calls included) vs one replica: ",
		int64(len(feeds))*windows, len(feeds), o.dur, ttl)
	for _, rw := range rows[1:] {
		fmt.Fprintf(o.out, "%d: %s  ", rw.n, ratio(float64(rw.latest+rw.bulk), float64(one.latest+one.bulk)))
	}
	fmt.Fprintln(o.out)
	fmt.Fprintf(o.out, "scheduled latest refreshes by replica (single call / in a bulk call / taken from Redis):")
	for _, rw := range rows {
		fmt.Fprintf(o.out, "  %d: %v", rw.n, rw.perReplica)
	}
	fmt.Fprintln(o.out)
	for _, rw := range rows {
		printDetails(o.out, fmt.Sprintf("%d replicas", rw.n), rw.r)
	}
	hit, err := hitLatency(ctx, o, rd, up, k, feeds)
	return rows, hit, err
}

// hitLatency reads the same reports, one request at a time, at a replica
// that holds them in memory (an L1 hit) and at a replica that does not
// (an L1 miss answered from Redis), and reports both; then the tier's own
// lookup (Fill on a key held in Redis) without HTTP.
func hitLatency(ctx context.Context, o *options, rd *modeRedis, up *replicaset.Upstream, k key, feeds []string) (hitCost, error) {
	no := hitCost{mode: rd.Mode}
	if err := rd.flush(ctx); err != nil {
		return no, err
	}
	reps, err := startReplicas(2, rd.Target, up, k, 0)
	if err != nil {
		return no, err
	}
	defer reps.close()
	n := 2000
	if o.maxRequests > 0 && o.maxRequests < int64(n) { // -n bounds this part too
		n = int(o.maxRequests)
	}
	base := time.Now().Add(-4 * time.Hour).Unix()
	client := newClient(1)
	st := newStamps()
	targets := make([]string, n)
	for i := range targets {
		targets[i] = reportTarget(feeds[i%len(feeds)], base-int64(i))
	}
	read := func(at string, h *histogram) error {
		for _, t := range targets {
			start := time.Now()
			a, err := get(ctx, client, st, &k, at, t)
			if err != nil {
				return err
			}
			if a.status != http.StatusOK {
				return fmt.Errorf("%s: status %d", t, a.status)
			}
			h.record(time.Since(start))
		}
		return nil
	}
	var fill, l2, l1 histogram
	if err := read(reps.bases[0], &fill); err != nil { // fills both tiers
		return no, err
	}
	if err := read(reps.bases[1], &l2); err != nil { // memory miss, Redis hit
		return no, err
	}
	if err := read(reps.bases[1], &l1); err != nil { // memory hit
		return no, err
	}
	fmt.Fprintf(o.out, "\nhit latency, %d reports read one at a time (client, gateway and Redis on loopback):\n", n)
	fmt.Fprintf(o.out, "%-34s %9s %9s %9s\n", "", "p50", "p90", "p99")
	for _, x := range []struct {
		label string
		h     *histogram
	}{{"upstream fill (first replica)", &fill}, {"from Redis (second replica)", &l2}, {"from memory (second replica, again)", &l1}} {
		fmt.Fprintf(o.out, "%-34s %9s %9s %9s\n", x.label, fmtDur(x.h.quantile(0.5)), fmtDur(x.h.quantile(0.9)), fmtDur(x.h.quantile(0.99)))
	}
	fmt.Fprintf(o.out, "added by the shared tier (Redis vs memory): p50 %s, p90 %s\n",
		diff(l2.quantile(0.5), l1.quantile(0.5)), diff(l2.quantile(0.9), l1.quantile(0.9)))

	// The tier's lookup alone: one EVALSHA, decode, checksum, Check.
	rc, err := redisconn.New(rd.Conn, redisconn.Options{})
	if err != nil {
		return no, err
	}
	defer rc.Close()
	tier, err := shared.New(shared.Config{Client: rc})
	if err != nil {
		return no, err
	}
	body := make([]byte, 1600) // about a V3 report as stored
	for i := range body {
		body[i] = 'x'
	}
	var look histogram
	keys := make([]string, n)
	for i := range keys {
		keys[i] = cache.ReportKey(mainnet, "", feeds[i%len(feeds)], base-int64(i)-100000)
		tier.Set(ctx, keys[i], &cache.Entry{Status: http.StatusOK, Body: body, Stored: time.Now()})
	}
	never := func(context.Context) (*cache.Entry, error) { return nil, errors.New("not held") }
	for _, key := range keys {
		start := time.Now()
		if _, err := tier.Fill(ctx, key, nil, never); err != nil {
			return no, fmt.Errorf("tier lookup: %w", err)
		}
		look.record(time.Since(start))
	}
	fmt.Fprintf(o.out, "shared tier lookup alone (1.6 KB entry, no HTTP): p50 %s, p90 %s, p99 %s\n",
		fmtDur(look.quantile(0.5)), fmtDur(look.quantile(0.9)), fmtDur(look.quantile(0.99)))
	return hitCost{mode: rd.Mode, fromRedis: l2.quantile(0.99), fromMemory: l1.quantile(0.99), lookup: look.quantile(0.99)}, nil
}

// replicaSet is n gateways (server.New, as the binary builds them) that
// share limits and the cache tier through one Redis (a node, a Sentinel
// set or a Cluster).
type replicaSet struct {
	srvs  []*server.Server
	bases []string // mainnet base URLs
	set   *replicaset.Set
}

func startReplicas(n int, rt config.RedisTarget, up *replicaset.Upstream, k key, ttl time.Duration) (*replicaSet, error) {
	set, err := replicaset.Start(replicaset.Config{
		Upstream: up, Replicas: n, Redis: &rt, Warm: 30 * time.Second,
		Gateway: func(_ *replicaset.Upstream, _ int, cfg *config.Config) {
			if ttl > 0 {
				cfg.Cache.LatestTTL = ttl
			}
			cfg.Auth.AnonymousRate = config.Rate{}
			for _, nc := range cfg.Networks {
				nc.Upstream.Budget = config.Rate{RPS: 100000, Burst: 100000}
			}
			demo := cfg.Team(config.DemoTeam)
			demo.Rate = config.Rate{}
			demo.Keys = append(demo.Keys, config.Key{ID: k.ID, Secret: config.Secret(k.Secret)})
		},
	})
	if err != nil {
		return nil, err
	}
	rs := &replicaSet{set: set, bases: set.Bases(mainnet)}
	for _, r := range set.Replicas() {
		rs.srvs = append(rs.srvs, r.Server)
	}
	return rs, nil
}

// sum adds up a counter or gauge over the replicas, its samples whose
// label has value (label "" for all).
func (rs *replicaSet) sum(name, label, value string) float64 {
	regs := make([]prometheus.Gatherer, len(rs.srvs))
	for i, srv := range rs.srvs {
		regs[i] = srv.Registry()
	}
	return sumMetric(regs, name, label, value)
}

func (rs *replicaSet) close() { rs.set.Close() }
