package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"streamgate/auth"
	"streamgate/config"
	"streamgate/internal/testing/balancer"
	"streamgate/internal/testing/fleet"
	"streamgate/internal/testing/replicaset"
	"streamgate/server"
	"streamgate/upstreamsim"
)

// continuityFeedsPerClient is how many streams each continuity client
// subscribes to.
const continuityFeedsPerClient = 3

// scenarioContinuity: N WebSocket clients (a tenth of them in HA mode:
// one connection per origin the gateway advertises, deduplicated as the
// SDKs do) over three replicas sharing one Redis, behind a readiness-aware
// balancer; every client reconnects one second after a close. The
// replicas are restarted one after the other (each drained as SIGTERM
// drains it, then a new one started and ready), then the upstream has an
// outage of 8 s (REST and WebSocket refused, connections dropped). Counted
// per client and stream from its first report to the newest second at the
// end: missing (stream, second) pairs, pairs received twice (plain), the
// time from each reconnect to live (the newest second any client had when
// it connected, on every stream), and the history kept in Redis per
// stream. Each client has a key of its own. The same run with resume and backfill off
// (realtime.resume_window and backfill_max 0s) is the baseline.
func scenarioContinuity(ctx context.Context, o *options) error {
	if !o.set["c"] {
		o.conc = 1000
	}
	if !o.set["streams"] {
		o.streams = 10
	}
	if o.streams < continuityFeedsPerClient {
		return fmt.Errorf("-streams must be at least %d", continuityFeedsPerClient)
	}
	if o.dur < 3*time.Second || o.dur > 2*time.Minute {
		return errors.New("continuity: -d (the steady time between the events) between 3s and 2m")
	}
	rd, err := startModeRedis(o, redisSingle)
	if err != nil {
		return err
	}
	defer rd.Close()
	redisURL, admin := rd.Target.URL, rd.Admin

	sim, err := upstreamsim.New(upstreamsim.Default()) // 10 requests per second per key and endpoint
	if err != nil {
		return err
	}
	defer sim.Close()
	upstream, err := replicaset.StartUpstream(replicaset.UpstreamConfig{Sim: sim, Networks: []string{mainnet}})
	if err != nil {
		return err
	}
	defer upstream.Close()
	feeds, err := publishingStreams(sim, mainnet, o.streams, false)
	if err != nil {
		return err
	}
	fmt.Fprintf(o.out, "continuity: %d WebSocket clients (%d in HA mode), each of %d of %d publishing mainnet streams, over 3 replicas "+
		"sharing one Redis behind a readiness-aware balancer; clients reconnect 1 s after a close; %v steady between a rolling restart "+
		"of every replica and an upstream outage of 8 s\n", o.conc, o.conc/10, continuityFeedsPerClient, len(feeds), o.dur)
	var runs []*contRun
	for _, side := range []struct {
		name       string
		continuity bool
	}{{"streamgate", true}, {"streamgate, resume and backfill off (baseline)", false}} {
		if err := admin.FlushAll(ctx).Err(); err != nil {
			return fmt.Errorf("redis: %w", err)
		}
		r, err := runContinuity(ctx, o, sim, upstream, redisURL, admin, feeds, side.continuity)
		if err != nil {
			return fmt.Errorf("%s: %w", side.name, err)
		}
		r.print(o, side.name)
		runs = append(runs, r)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	a, b := runs[0], runs[1]
	fmt.Fprintf(o.out, "against the baseline: missing pairs %d vs %d (plain), %d vs %d (HA); heap %+.1f MiB (%+.0f KiB per stream and replica, the history and what else resume and backfill hold)\n",
		a.missing, b.missing, a.haMissing, b.haMissing, (float64(a.heapInUse)-float64(b.heapInUse))/(1<<20),
		(float64(a.heapInUse)-float64(b.heapInUse))/1024/float64(3*len(feeds)))
	return nil
}

// contReplica is one in-process replica and its readiness endpoint.
type contReplica struct {
	*replicaset.Replica
	ready *http.Server
	addr  string
}

// configure makes cfg, config.Default() on the simulator's mainnet, a
// replica of the scenario: limits in Redis, the demo team alone with the
// clients' keys, and realtime's resume and backfill off unless
// continuity.
func (cf *contFleet) configure(cfg *config.Config) {
	cfg.RateLimit.Backend, cfg.RateLimit.Redis.URL = config.BackendRedis, cf.redisURL
	cfg.Auth.AnonymousRate = config.Rate{}
	cfg.Realtime.TeamConnections = cf.conns
	if !cf.continuity {
		cfg.Realtime.ResumeWindow, cfg.Realtime.BackfillMax = 0, 0
	}
	for _, nc := range cfg.Networks {
		nc.Upstream.Budget = config.Rate{RPS: 8, Burst: 8} // under the simulator's 10/s, all replicas together
	}
	cfg.Teams = slices.DeleteFunc(cfg.Teams, func(t config.Team) bool { return t.Name != config.DemoTeam })
	demo := cfg.Team(config.DemoTeam)
	demo.Rate = config.Rate{}
	for _, k := range cf.keys {
		demo.Keys = append(demo.Keys, config.Key{ID: k.ID, Secret: config.Secret(k.Secret)})
	}
}

// serveReady serves r's readiness on a free loopback port and returns
// its URL.
func (r *contReplica) serveReady() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	srv := r.Server
	r.ready = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if srv.Ready() {
			w.WriteHeader(http.StatusOK)
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	})}
	go r.ready.Serve(ln)
	return "http://" + ln.Addr().String() + "/readyz", nil
}

func (r *contReplica) close() {
	r.Server.Close()
	if r.ready != nil {
		r.ready.Close()
	}
}

// contRun is one side's figures.
type contRun struct {
	clients, ha                    int
	missing, repeated, disordered  int64
	haMissing                      int64
	pairs                          int64
	reconnects, failures, unsettle int64
	toLive                         histogram
	liveTimeouts                   int64
	historyKeys                    int
	historyBytes, historyEntries   int64
	heapInUse                      uint64  // this process (replicas, clients, simulator) after the count, after a collection
	frameBytes                     float64 // mean frame of the streams, as the upstream sends it
	historySeconds                 int64   // realtime.resume_window: the seconds of history each replica keeps per stream
	restart, outage                time.Duration
	lastErr                        string
	acct                           contAccount
}

// contAccount is where the seconds went, summed over every replica of a
// side (those a restart replaced too), and the upstream's REST calls
// during the side: what explains a missing pair.
type contAccount struct {
	resumed, replayed          float64 // streamgate_ws_resumed_total, _replayed_reports_total
	dropTeam, dropTotal        float64 // streamgate_ws_resume_records_dropped_total by reason: those clients start live
	filled, unfilled           float64 // streamgate_ws_backfilled_seconds_total, streamgate_ws_gaps_unfilled_total
	chargeRefused              float64 // resume fills refused by the team's daily quota (streamgate_ratelimit_rejections_total{limit="daily"})
	upstreamREST, upstreamBulk int64   // the simulator's REST requests during the side, and of them bulk
	upstream429                int64
}

// contFleet is the three in-process replicas of a side behind the
// balancer. They run in this process rather than as processes of the
// binary (internal/testing/fleet's) because the scenario reports this process's
// heap (replicas, clients, simulator) against the baseline's, the
// history's cost; the balancer, the Redis and the counting clients are
// internal/testing/fleet's.
type contFleet struct {
	bal        *balancer.Balancer
	set        *replicaset.Set
	reps       []*contReplica
	redisURL   string
	keys       []key
	conns      int
	continuity bool
	regs       []prometheus.Gatherer // every replica's, in start order
}

// startContFleet starts the balancer and three replicas, each routed to.
func startContFleet(o *options, upstream *replicaset.Upstream, redisURL string, keys []key, continuity bool) (_ *contFleet, err error) {
	bal, err := balancer.Listen("127.0.0.1:0", balancer.Options{Interval: 100 * time.Millisecond})
	if err != nil {
		return nil, err
	}
	cf := &contFleet{bal: bal, reps: make([]*contReplica, 3), redisURL: redisURL, keys: keys,
		conns: 2*o.conc + 50, continuity: continuity}
	defer func() {
		if err != nil {
			cf.close()
		}
	}()
	cf.set, err = replicaset.Start(replicaset.Config{Upstream: upstream, WS: true,
		Gateway: func(_ *replicaset.Upstream, _ int, cfg *config.Config) { cf.configure(cfg) },
		Options: func(int) server.Options {
			reg := prometheus.NewRegistry()
			cf.regs = append(cf.regs, reg)
			return server.Options{Registry: reg}
		}})
	if err != nil {
		return nil, err
	}
	for i := range cf.reps {
		if err := cf.start(i); err != nil {
			return nil, err
		}
	}
	return cf, nil
}

// start starts replica i and returns when the balancer routes to it.
func (cf *contFleet) start(i int) error {
	rep, err := cf.set.Add()
	if err != nil {
		return err
	}
	r := &contReplica{Replica: rep, addr: rep.Server.Addr(mainnet)}
	cf.reps[i] = r
	readyURL, err := r.serveReady()
	if err != nil {
		return err
	}
	select {
	case <-cf.bal.Add(balancer.Backend{Addr: r.addr, Ready: readyURL}):
		return nil
	case <-time.After(60 * time.Second):
		return errors.New("a replica was not ready within 60s")
	}
}

// restart drains each replica in turn as SIGTERM drains it, then starts
// its successor and waits until it is routed to.
func (cf *contFleet) restart(ctx context.Context) error {
	for i, old := range cf.reps {
		cf.set.Remove(old.Replica)
		sctx, scancel := context.WithTimeout(ctx, time.Minute)
		old.Server.Shutdown(sctx) // what SIGTERM does: drain, then stop
		scancel()
		old.ready.Close()
		cf.bal.Remove(old.addr)
		cf.reps[i] = nil
		if err := cf.start(i); err != nil {
			return err
		}
	}
	return nil
}

func (cf *contFleet) close() {
	for _, r := range cf.reps {
		if r != nil {
			cf.set.Remove(r.Replica)
			r.close()
		}
	}
	if cf.set != nil {
		cf.set.Close()
	}
	cf.bal.Close()
}

// contClient is one streaming application: a counting client of
// internal/testing/fleet and its streams' indices in the scenario's.
type contClient struct {
	*fleet.Client
	feeds []int
}

// contClients are a side's clients and what they share.
type contClients struct {
	list   []*contClient
	live   []atomic.Int64 // per stream, the newest second any client has
	notify fleet.Notifier
	toLive sync.Mutex // guards run.toLive
}

// startContClients starts o.conc clients (every tenth in HA mode), each
// with its own key, of continuityFeedsPerClient streams, in waves of 50.
// Each records in run.toLive the time from a reconnect until it has, on
// every stream, the newest second any client had when it connected.
func startContClients(ctx context.Context, wg *sync.WaitGroup, o *options, base string, keys []key, feeds []string, run *contRun) *contClients {
	cs := &contClients{live: make([]atomic.Int64, len(feeds))}
	st := newStamps()
	for i := range o.conc {
		c := &contClient{}
		for j := range continuityFeedsPerClient {
			c.feeds = append(c.feeds, (i+j*7)%len(feeds))
		}
		slices.Sort(c.feeds)
		c.feeds = slices.Compact(c.feeds)
		names := make([]string, len(c.feeds))
		for j, f := range c.feeds {
			names[j] = feeds[f]
		}
		k := keys[i]
		c.Client = fleet.NewClient(fleet.ClientConfig{Base: base, Feeds: names, HA: i%10 == 9,
			Sign: func(req *http.Request) {
				target := req.URL.RequestURI()
				if req.Method == http.MethodHead {
					target = "HEAD /"
				}
				auth.Sign(req, k.ID, k.Secret, time.UnixMilli(st.next(i, target, time.Now())))
			},
			DiscoverTries: 5, DialTimeout: 10 * time.Second, Notify: &cs.notify,
			OnConnect: func(first bool) fleet.Watch { return cs.watch(c, first, run) }})
		if c.HA() {
			run.ha++
		}
		cs.list = append(cs.list, c)
		c.Run(ctx, wg)
		if i%50 == 49 {
			time.Sleep(50 * time.Millisecond) // connect in waves
		}
	}
	return cs
}

// watch is what client c does with each report of a connection: it
// raises the streams' live second and, on a reconnect, records the time
// until c has every stream's live second as it was at the connect. Only
// the end of a connection that had not got there is noted as an error.
func (cs *contClients) watch(c *contClient, first bool, run *contRun) fleet.Watch {
	at := time.Now()
	want := make([]int64, len(c.feeds))
	for j, f := range c.feeds {
		want[j] = cs.live[f].Load()
	}
	measured := first // the first connection is not a reconnect
	return fleet.Watch{Quiet: func() bool { return measured }, Report: func(j int, ts int64) {
		live := &cs.live[c.feeds[j]]
		for cur := live.Load(); ts > cur && !live.CompareAndSwap(cur, ts); cur = live.Load() {
		}
		if measured {
			return
		}
		for g, w := range want {
			if c.HighestAt(g) < w {
				return
			}
		}
		measured = true
		cs.toLive.Lock()
		run.toLive.record(time.Since(at))
		cs.toLive.Unlock()
	}}
}

// allLive waits (at most 2 minutes) until every client has received
// every one of its streams.
func (cs *contClients) allLive(ctx context.Context) error {
	n := 0
	cs.notify.Await(ctx, 2*time.Minute, func() bool {
		n = 0
		for _, c := range cs.list {
			all := true
			for j := range c.feeds {
				all = all && c.HighestAt(j) > 0
			}
			if all {
				n++
			}
		}
		return n == len(cs.list)
	})
	if n < len(cs.list) {
		return fmt.Errorf("%d of %d clients received every stream within 2m", n, len(cs.list))
	}
	return nil
}

// settle takes, per stream, the newest second any client has, and waits
// (at most a minute) until every client has it; it returns those seconds
// and the client streams still behind.
func (cs *contClients) settle(ctx context.Context) ([]int64, int64) {
	hi := make([]int64, len(cs.live))
	for f := range hi {
		hi[f] = cs.live[f].Load()
	}
	var behind int64
	cs.notify.Await(ctx, time.Minute, func() bool {
		behind = 0
		for _, c := range cs.list {
			for j, f := range c.feeds {
				if c.HighestAt(j) < hi[f] {
					behind++
				}
			}
		}
		return behind == 0
	})
	return hi, behind
}

// count adds up the clients' (stream, second) pairs, each stream's from
// the client's first report to hi, and their connections.
func (cs *contClients) count(run *contRun, hi []int64) {
	for _, c := range cs.list {
		st := c.Stats()
		run.reconnects += int64(st.Reconnects)
		run.failures += int64(st.Failures)
		if st.LastErr != "" {
			run.lastErr = st.LastErr
		}
		lo, his := map[string]int64{}, map[string]int64{}
		for j, name := range c.Feeds() {
			if first, ok := c.First(name); ok {
				lo[name], his[name] = first-1, hi[c.feeds[j]]
			}
		}
		t := c.Count(0, lo, his)
		run.pairs += int64(t.Pairs)
		run.repeated += int64(t.Repeated)
		run.disordered += int64(t.Disordered)
		if c.HA() {
			run.haMissing += int64(t.Missing)
		} else {
			run.missing += int64(t.Missing)
		}
	}
}

// runContinuity runs one side: the fleet, the clients, the steady time,
// a rolling restart, the steady time, an 8 s upstream outage and the
// steady time again, then the count.
func runContinuity(ctx context.Context, o *options, sim *upstreamsim.Simulator, upstream *replicaset.Upstream, redisURL string, admin redis.UniversalClient, feeds []string, continuity bool) (*contRun, error) {
	// Each client has a key of its own, as separate applications do (a
	// returning client is known by its key and its streams).
	keys := make([]key, o.conc)
	for i := range keys {
		id, secret := benchKey("c", i)
		keys[i] = key{ID: id, Secret: []byte(secret)}
	}
	cf, err := startContFleet(o, upstream, redisURL, keys, continuity)
	if err != nil {
		return nil, err
	}
	defer cf.close()
	cctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	run := &contRun{clients: o.conc}
	rest := func() (all, bulk, tooMany int64) {
		c := sim.Counters()
		all = c.Sum(func(x upstreamsim.Count) bool {
			return x.Endpoint != upstreamsim.EndpointWS && x.Endpoint != upstreamsim.EndpointRoot
		})
		bulk = c.Sum(func(x upstreamsim.Count) bool { return x.Endpoint == upstreamsim.EndpointBulk })
		tooMany = c.Sum(func(x upstreamsim.Count) bool {
			return x.Status == http.StatusTooManyRequests && x.Endpoint != upstreamsim.EndpointWS
		})
		return all, bulk, tooMany
	}
	rest0, bulk0, tooMany0 := rest()
	cs := startContClients(cctx, &wg, o, "http://"+cf.bal.Addr(), keys, feeds, run)
	if err := cs.allLive(ctx); err != nil {
		return nil, err
	}
	if err := runContinuityEvents(ctx, o, sim, cf, run); err != nil {
		return nil, err
	}
	hi, behind := cs.settle(ctx)
	run.unsettle = behind
	// The process's heap while everything is still up, after a collection:
	// compared with the baseline's (no history), it is the history's cost.
	run.heapInUse, _ = heap()
	if err := run.measureHistory(ctx, sim, admin, feeds, hi, continuity); err != nil {
		return nil, err
	}
	cancel()
	wg.Wait()
	cs.count(run, hi)
	a := &run.acct
	a.resumed = sumMetric(cf.regs, "streamgate_ws_resumed_total", "", "")
	a.replayed = sumMetric(cf.regs, "streamgate_ws_replayed_reports_total", "", "")
	a.dropTeam = sumMetric(cf.regs, "streamgate_ws_resume_records_dropped_total", "reason", "team")
	a.dropTotal = sumMetric(cf.regs, "streamgate_ws_resume_records_dropped_total", "reason", "total")
	a.filled = sumMetric(cf.regs, "streamgate_ws_backfilled_seconds_total", "", "")
	a.unfilled = sumMetric(cf.regs, "streamgate_ws_gaps_unfilled_total", "", "")
	a.chargeRefused = sumMetric(cf.regs, "streamgate_ratelimit_rejections_total", "limit", "daily")
	all, bulk, tooMany := rest()
	a.upstreamREST, a.upstreamBulk, a.upstream429 = all-rest0, bulk-bulk0, tooMany-tooMany0
	return run, nil
}

// runContinuityEvents waits the steady time, restarts the replicas one
// after the other, waits the steady time, has the upstream fail for 8 s
// and waits the steady time again.
func runContinuityEvents(ctx context.Context, o *options, sim *upstreamsim.Simulator, cf *contFleet, run *contRun) error {
	sleep := func(d time.Duration) {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
	sleep(o.dur)
	began := time.Now()
	if err := cf.restart(ctx); err != nil {
		return err
	}
	run.restart = time.Since(began)
	sleep(o.dur)
	began = time.Now()
	sim.Outage(8 * time.Second)
	sleep(8 * time.Second)
	run.outage = time.Since(began)
	sleep(o.dur)
	return nil
}

// measureHistory records the mean frame of the streams at their seconds
// hi, the history's seconds, and the history in Redis: every key of type
// stream.
func (run *contRun) measureHistory(ctx context.Context, sim *upstreamsim.Simulator, admin redis.UniversalClient, feeds []string, hi []int64, continuity bool) error {
	for i, f := range feeds {
		rep, ok := sim.Report(upstreamsim.Mainnet, f, hi[i])
		if !ok {
			return fmt.Errorf("the simulator has no report of %s", f)
		}
		b, err := json.Marshal(struct {
			Report upstreamsim.Report `json:"report"`
		}{rep})
		if err != nil {
			return err
		}
		run.frameBytes += float64(len(b)) / float64(len(feeds))
	}
	if continuity {
		run.historySeconds = int64(config.Default().Realtime.ResumeWindow / time.Second)
	}
	var cursor uint64
	for {
		keys, next, err := admin.ScanType(ctx, cursor, "*", 1000, "stream").Result()
		if err != nil {
			return fmt.Errorf("redis scan: %w", err)
		}
		for _, key := range keys {
			run.historyKeys++
			if n, err := admin.MemoryUsage(ctx, key).Result(); err == nil {
				run.historyBytes += n
			}
			if n, err := admin.XLen(ctx, key).Result(); err == nil {
				run.historyEntries += n
			}
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

func (r *contRun) print(o *options, name string) {
	fmt.Fprintf(o.out, "%s:\n", name)
	fmt.Fprintf(o.out, "  rolling restart of 3 replicas: %v; upstream outage: %v\n", r.restart.Round(time.Millisecond), r.outage.Round(time.Millisecond))
	fmt.Fprintf(o.out, "  (stream, second) pairs counted: %d over %d clients (%d HA)\n", r.pairs, r.clients, r.ha)
	fmt.Fprintf(o.out, "  missing pairs: plain %d, HA %d (goal 0); repeated pairs (plain): %d (goal 0); out of order: %d\n",
		r.missing, r.haMissing, r.repeated, r.disordered)
	fmt.Fprintf(o.out, "  reconnects: %d; failed connects: %d; client streams still behind at the end: %d\n", r.reconnects, r.failures, r.unsettle)
	a := r.acct
	fmt.Fprintf(o.out, "  where the seconds went (every replica): %.0f resumed of %d reconnects, %.0f reports replayed; resume records dropped by the bounds: %.0f team, %.0f total (those clients start live); "+
		"seconds filled over REST %.0f, unfilled %.0f; daily quota refusals %.0f\n",
		a.resumed, r.reconnects, a.replayed, a.dropTeam, a.dropTotal, a.filled, a.unfilled, a.chargeRefused)
	fmt.Fprintf(o.out, "  upstream REST calls during the run: %d (bulk %d), 429 answers %d\n", a.upstreamREST, a.upstreamBulk, a.upstream429)
	if r.toLive.n > 0 {
		fmt.Fprintf(o.out, "  reconnect to live (every stream at the newest second seen when it connected): p50 %s, p99 %s, max %s over %d reconnects\n",
			fmtDur(r.toLive.quantile(0.5)), fmtDur(r.toLive.quantile(0.99)), fmtDur(r.toLive.max), r.toLive.n)
	}
	fmt.Fprintf(o.out, "  heap in use at the end (this process: 3 replicas, %d clients, the simulator): %.1f MiB\n", r.clients, float64(r.heapInUse)/(1<<20))
	if r.historySeconds > 0 {
		fmt.Fprintf(o.out, "  history per stream and replica: %d s × %.0f-byte frames = %.0f KiB of frames (the hub keeps each frame of the last resume_window)\n",
			r.historySeconds, r.frameBytes, float64(r.historySeconds)*r.frameBytes/1024)
	}
	if r.historyKeys > 0 {
		fmt.Fprintf(o.out, "  history in Redis: %d stream keys, %d entries, %d bytes: %.0f bytes and %.0f entries per key\n",
			r.historyKeys, r.historyEntries, r.historyBytes, float64(r.historyBytes)/float64(r.historyKeys), float64(r.historyEntries)/float64(r.historyKeys))
	}
	if r.lastErr != "" {
		fmt.Fprintf(o.out, "  a client's last error: %.200s\n", r.lastErr)
	}
}
